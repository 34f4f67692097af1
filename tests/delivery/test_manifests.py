"""The deployment manifests (knative/) against what reads them.

- kustomize (the real one, built from its Go module) renders knative/ and its overlays;
- the real API server (tests/support/controlplane) with the real Knative Serving/Eventing CRDs and the
  training operator's CRDs validates every rendered object by a server-side apply with
  ``dryRun=All`` and ``fieldValidation=Strict``, so a schema error or a misspelt field fails;
- the ApiServerSource's watched group/versions are served (its adapter exits otherwise) and its
  ServiceAccount passes the same SubjectAccessReviews Knative's controller runs;
- the function's own settings loader accepts the Service's environment;
- Knative's own webhook logic (SetDefaults + Validate from the serving/eventing Go modules,
  tests/support/deploy/knativevalidate) accepts the Knative objects: no Knative webhook runs in the
  test cluster, so that is what rejects e.g. a reserved PORT variable or min-scale > max-scale;
- knative/function/rbac.yaml grants exactly the API calls the function makes;
- the source watches, and each ClusterRole grants, exactly what tests/fixtures/facts.py writes
  out literally (never what podsweeper.kinds lists: a new kind or link in the package must not
  widen what these tests accept; tests/unit/test_facts.py holds the two tables together).

Each "accepts" test has a "rejects" control that breaks a manifest on purpose.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml

from tests.fixtures import facts
from tests.fixtures.facts import JOB_NAME_LABEL, JOBSET_NAME_LABEL
from tests.support.kubectl import RawApi

REPO = Path(__file__).resolve().parents[2]
KNATIVE = REPO / "knative"
KUSTOMIZATIONS = (
    "knative",
    "knative/overlays/live",
    "knative/overlays/mpi-operator",
    "knative/overlays/training-operator-only",
    "knative/overlays/trainer-v2-only",
    "knative/overlays/crashloop-suspend",
    "knative/overlays/stuck-terminating",
    "knative/overlays/trainjob-ttl",
    "knative/overlays/without-serving",
    "knative/overlays/live-without-serving",
)
# Each watch component appends one generation's entries to the source (knative/source/watch/).
WATCH_COMPONENTS = ("training-operator", "mpijob-v1", "mpijob-v2beta1", "trainer-v2")
FIELD_MANAGER = "podsweeper-manifest-test"

# The kustomize kubectl 1.27 embeds, the oldest kubectl podsweeper supports (`kubectl apply -k`).
KUBECTL_1_27_KUSTOMIZE = "v5.0.1"


def exists(label: str) -> dict:
    return {"matchExpressions": [{"key": label, "operator": "Exists"}]}


def watch(api_version: str, kind: str, selector: dict | None = None) -> dict:
    """One ApiServerSource spec.resources entry."""
    return {"apiVersion": api_version, "kind": kind, **({"selector": selector} if selector else {})}


# What the source must watch, in the order its watch components (knative/source/watch/) append
# it. Training Operator v1: each job kind at the version a plain cluster serves, and the pods
# labelled with a job's name; MPIJob last, from its own component (v1 or the mpi-operator's).
V1_WATCHES = [
    watch("kubeflow.org/v1", "PyTorchJob"),
    watch("kubeflow.org/v1", "TFJob"),
    watch("kubeflow.org/v1", "XGBoostJob"),
    watch("kubeflow.org/v1", "PaddleJob"),
    watch("kubeflow.org/v1", "JAXJob"),
    watch("v1", "Pod", exists(JOB_NAME_LABEL)),
    watch("kubeflow.org/v1", "MPIJob"),
]
# Trainer v2: the TrainJob, its JobSets (all of them: a TrainJob's JobSet carries no label of
# its own), the batch Jobs a JobSet labelled, and their pods, by the same label.
V2_WATCHES = [
    watch("trainer.kubeflow.org/v1alpha1", "TrainJob"),
    watch("jobset.x-k8s.io/v1alpha2", "JobSet"),
    watch("batch/v1", "Job", exists(JOBSET_NAME_LABEL)),
    watch("v1", "Pod", exists(JOBSET_NAME_LABEL)),
]
# Each RBAC manifest, and what its ClusterRole grants whom (tests/fixtures/facts.py).
RBAC_MANIFESTS = {
    "function/rbac.yaml": (facts.FUNCTION_RBAC, facts.FUNCTION_SUBJECT),
    "source/rbac.yaml": (facts.SOURCE_RBAC, facts.SOURCE_SUBJECT),
    "overlays/crashloop-suspend/suspend-rbac.yaml": (facts.SUSPEND_RBAC, facts.FUNCTION_SUBJECT),
    "overlays/stuck-terminating/nodes-rbac.yaml": (facts.NODES_RBAC, facts.FUNCTION_SUBJECT),
    "overlays/trainjob-ttl/trainjobs-rbac.yaml": (facts.TRAINJOBS_RBAC, facts.FUNCTION_SUBJECT),
}


# --- helpers -------------------------------------------------------------------------------


def by_kind(objects: list[dict], kind: str, api_group: str | None = None) -> list[dict]:
    return [
        o
        for o in objects
        if o["kind"] == kind and (api_group is None or o["apiVersion"].rpartition("/")[0] == api_group)
    ]


def one(objects: list[dict], kind: str, api_group: str | None = None) -> dict:
    found = by_kind(objects, kind, api_group)
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def rules_table(cluster_role: dict) -> dict[tuple[str, str], set[str]]:
    """(apiGroup, resource) -> verbs, with every rule's lists multiplied out."""
    table: dict[tuple[str, str], set[str]] = {}
    for rule in cluster_role.get("rules") or []:
        assert set(rule) <= {"apiGroups", "resources", "verbs"}, (
            f"unexpected rule fields (resourceNames, nonResourceURLs, ...): {rule}"
        )
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                table.setdefault((group, resource), set()).update(rule["verbs"])
    return table


def guess_plural(kind: str) -> str:
    """k8s.io/apimachinery meta.UnsafeGuessKindToResource, as Knative's controller uses it."""
    lower = kind.lower()
    if lower.endswith("s"):
        return lower + "es"
    if lower.endswith("y"):
        return lower[:-1] + "ies"
    return lower + "s"


def ksvc_container(objects: list[dict]) -> dict:
    svc = one(objects, "Service", "serving.knative.dev")
    containers = svc["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def env_of(container: dict) -> dict[str, str]:
    env = {}
    for item in container.get("env") or []:
        assert "valueFrom" not in item, f"{item['name']}: only literal values expected"
        assert item["name"] not in env, f"{item['name']} set twice"
        env[item["name"]] = item.get("value", "")
    return env


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[dict]]:
    from tests.support.tools.kustomize import render

    return {name: render(REPO / name) for name in KUSTOMIZATIONS}


# --- the function's RBAC (no cluster, no kustomize) ---------------------------------------


def test_function_clusterrole_grants_exactly_what_the_function_uses():
    docs = [d for d in yaml.safe_load_all((KNATIVE / "function" / "rbac.yaml").read_text()) if d]
    role = one(docs, "ClusterRole")
    text = json.dumps(role["rules"])
    assert "*" not in text, "no wildcard in the function's ClusterRole"
    # pods, events, the evidence ConfigMaps and pods/log; every training job read (GET) and
    # listed (LIST); a chained job (TrainJob) also suspended (patch) by rule
    # finished-trainjob-restarted, an mpi-operator MPIJob by rule failed-mpijob-running (any
    # other v1 job only with the opt-in overlays/crashloop-suspend); a chain's links (JobSet,
    # batch Job) read, listed and deleted by the v2 rules; Volcano's PodGroup of a TrainJob read
    # and listed by rule failed-trainjob-podgroup. Written out in facts.FUNCTION_RBAC.
    assert rules_table(role) == facts.FUNCTION_RBAC
    # Nothing a training job is: the v2 deletes are of the links only (a TrainJob is the user's;
    # a PodGroup is Trainer's to make again).
    deletable = {key for key, verbs in rules_table(role).items() if "delete" in verbs}
    assert deletable == {("", "pods"), ("jobset.x-k8s.io", "jobsets"), ("batch", "jobs")}

    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "podsweeper", "namespace": "podsweeper"}
    ]
    sa = one(docs, "ServiceAccount")
    assert (sa["metadata"]["namespace"], sa["metadata"]["name"]) == ("podsweeper", "podsweeper")


@pytest.mark.parametrize("manifest", list(RBAC_MANIFESTS))
def test_each_rbac_manifest_grants_exactly_its_literal_table(manifest):
    """Every ClusterRole we ship, as written, against its table in tests/fixtures/facts.py:
    a rule added to a manifest (or a kind added to the package) fails here until the table
    says so too; and each is bound to its one ServiceAccount only."""
    expected, subject = RBAC_MANIFESTS[manifest]
    docs = [d for d in yaml.safe_load_all((KNATIVE / manifest).read_text()) if d]
    role = one(docs, "ClusterRole")
    assert "*" not in json.dumps(role["rules"]), f"{manifest}: a wildcard"
    assert rules_table(role) == expected, manifest
    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [subject], manifest
    roles = [(r["metadata"]["namespace"], r["metadata"]["name"], r["rules"]) for r in by_kind(docs, "Role")]
    bound = [
        (b["metadata"]["namespace"], b["roleRef"]["name"], b["subjects"])
        for b in by_kind(docs, "RoleBinding")
    ]
    if manifest == "function/rbac.yaml":
        # The one namespaced grant: the finish records' signing key, in podsweeper's namespace.
        assert roles == [
            (
                "podsweeper",
                "podsweeper-record-key",
                [
                    {
                        "apiGroups": [""],
                        "resources": ["secrets"],
                        "resourceNames": ["podsweeper-record-key"],
                        "verbs": ["get"],
                    },
                    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
                ],
            )
        ], manifest
        assert bound == [("podsweeper", "podsweeper-record-key", [subject])], manifest
    else:
        assert roles == [] and bound == [], manifest


def test_every_rbac_manifest_is_in_the_table():
    """No ClusterRole under knative/ that the test above does not check."""
    found = {
        str(path.relative_to(KNATIVE))
        for path in KNATIVE.rglob("*.yaml")
        if any(d and d.get("kind") in ("ClusterRole", "Role") for d in yaml.safe_load_all(path.read_text()))
    }
    assert found == set(RBAC_MANIFESTS)


# --- the rendered manifests ---------------------------------------------------------------


def test_base_renders_everything_into_namespace_podsweeper(rendered):
    objects = rendered["knative"]
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in objects)
    assert kinds == sorted(
        [
            ("Namespace", "podsweeper"),
            ("ServiceAccount", "podsweeper"),
            ("ServiceAccount", "podsweeper-source"),
            ("ClusterRole", "podsweeper"),
            ("ClusterRole", "podsweeper-source"),
            ("ClusterRoleBinding", "podsweeper"),
            ("ClusterRoleBinding", "podsweeper-source"),
            ("Role", "podsweeper-record-key"),
            ("RoleBinding", "podsweeper-record-key"),
            ("Service", "podsweeper"),
            ("ApiServerSource", "podsweeper"),
            ("PingSource", "podsweeper-sweep"),
            ("ValidatingAdmissionPolicy", "podsweeper-function-writes"),
            ("ValidatingAdmissionPolicyBinding", "podsweeper-function-writes"),
            ("NetworkPolicy", "podsweeper"),
            ("NetworkPolicy", "podsweeper-knative-serving"),
        ]
    )
    cluster_scoped = {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    for o in objects:
        if o["kind"] not in cluster_scoped:
            assert o["metadata"].get("namespace") == "podsweeper", o["metadata"]
        else:
            assert "namespace" not in o["metadata"], o["metadata"]


def test_apiserversource_watches_the_training_jobs_their_links_and_their_pods(rendered):
    objects = rendered["knative"]
    src = one(objects, "ApiServerSource")
    spec = src["spec"]
    assert spec["mode"] == "Resource"  # data = the whole object; Reference would need a GET
    assert spec["namespaceSelector"] == {}  # all namespaces
    # The audience the function requires by default (docs/deploy.md, Sender identity).
    from podsweeper.config import SHIPPED_AUDIENCE, load_settings

    assert spec["sink"] == {
        "ref": {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "name": "podsweeper"},
        "audience": SHIPPED_AUDIENCE,
    }
    assert one(objects, "PingSource")["spec"]["sink"]["audience"] == SHIPPED_AUDIENCE
    assert load_settings().auth_audience == SHIPPED_AUDIENCE
    # v1 first, then v2, as the components append them.
    assert spec["resources"] == V1_WATCHES + V2_WATCHES
    # Every training kind, every link of its chain; pods and batch Jobs only by label.
    watched = {(r["apiVersion"], r["kind"]) for r in spec["resources"]}
    assert {(f"{k.group}/{k.versions[0]}", k.kind) for k in facts.TRAINING_KINDS} <= watched
    assert {(f"{link.group}/{link.version}", link.kind) for link in facts.LINKS} <= watched
    for r in spec["resources"]:
        if r["kind"] in ("Pod", "Job"):
            assert r.get("selector"), f"{r['kind']} watched without a label selector: all of the cluster's"

    # Its ServiceAccount exists in the source's namespace and its ClusterRole covers every
    # watched resource with exactly get/list/watch (what Knative's controller checks).
    sa_name = spec["serviceAccountName"]
    assert any(o["metadata"]["name"] == sa_name for o in by_kind(objects, "ServiceAccount"))
    role = next(o for o in by_kind(objects, "ClusterRole") if o["metadata"]["name"] == sa_name)
    table = rules_table(role)
    assert "*" not in json.dumps(role["rules"])
    needed = {(r["apiVersion"].rpartition("/")[0], guess_plural(r["kind"])) for r in spec["resources"]}
    assert set(table) == needed
    assert table == facts.SOURCE_RBAC
    binding = next(o for o in by_kind(objects, "ClusterRoleBinding") if o["metadata"]["name"] == sa_name)
    assert binding["roleRef"]["name"] == sa_name
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa_name, "namespace": src["metadata"]["namespace"]}
    ]


# --- who may speak to the function: the NetworkPolicies ------------------------------------
# No network plugin runs in any test world here, so nothing enforces a NetworkPolicy: what is
# tested is that each policy selects the function's pods and admits exactly the pods Knative
# Eventing generates, by the labels its own source code (the module the e2e tests run, read from
# the Go module cache) puts on them, and that the API server accepts the policies (the dry-run
# test below).


def eventing_generated_labels(source_name: str) -> tuple[dict[str, str], dict[str, str], str]:
    """(the receive adapter's pod labels, mtping's pod labels, mtping's namespace), from
    knative.dev/eventing's source: the ApiServerSource reconciler's Labels(name) and the
    pingsource-mt-adapter Deployment of its config/core."""
    from tests.support.controlplane.manifests import go_module_dir
    from tests.support.controlplane.versions import ADAPTER_EVENTING_VERSION

    module = go_module_dir("knative.dev/eventing", ADAPTER_EVENTING_VERSION)
    go = (module / "pkg/reconciler/apiserversource/resources/labels.go").read_text()
    constants = dict(re.findall(r'^\s*(\w+)\s*=\s*"([^"]*)"', go, re.M))
    body = go[go.index("func Labels(name string)") :]
    body = body[: body.index("\n}\n")]
    adapter = {}
    for key, value in re.findall(r'"([^"]+)":\s*([\w"./-]+)', body):
        adapter[key] = source_name if value == "name" else constants.get(value, value.strip('"'))
    (mtping,) = [
        d
        for d in yaml.safe_load_all(
            (module / "config/core/deployments/pingsource-mt-adapter.yaml").read_text()
        )
        if d and d.get("kind") == "Deployment"
    ]
    return adapter, mtping["spec"]["template"]["metadata"]["labels"], mtping["metadata"]["namespace"]


def selects(selector: dict, labels: dict[str, str]) -> bool:
    assert set(selector) == {"matchLabels"}, selector  # the only form our policies use
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def admits(
    policy: dict, namespace: str, namespace_labels: dict[str, str], pod_labels: dict[str, str]
) -> bool:
    """Whether one of the policy's ingress peers admits a pod (NetworkPolicy's peer semantics:
    a podSelector alone is the policy's namespace; namespaceSelector and podSelector together
    must both match)."""
    for rule in policy["spec"]["ingress"]:
        for peer in rule["from"]:
            in_namespace = (
                selects(peer["namespaceSelector"], namespace_labels)
                if "namespaceSelector" in peer
                else namespace == policy["metadata"]["namespace"]
            )
            if in_namespace and ("podSelector" not in peer or selects(peer["podSelector"], pod_labels)):
                return True
    return False


def ns_labels(name: str) -> dict[str, str]:
    return {"kubernetes.io/metadata.name": name}  # what the API server sets on every Namespace


def test_the_networkpolicy_admits_only_the_sources_and_the_scraper_in_both_installs(rendered):
    source = one(rendered["knative"], "ApiServerSource")
    adapter, mtping, eventing_ns = eventing_generated_labels(source["metadata"]["name"])
    assert adapter == {
        "eventing.knative.dev/source": "apiserver-source-controller",
        "eventing.knative.dev/sourceName": "podsweeper",
    }
    for install in ("knative", "knative/overlays/without-serving"):
        (policy,) = [
            p for p in by_kind(rendered[install], "NetworkPolicy") if p["metadata"]["name"] == "podsweeper"
        ]
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        # It selects the function's pods: the Deployment's and the Knative Service's template labels.
        if install == "knative":
            pod_labels = one(rendered[install], "Service", "serving.knative.dev")["spec"]["template"][
                "metadata"
            ]["labels"]
        else:
            pod_labels = one(rendered[install], "Deployment")["spec"]["template"]["metadata"]["labels"]
        assert selects(policy["spec"]["podSelector"], pod_labels), install
        # The adapter runs in the source's namespace; Eventing adds sidecar.istio.io/inject too.
        ns = source["metadata"]["namespace"]
        assert admits(policy, ns, ns_labels(ns), {**adapter, "sidecar.istio.io/inject": "true"}), install
        assert admits(policy, eventing_ns, ns_labels(eventing_ns), mtping), install
        assert admits(policy, "monitoring", ns_labels("monitoring"), {"app.kubernetes.io/name": "prometheus"})
        # The controls: another source's adapter, mtping's labels outside knative-eventing, the
        # function's own pods, any pod of a user namespace, an adapter look-alike elsewhere.
        other = {**adapter, "eventing.knative.dev/sourceName": "another"}
        assert not admits(policy, ns, ns_labels(ns), other)
        assert not admits(policy, "team-a", ns_labels("team-a"), mtping)
        assert not admits(policy, ns, ns_labels(ns), pod_labels)
        assert not admits(policy, "team-a", ns_labels("team-a"), {"app": "anything"})
        assert not admits(policy, "team-a", ns_labels("team-a"), adapter)
        (rule,) = policy["spec"]["ingress"]
        assert rule["ports"] == [{"protocol": "TCP", "port": 8080}]
    without = {
        p["metadata"]["name"] for p in by_kind(rendered["knative/overlays/without-serving"], "NetworkPolicy")
    }
    assert without == {"podsweeper"}, "without Knative Serving nothing comes through knative-serving"
    (serving,) = [
        p for p in by_kind(rendered["knative"], "NetworkPolicy") if p["metadata"]["name"] != "podsweeper"
    ]
    assert admits(serving, "knative-serving", ns_labels("knative-serving"), {"app": "activator"})
    assert not admits(serving, "team-a", ns_labels("team-a"), {"app": "activator"})
    template = one(rendered["knative"], "Service", "serving.knative.dev")["spec"]["template"]
    # The activator stays in the path, so the ingress gateway never sends to the pods.
    assert template["metadata"]["annotations"]["autoscaling.knative.dev/target-burst-capacity"] == "-1"


def test_the_namespace_enforces_pod_security_restricted(rendered):
    for install in ("knative", "knative/overlays/without-serving"):
        labels = one(rendered[install], "Namespace")["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "restricted", install


def test_pingsource_is_the_five_minute_backstop(rendered):
    ping = one(rendered["knative"], "PingSource")
    assert ping["spec"]["schedule"] == "*/5 * * * *"
    assert json.loads(ping["spec"]["data"]) == {}
    assert ping["spec"]["sink"]["ref"]["name"] == "podsweeper"


def test_knative_service_runs_the_function_safely(rendered):
    svc = one(rendered["knative"], "Service", "serving.knative.dev")
    assert svc["metadata"]["labels"]["networking.knative.dev/visibility"] == "cluster-local"
    template = svc["spec"]["template"]
    annotations = template["metadata"]["annotations"]
    min_scale = int(annotations["autoscaling.knative.dev/min-scale"])
    max_scale = int(annotations["autoscaling.knative.dev/max-scale"])
    assert 1 <= min_scale <= max_scale
    spec = template["spec"]
    assert spec["serviceAccountName"] == "podsweeper"
    assert 1 <= spec["containerConcurrency"] <= 100

    c = ksvc_container(rendered["knative"])
    assert re.fullmatch(r"[\w./-]+:\d+\.\d+\.\d+", c["image"]), c["image"]
    # Knative reserves PORT (it sets it to the containerPort) and rejects a probe port that
    # differs from the serving port; the Dockerfile's default is 8080 too.
    assert c["ports"] == [{"name": "http1", "containerPort": 8080}]
    assert "PORT" not in env_of(c)
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz"}, probe
    sc = c["securityContext"]
    assert sc == {
        "runAsNonRoot": True,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    # A read-only root needs a writable /tmp for gunicorn's worker heartbeat file.
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    for kind in ("requests", "limits"):
        assert set(c["resources"][kind]) == {"cpu", "memory"}


@pytest.mark.parametrize("kustomization, dry_run", [("knative", True), ("knative/overlays/live", False)])
def test_service_env_is_accepted_by_the_function_settings(rendered, monkeypatch, kustomization, dry_run):
    from podsweeper.config import ENV_PREFIX, Settings, load_settings

    env = env_of(ksvc_container(rendered[kustomization]))
    assert env == {
        "PODSWEEPER_DRY_RUN": "true" if dry_run else "false",
        "PODSWEEPER_NAMESPACES": "",
        "PODSWEEPER_EXCLUDE_NAMESPACES": "kube-system",
        "PODSWEEPER_CRASHLOOP_ACTION": "warn",
        "PODSWEEPER_MAX_DELETES_PER_EVENT": "100",
        "PODSWEEPER_ORPHAN_GRACE_SECONDS": "30",
        "THREADS": "12",
    }
    # Settings ignores unknown PODSWEEPER_* names, so a misspelt one would be silently unused.
    known = {ENV_PREFIX + name.upper() for name in Settings.model_fields}
    assert {n for n in env if n.startswith(ENV_PREFIX)} <= known
    for name in list(os.environ):
        if name.startswith(ENV_PREFIX):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    assert settings.dry_run is dry_run
    assert settings.namespace_allowed("team-a") and not settings.namespace_allowed("kube-system")
    # Knative cuts a request off at timeoutSeconds; the function must answer (503 if the API is
    # slow, so the event is retried) well before that.
    svc = one(rendered[kustomization], "Service", "serving.knative.dev")
    assert settings.event_timeout_seconds < svc["spec"]["template"]["spec"]["timeoutSeconds"]
    # containerConcurrency events in flight plus probes must fit gunicorn's threads.
    assert int(env["THREADS"]) > svc["spec"]["template"]["spec"]["containerConcurrency"]


def test_watch_components_only_append_and_no_patch_names_a_position():
    """Adding a kind is one entry in one component: no overlay removes or replaces an entry by
    its index (which shifts when a kind is inserted)."""
    for path in KNATIVE.rglob("kustomization.yaml"):
        text = path.read_text()
        assert not re.search(r"/spec/resources/\d", text), f"{path}: a positional patch"
    for name in WATCH_COMPONENTS:
        component = yaml.safe_load((KNATIVE / "source" / "watch" / name / "kustomization.yaml").read_text())
        assert component["kind"] == "Component"
        (patch,) = component["patches"]
        ops = yaml.safe_load(patch["patch"])
        assert {op["op"] for op in ops} == {"add"} and {op["path"] for op in ops} == {"/spec/resources/-"}


def test_overlays_change_only_what_they_are_for(rendered):
    base = {(o["kind"], o["metadata"]["name"]): o for o in rendered["knative"]}
    live = rendered["knative/overlays/live"]
    assert [(o["kind"], o["metadata"]["name"]) for o in live] == [("Service", "podsweeper")]
    dry = json.loads(json.dumps(live[0]))
    env = dry["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env[0] == {"name": "PODSWEEPER_DRY_RUN", "value": "false"}
    env[0]["value"] = "true"
    assert dry == base[("Service", "podsweeper")]

    mpi = rendered["knative/overlays/mpi-operator"]
    src = one(mpi, "ApiServerSource")
    watched = {(r["apiVersion"], r["kind"]) for r in src["spec"]["resources"]}
    assert ("kubeflow.org/v2beta1", "MPIJob") in watched and ("kubeflow.org/v1", "MPIJob") not in watched
    # Only MPIJob's version differs from the base's list, in the same place.
    v2beta1 = [watch("kubeflow.org/v2beta1", "MPIJob") if w["kind"] == "MPIJob" else w for w in V1_WATCHES]
    assert src["spec"]["resources"] == v2beta1 + V2_WATCHES
    for o in mpi:
        if o["kind"] != "ApiServerSource":
            assert o == base[(o["kind"], o["metadata"]["name"])]


@pytest.mark.parametrize(
    "overlay, watches",
    [("training-operator-only", V1_WATCHES), ("trainer-v2-only", V2_WATCHES)],
)
def test_one_generation_overlays_keep_only_its_watches(rendered, overlay, watches):
    """A cluster that serves only one of the two APIs: the source names only that one's
    resources (the adapter exits on an unserved group/version); nothing else changes."""
    base = {(o["kind"], o["metadata"]["name"]): o for o in rendered["knative"]}
    objects = rendered[f"knative/overlays/{overlay}"]
    assert {(o["kind"], o["metadata"]["name"]) for o in objects} == {
        ("ServiceAccount", "podsweeper-source"),
        ("ClusterRole", "podsweeper-source"),
        ("ClusterRoleBinding", "podsweeper-source"),
        ("ApiServerSource", "podsweeper"),
        ("PingSource", "podsweeper-sweep"),
    }
    src = json.loads(json.dumps(one(objects, "ApiServerSource")))
    assert src["spec"]["resources"] == watches
    src["spec"]["resources"] = V1_WATCHES + V2_WATCHES
    assert src == base[("ApiServerSource", "podsweeper")]
    for o in objects:
        if o["kind"] != "ApiServerSource":
            assert o == base[(o["kind"], o["metadata"]["name"])]


def test_suspend_overlay_grants_patch_on_the_training_jobs_and_nothing_else():
    """The one extra power of PODSWEEPER_CRASHLOOP_ACTION=suspend is opt-in, and only that."""
    docs = [
        d
        for d in yaml.safe_load_all((KNATIVE / "overlays/crashloop-suspend/suspend-rbac.yaml").read_text())
        if d
    ]
    role = one(docs, "ClusterRole")
    # runPolicy.suspend is the training operator's; a TrainJob's pods never reach crash-loop.
    assert rules_table(role) == facts.SUSPEND_RBAC
    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "podsweeper", "namespace": "podsweeper"}
    ]


def test_suspend_overlay_changes_only_the_crash_loop_action(rendered):
    base = {(o["kind"], o["metadata"]["name"]): o for o in rendered["knative"]}
    overlay = {(o["kind"], o["metadata"]["name"]): o for o in rendered["knative/overlays/crashloop-suspend"]}
    assert set(overlay) == {
        ("Service", "podsweeper"),
        ("ClusterRole", "podsweeper-suspend"),
        ("ClusterRoleBinding", "podsweeper-suspend"),
    }
    service = json.loads(json.dumps(overlay[("Service", "podsweeper")]))
    env = service["spec"]["template"]["spec"]["containers"][0]["env"]
    (action,) = [e for e in env if e["name"] == "PODSWEEPER_CRASHLOOP_ACTION"]
    assert action["value"] == "suspend"
    action["value"] = "warn"
    assert service == base[("Service", "podsweeper")]


def test_the_oldest_kubectls_kustomize_renders_the_same(rendered):
    """`kubectl apply -k knative/` uses kubectl's own kustomize: the oldest kubectl we support,
    1.27, embeds kustomize v5.0.1, built here from its Go module (cached, ~20 s cold) and run
    on every kustomization, so the check runs on every machine instead of only where a kubectl
    happens to be installed. Its render must equal the pinned kustomize's."""
    import subprocess

    from tests.support.tools.kustomize import ensure_kustomize

    oldest = ensure_kustomize(KUBECTL_1_27_KUSTOMIZE)
    for name in KUSTOMIZATIONS:
        out = subprocess.run(
            [str(oldest), "build", str(REPO / name)], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, f"kustomize {KUBECTL_1_27_KUSTOMIZE} build {name}: {out.stderr}"
        assert [d for d in yaml.safe_load_all(out.stdout) if d] == rendered[name], name


# --- against the real API server ----------------------------------------------------------


@pytest.fixture(scope="module")
def api(admin_api, rendered):
    """Admin access to a control plane with the Knative CRDs our manifests use installed."""
    from tests.support.controlplane.manifests import install_crds
    from tests.support.deploy.knative_crds import crds_for, knative_crds

    objects = [o for name in KUSTOMIZATIONS for o in rendered[name]]
    crds = crds_for(objects, knative_crds())
    assert {c["spec"]["names"]["kind"] for c in crds} == {"Service", "ApiServerSource", "PingSource"}
    install_crds(admin_api, crds, timeout=60)
    api = RawApi(admin_api, FIELD_MANAGER)
    # Dry-run creates in a namespace that does not exist are rejected (NamespaceLifecycle):
    # make sure the manifests' namespace really exists (the control-plane fixture normally
    # created it already from function/rbac.yaml).
    namespace = one(rendered["knative"], "Namespace")
    status, data = api.apply(namespace, dry_run=False)
    assert status in (200, 201), data
    return api


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_every_object_passes_server_side_dry_run(api, rendered, kustomization):
    failures = []
    for obj in rendered[kustomization]:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        status, data = api.create(obj, dry_run=True)
        if status == 409:
            assert json.loads(data).get("reason") == "AlreadyExists", data
        elif status != 201:
            failures.append(f"create --dry-run=server {name}: {status} {data.decode()}")
        status, data = api.apply(obj, dry_run=True)
        if status not in (200, 201):
            failures.append(f"apply --server-side --dry-run=server {name}: {status} {data.decode()}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(
    "kind, mutate",
    [
        ("Service", lambda o: o["spec"]["template"]["spec"].update(containerConcurency=10)),
        (
            "Service",
            lambda o: o["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"].update(
                cpu="half"
            ),
        ),
        (
            "Service",
            lambda o: o["spec"]["template"]["spec"]["containers"][0]["securityContext"].update(
                runAsNonRoot="yes"
            ),
        ),
        ("ApiServerSource", lambda o: o["spec"]["resources"][0].update(selectr={})),
        ("PingSource", lambda o: o["spec"].update(schedule=5)),
    ],
)
def test_dry_run_does_reject_a_broken_manifest(api, rendered, kind, mutate):
    """The control for the test above: the schemas are live, a typo does not slip through."""
    obj = json.loads(json.dumps(one(rendered["knative"], kind)))
    mutate(obj)
    status, data = api.create(obj, dry_run=True)
    assert 400 <= status < 500 and status != 409, f"{kind} accepted: {status} {data!r}"


def test_watched_group_versions_are_served(api, rendered):
    """The receive adapter exits at start if a listed group/version is not served.

    Against the training operator's real CRDs (v1.9: all six kinds at kubeflow.org/v1),
    Trainer v2.3.0's (trainjobs) and JobSet v0.12.0's (jobsets), and the built-in batch/v1:
    the base source needs both generations served; each one-generation overlay only its own.
    The mpi-operator overlay's v2beta1 is, as documented, for clusters that serve it instead.
    """
    for name in ("knative", "knative/overlays/training-operator-only", "knative/overlays/trainer-v2-only"):
        src = one(rendered[name], "ApiServerSource")
        for res in src["spec"]["resources"]:
            served = api.resources(res["apiVersion"])
            assert res["kind"] in served, f"{name}: {res['apiVersion']} {res['kind']} not served"
            # The resource the controller guesses is the one served, and the one the facts name.
            assert served[res["kind"]]["name"] == guess_plural(res["kind"])
            assert served[res["kind"]]["name"] == facts.PLURALS[res["kind"]], res
            assert {"get", "list", "watch"} <= set(served[res["kind"]]["verbs"])
    mpi = one(rendered["knative/overlays/mpi-operator"], "ApiServerSource")
    assert "MPIJob" not in api.resources("kubeflow.org/v2beta1")  # only the overlay names it
    assert any(r["apiVersion"] == "kubeflow.org/v2beta1" for r in mpi["spec"]["resources"])


def test_source_service_account_passes_knatives_access_check(api, rendered):
    """Apply the source's RBAC for real and run the SubjectAccessReviews Knative's ApiServerSource
    controller runs (eventing pkg/reconciler/apiserversource runAccessCheck): get, list and
    watch on each resource, as the source's ServiceAccount. And every other verb on those, on
    the function's resources and on resources no manifest names, in one namespace and across
    all: what is allowed is exactly facts.SOURCE_RBAC (plus what Kubernetes grants every
    authenticated user), nothing more."""
    objects = rendered["knative"]
    src = one(objects, "ApiServerSource")
    sa_name = src["spec"]["serviceAccountName"]
    rbac = [o for o in objects if o["metadata"]["name"] == sa_name]
    assert [o["kind"] for o in rbac] == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"]
    # Other tests (e2e's adapter) may have installed the same objects: remove only ours.
    created = [o for o in rbac if api.call("GET", api.path_of(o))[0] == 404]
    for obj in rbac:
        status, data = api.apply(obj, dry_run=False)
        assert status in (200, 201), data
    namespace_of_sa = src["metadata"]["namespace"]
    user = f"system:serviceaccount:{namespace_of_sa}:{sa_name}"
    # The groups a ServiceAccount token carries (tests/support/controlplane/launcher.py does the same).
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace_of_sa}", "system:authenticated"]

    def allowed(verb: str, group: str, resource: str, namespace: str) -> bool:
        resource, _, subresource = resource.partition("/")
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": groups,
                "resourceAttributes": {
                    "namespace": namespace,
                    "verb": verb,
                    "group": group,
                    "resource": resource,
                    "subresource": subresource,
                },
            },
        }
        status, data = api.call(
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            body=json.dumps(review),
            content_type="application/json",
        )
        assert status == 201, data
        return json.loads(data)["status"].get("allowed", False)

    try:
        for res in src["spec"]["resources"]:
            group = res["apiVersion"].rpartition("/")[0]
            for namespace in ("", "team-a"):  # all namespaces, and any one of them
                for verb in ("get", "list", "watch"):
                    assert allowed(verb, group, guess_plural(res["kind"]), namespace), (
                        verb,
                        res["kind"],
                        namespace,
                    )
        expected = facts.merged(facts.SOURCE_RBAC, facts.EVERY_USER)
        probed = sorted({*facts.SOURCE_RBAC, *facts.FUNCTION_RBAC, *facts.EVERY_USER, *facts.UNNAMED})
        granted = {
            (group, resource): verbs
            for group, resource in probed
            if (verbs := {v for v in facts.VERBS if allowed(v, group, resource, "team-a")})
        }
        assert granted == expected
    finally:
        for obj in reversed(created):
            api.delete(obj)


GITOPS_OVERLAY = """\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - {knative}
images:
  - name: ghcr.io/podsweeper/podsweeper
    newName: registry.example.com/platform/podsweeper
    newTag: 0.1.0
patches:
  - target: {{group: serving.knative.dev, kind: Service, name: podsweeper}}
    patch: |-
      - op: test
        path: /spec/template/spec/containers/0/env/0/name
        value: PODSWEEPER_DRY_RUN
      - op: replace
        path: /spec/template/spec/containers/0/env/0/value
        value: "false"
"""


def test_documented_gitops_overlay_sets_image_and_goes_live(rendered, tmp_path):
    """The overlay the deploy docs (README, "Deploy on Knative") show: outside the repository,
    on top of knative/, with the user's image and dry-run off. Keep the two in step."""
    from tests.support.tools.kustomize import render

    overlay = tmp_path / "my-cluster" / "podsweeper"
    overlay.mkdir(parents=True)
    (overlay / "kustomization.yaml").write_text(
        GITOPS_OVERLAY.format(knative=os.path.relpath(KNATIVE, overlay))
    )
    objects = render(overlay)
    assert len(objects) == len(rendered["knative"])
    c = ksvc_container(objects)
    assert c["image"] == "registry.example.com/platform/podsweeper:0.1.0"
    assert env_of(c)["PODSWEEPER_DRY_RUN"] == "false"


# --- Knative's own admission logic (no webhook runs in the test cluster) --------------------


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_knative_webhook_logic_accepts_the_manifests(rendered, kustomization):
    from tests.support.deploy.knative_admission import admit

    objects = rendered[kustomization]
    results = admit(objects)
    assert [(r["kind"], r["name"]) for r in results] == [(o["kind"], o["metadata"]["name"]) for o in objects]
    knative_kinds = {"Service", "ApiServerSource", "PingSource"}
    for r, o in zip(results, objects):
        if o["apiVersion"].endswith("knative.dev/v1") and o["kind"] in knative_kinds:
            assert r["checked"], r
    assert [r for r in results if r.get("error")] == []


def _svc_env(o, name, value):
    o["spec"]["template"]["spec"]["containers"][0]["env"].append({"name": name, "value": value})


@pytest.mark.parametrize(
    "kind, mutate, message",
    [
        ("Service", lambda o: _svc_env(o, "PORT", "9090"), "reserved environment variable"),
        ("Service", lambda o: o["spec"]["template"]["spec"].update(timeoutSeconds=3600), "timeoutSeconds"),
        (
            "Service",
            lambda o: o["spec"]["template"]["metadata"]["annotations"].update(
                {"autoscaling.knative.dev/min-scale": "9"}
            ),
            "less than min-scale",
        ),
        (
            "Service",
            lambda o: o["spec"]["template"]["spec"]["containers"][0]["securityContext"].update(
                privileged=True
            ),
            "privileged",
        ),
        ("PingSource", lambda o: o["spec"].update(schedule="every 5 minutes"), "spec.schedule"),
        ("ApiServerSource", lambda o: o["spec"].update(mode="Full"), "spec.mode"),
    ],
)
def test_knative_webhook_logic_rejects_a_broken_manifest(rendered, kind, mutate, message):
    """The control for the test above: the validator does reject what Knative would."""
    from tests.support.deploy.knative_admission import admit

    obj = json.loads(json.dumps(one(rendered["knative"], kind)))
    mutate(obj)
    [result] = admit([obj])
    assert result["checked"] and message in (result.get("error") or ""), result


# --- the real receive adapter ---------------------------------------------------------------


def test_real_adapter_exits_when_a_listed_group_version_is_not_served(
    control_plane, admin_api, rendered, tmp_path
):
    """Why MPIJob v2beta1 is an overlay and not in the base: Knative's receive adapter asks
    discovery for each listed group/version at start and exits on the first one not served.
    The test cluster has the training operator's CRDs (mpijobs at kubeflow.org/v1 only), so
    the mpi-operator overlay's source must not start here, and the base's must (the e2e tests
    run it)."""
    from tests.support.adapter.launcher import (
        AdapterError,
        ReceiveAdapter,
        install_source_rbac,
        source_config,
    )

    source = one(rendered["knative/overlays/mpi-operator"], "ApiServerSource")
    manifest = tmp_path / "apiserversource.yaml"
    manifest.write_text(yaml.safe_dump(source))
    config = source_config(["default"], manifest=manifest)
    install_source_rbac(admin_api)
    adapter = ReceiveAdapter(
        control_plane.kubeconfig("source"), config, "http://127.0.0.1:9/", workdir=tmp_path, ready_timeout=60
    )
    with pytest.raises(AdapterError) as failure:
        adapter.start()
    adapter.stop()
    assert "failed to collect resource matches" in str(failure.value)
    assert "kubeflow.org/v2beta1" in str(failure.value)


def test_real_adapter_watches_each_entry_with_its_own_selector(control_plane, admin_api, tmp_path):
    """The shipped source through the real adapter (pkg/adapter/apiserver gives every entry
    its own reflector, with that entry's selector on its LIST and WATCH): both Pod entries
    run, each sending only the pods its label selects, once; batch Jobs only when a JobSet's
    label is on them; TrainJobs and JobSets all of them."""
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from tests.support.adapter.launcher import ReceiveAdapter, install_source_rbac, source_config
    from tests.support.trainer_objects import trainer_namespace

    received: list[tuple[str, str, str]] = []  # (type, kind, name) per CloudEvent

    class Sink(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            received.append((self.headers["ce-type"], self.headers["ce-kind"], self.headers["ce-name"]))
            self.send_response(202)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    install_source_rbac(admin_api)
    try:
        with trainer_namespace(admin_api) as trainer:
            config = source_config([trainer.namespace])
            assert sum(1 for r in config["resources"] if r["gvr"]["Resource"] == "pods") == 2
            adapter = ReceiveAdapter(
                control_plane.kubeconfig("source"),
                config,
                f"http://127.0.0.1:{server.server_address[1]}/",
                workdir=tmp_path,
                ready_timeout=90,
            )
            with adapter:
                # Not selected first: any event of theirs would come before the selected ones'.
                trainer.batch_job(None, "nightly-backup", labelled=False)
                trainer.pod("web", {"app": "web"})
                tj = trainer.trainjob("tj")
                js = trainer.jobset("tj", owner=tj)
                job = trainer.batch_job(js)
                chain_pod = trainer.chain_pod(job)
                v1_pod = trainer.pod("pt-worker-0", {JOB_NAME_LABEL: "pt"})
                wanted = {
                    ("TrainJob", "tj"),
                    ("JobSet", "tj"),
                    ("Job", job["metadata"]["name"]),
                    ("Pod", chain_pod["metadata"]["name"]),
                    ("Pod", v1_pod["metadata"]["name"]),
                }
                deadline = time.monotonic() + 60
                while not wanted <= {(kind, name) for _, kind, name in received}:
                    assert time.monotonic() < deadline, (sorted(wanted), received, adapter.tail())
                    time.sleep(0.1)
                time.sleep(2)  # anything else the adapter would send has had time to arrive
        adds = [(kind, name) for kind_type, kind, name in received if kind_type.endswith(".add")]
        assert sorted(adds) == sorted(wanted), received  # each once, nothing unselected
    finally:
        server.shutdown()
        server.server_close()
