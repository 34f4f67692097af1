"""charts/podsweeper against knative/: the Helm chart installs exactly what kustomize installs.

The chart is written by hand (readable templates, the manifests' comments kept) and this file
holds it equal to knative/ (docs/helm.md, "How the Helm chart stays equal to knative/"):

- for each kustomize install the chart, rendered with the values that stand for it, gives the
  same objects (parsed YAML, keyed by apiVersion/kind/namespace/name, order-insensitive, every
  field compared). An overlay applied after a base (`kubectl apply -k knative/` then
  `kubectl apply -k knative/overlays/live`) is compared as what the two applies leave: the
  base's objects, the overlay's replacing those with the same key, its new ones added;
- one value changed makes that comparison fail, and says where (the control);
- `helm lint --strict` is clean for the defaults and for every case's values;
- bad values fail `helm template` with a message naming the value;
- the rendered objects pass the checks that are cheap to reuse: Knative's own admission logic
  (tests/support/deploy/knative_admission.py) and the function's settings loader.

Both tools are the real ones, built from their Go modules (tests/support/tools/).
"""

from __future__ import annotations

import difflib
import json
import os
import re

import pytest
import yaml

from tests.delivery.helm import HelmError, lint, template
from tests.delivery.test_manifests import REPO, env_of

CHART = REPO / "charts" / "podsweeper"

# Each kustomize install: (the values that stand for it, the directories `kubectl apply -k`
# takes in turn). The overlays' own comments say what they are applied after.
CASES: dict[str, tuple[dict, tuple[str, ...]]] = {
    "knative": ({}, ("knative",)),
    "live": ({"dryRun": False}, ("knative", "knative/overlays/live")),
    "crashloop-suspend": (
        {"crashLoopSuspend": {"enabled": True}},
        ("knative", "knative/overlays/crashloop-suspend"),
    ),
    "stuck-terminating": (
        {"stuckTerminating": {"enabled": True}},
        ("knative", "knative/overlays/stuck-terminating"),
    ),
    "trainjob-ttl": (
        {"trainjobTTL": {"enabled": True}},
        ("knative", "knative/overlays/trainjob-ttl"),
    ),
    "mpi-operator": ({"watch": {"mpiJob": "v2beta1"}}, ("knative", "knative/overlays/mpi-operator")),
    "training-operator-only": (
        {"watch": {"trainerV2": False}},
        ("knative", "knative/overlays/training-operator-only"),
    ),
    "trainer-v2-only": (
        {"watch": {"trainingOperator": False, "mpiJob": "none"}},
        ("knative", "knative/overlays/trainer-v2-only"),
    ),
    # A whole install on its own: instead of knative/, not after it.
    "without-serving": ({"serving": "deployment"}, ("knative/overlays/without-serving",)),
    "live-without-serving": (
        {"serving": "deployment", "dryRun": False},
        ("knative/overlays/without-serving", "knative/overlays/live-without-serving"),
    ),
}
# The one object the chart leaves out by default: `helm install --create-namespace` makes the
# Namespace, and a Namespace in the release too would clash with it (createNamespace: true
# renders it, test below).
NAMESPACE_KEY = ("v1", "Namespace", None, "podsweeper")

Key = tuple[str, str, str | None, str]


def key(obj: dict) -> Key:
    meta = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])


def keyed(objects: list[dict]) -> dict[Key, dict]:
    table: dict[Key, dict] = {}
    for obj in objects:
        assert key(obj) not in table, f"{key(obj)} rendered twice"
        table[key(obj)] = obj
    return table


_KUSTOMIZE_RENDERS: dict[str, list[dict]] = {}


def kustomize_render(directory: str) -> list[dict]:
    from tests.support.tools.kustomize import render

    if directory not in _KUSTOMIZE_RENDERS:
        _KUSTOMIZE_RENDERS[directory] = render(REPO / directory)
    return _KUSTOMIZE_RENDERS[directory]


def applied(directories: tuple[str, ...]) -> dict[Key, dict]:
    """What `kubectl apply -k` of each directory in turn leaves: later objects replace earlier
    ones with the same key (each is a whole object rendered from the same files), new ones add."""
    state: dict[Key, dict] = {}
    for directory in directories:
        state.update(keyed(kustomize_render(directory)))
    return state


def expected(case: str) -> dict[Key, dict]:
    state = applied(CASES[case][1])
    del state[NAMESPACE_KEY]
    return state


def chart(values: dict | None = None, **kwargs) -> dict[Key, dict]:
    return keyed(template(CHART, values or {}, **kwargs))


def merged(*layers: dict) -> dict:
    """Values layered like several `-f` files: nested dicts merge, the rest is replaced."""
    out: dict = {}
    for layer in layers:
        for name, value in layer.items():
            if isinstance(value, dict) and isinstance(out.get(name), dict):
                out[name] = merged(out[name], value)
            else:
                out[name] = value
    return out


def difference(want: dict[Key, dict], got: dict[Key, dict]) -> str:
    """Empty when equal; else each missing, extra and differing object, the last as a diff."""
    lines = []
    for k in sorted(set(want) - set(got), key=str):
        lines.append(f"only in kustomize: {k}")
    for k in sorted(set(got) - set(want), key=str):
        lines.append(f"only in the chart: {k}")
    for k in sorted(set(want) & set(got), key=str):
        if want[k] != got[k]:
            lines.append(f"differs: {k}")
            lines.extend(
                difflib.unified_diff(
                    yaml.safe_dump(want[k], sort_keys=True).splitlines(),
                    yaml.safe_dump(got[k], sort_keys=True).splitlines(),
                    "kustomize",
                    "helm",
                    lineterm="",
                )
            )
    return "\n".join(lines)


# --- equal to every kustomize install --------------------------------------------------------


@pytest.mark.parametrize("case", list(CASES))
def test_chart_renders_what_kustomize_installs(case):
    values, _ = CASES[case]
    assert difference(expected(case), chart(values)) == "", f"{case}: values {values}"


def test_create_namespace_renders_the_namespace_of_knative():
    got = chart({"createNamespace": True})
    assert difference(applied(("knative",)), got) == ""


@pytest.mark.parametrize(
    "case, change, where",
    [
        # One value off: the comparison fails, at the object and field that differ.
        ("knative", {"maxDeletesPerEvent": 101}, "PODSWEEPER_MAX_DELETES_PER_EVENT"),
        ("live", {"dryRun": True}, "differs: ('serving.knative.dev/v1', 'Service'"),
        ("mpi-operator", {"watch": {"mpiJob": "v1"}}, "kubeflow.org/v1"),
        ("trainer-v2-only", {"watch": {"trainingOperator": True}}, "PyTorchJob"),
        ("crashloop-suspend", {"crashLoopSuspend": {"enabled": False}}, "only in kustomize: "),
        ("stuck-terminating", {"stuckTerminating": {"seconds": 301}}, "'301'"),
        ("trainjob-ttl", {"trainjobTTL": {"seconds": 86400}}, "'86400'"),
        ("trainjob-ttl", {"trainjobTTL": {"enabled": False}}, "only in kustomize: "),
        ("knative", {"source": {"skipPermissionsCheck": True}}, "skip-permissions-check"),
        ("without-serving", {"serving": "knative"}, "only in the chart: ('serving.knative.dev/v1'"),
        ("without-serving", {"replicas": 3}, "replicas: 3"),
    ],
)
def test_one_value_changed_makes_the_comparison_fail(case, change, where):
    """The control for the test above: the comparison does see a one-value difference."""
    values = merged(CASES[case][0], change)
    found = difference(expected(case), chart(values))
    assert found, f"{case} with {change}: still equal"
    assert where in found, found


def test_a_changed_kustomize_object_makes_the_comparison_fail():
    """And the other way round: kustomize's side edited (as a knative/ file edit would)."""
    want = expected("knative")
    edited = {k: json.loads(json.dumps(v)) for k, v in want.items()}
    ping = edited[("sources.knative.dev/v1", "PingSource", "podsweeper", "podsweeper-sweep")]
    ping["spec"]["schedule"] = "*/15 * * * *"
    assert "*/15 * * * *" in difference(edited, chart())


def test_values_combine_where_overlays_do_not():
    """kustomize's overlays each render the Service from the base (applying one drops another's
    setting, docs/deploy.md); values add up: live + stuck-terminating + suspend + trainjob-ttl in
    one install."""
    values = {
        "dryRun": False,
        "stuckTerminating": {"enabled": True},
        "crashLoopSuspend": {"enabled": True},
        "trainjobTTL": {"enabled": True},
    }
    got = chart(values)
    service = got[("serving.knative.dev/v1", "Service", "podsweeper", "podsweeper")]
    env = env_of(service["spec"]["template"]["spec"]["containers"][0])
    assert env["PODSWEEPER_DRY_RUN"] == "false"
    assert env["PODSWEEPER_STUCK_TERMINATING_SECONDS"] == "300"
    assert env["PODSWEEPER_CRASHLOOP_ACTION"] == "suspend"
    assert env["PODSWEEPER_TRAINJOB_TTL_SECONDS"] == "604800"
    want = applied(
        (
            "knative",
            "knative/overlays/crashloop-suspend",
            "knative/overlays/stuck-terminating",
            "knative/overlays/trainjob-ttl",
        )
    )
    # Every object of the four kustomize applies but the Service, unchanged.
    for k, obj in want.items():
        if k[1] not in ("Namespace", "Service"):
            assert got[k] == obj, k


def test_release_namespace_is_every_namespace_the_chart_names():
    """-n other: every namespaced object and every ServiceAccount subject follows it."""
    got = template(CHART, {"crashLoopSuspend": {"enabled": True}}, namespace="sweeper")
    cluster_scoped = {
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    for obj in got:
        ns = obj["metadata"].get("namespace")
        assert (ns is None) == (obj["kind"] in cluster_scoped), obj["metadata"]
        assert ns in (None, "sweeper"), obj["metadata"]
        for subject in obj.get("subjects") or []:
            assert subject["namespace"] == "sweeper", obj["metadata"]["name"]
    assert "podsweeper.podsweeper" not in json.dumps(got)
    # The admission policy judges the release's ServiceAccount, and protects its namespace.
    (policy,) = [o for o in got if o["kind"] == "ValidatingAdmissionPolicy"]
    text = json.dumps(policy)
    assert "system:serviceaccount:sweeper:podsweeper" in text and "'sweeper']" in text
    assert "system:serviceaccount:podsweeper:" not in text and "'podsweeper']" not in text


# --- helm lint, bad values ---------------------------------------------------------------------


@pytest.mark.parametrize("case", ["defaults", *CASES])
def test_helm_lint_strict_is_clean(case):
    values = CASES[case][0] if case in CASES else {}
    output = lint(CHART, values)
    assert "[WARNING]" not in output and "[ERROR]" not in output, output
    assert "0 chart(s) failed" in output, output


@pytest.mark.parametrize(
    "values, named",
    [
        ({"crashLoopAction": "explode"}, "crashLoopAction"),
        ({"serving": "kserve"}, "serving"),
        ({"watch": {"mpiJob": "v3"}}, "mpiJob"),
        ({"dryRun": "false"}, "dryRun"),  # a string would be truthy: refused, not guessed
        ({"dryrun": False}, "dryrun"),  # misspelt: refused, not ignored
        ({"maxDeletesPerEvent": 0}, "maxDeletesPerEvent"),
        ({"orphanGraceSeconds": 1.5}, "orphanGraceSeconds"),
        ({"namespaces": ["Team_A"]}, "namespaces"),
        ({"replicas": 0}, "replicas"),
        ({"stuckTerminating": {"enabled": True, "seconds": 0}}, "seconds"),
        ({"trainjobTTL": {"enabled": True, "seconds": 0}}, "seconds"),
        ({"source": {"namespaceSelector": {"matchLabel": {"a": "b"}}}}, "matchLabel"),
        ({"pingSchedule": "every 5 minutes"}, "pingSchedule"),
        # Combinations the schema cannot say (templates/_helpers.tpl, podsweeper.validate).
        ({"crashLoopAction": "suspend"}, "crashLoopSuspend.enabled"),
        ({"crashLoopAction": "delete", "crashLoopSuspend": {"enabled": True}}, "crashLoopAction"),
        ({"watch": {"trainingOperator": False, "mpiJob": "none", "trainerV2": False}}, "watch"),
    ],
)
def test_bad_values_fail_naming_the_value(values, named):
    with pytest.raises(HelmError) as failure:
        template(CHART, values)
    message = str(failure.value).split("failed:", 1)[1]  # helm's own output, not our values echo
    assert named in message, message


# --- the existing checks, on the chart's objects ---------------------------------------------


@pytest.mark.parametrize("values", [{}, {"serving": "deployment"}], ids=["knative", "deployment"])
def test_knative_webhook_logic_accepts_the_chart(values):
    from tests.support.deploy.knative_admission import admit

    objects = template(CHART, values)
    results = admit(objects)
    assert [(r["kind"], r["name"]) for r in results] == [(o["kind"], o["metadata"]["name"]) for o in objects]
    knative = [o for o in objects if o["apiVersion"].endswith("knative.dev/v1")]
    assert len(knative) == (3 if values.get("serving") != "deployment" else 2)
    for r, o in zip(results, objects):
        if o in knative:
            assert r["checked"], r
    assert [r for r in results if r.get("error")] == []


@pytest.mark.parametrize("case", list(CASES))
def test_function_settings_accept_the_chart_env(case, monkeypatch):
    from podsweeper.config import ENV_PREFIX, Settings, load_settings

    values = merged(CASES[case][0], {"namespaces": ["team-a", "team-b"], "excludeNamespaces": []})
    (workload,) = [
        o
        for o in template(CHART, values)
        if o["kind"] in ("Deployment", "Service") and "template" in o["spec"]
    ]
    env = env_of(workload["spec"]["template"]["spec"]["containers"][0])
    known = {ENV_PREFIX + name.upper() for name in Settings.model_fields}
    assert {n for n in env if n.startswith(ENV_PREFIX)} <= known
    for name in list(os.environ):
        if name.startswith(ENV_PREFIX):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    assert settings.dry_run is values.get("dryRun", True)
    assert settings.namespace_set == {"team-a", "team-b"} and not settings.excluded_namespace_set


@pytest.mark.parametrize("sender_identity, auth", [(True, "oidc"), (False, "none")])
def test_sender_identity_off_lets_the_function_take_unsigned_events(sender_identity, auth, monkeypatch):
    """A cluster without Eventing's authentication-oidc turns it off, or every event gets 401."""
    from podsweeper.config import ENV_PREFIX, load_settings

    (workload,) = [
        o
        for o in template(CHART, {"senderIdentity": sender_identity, "serving": "deployment"})
        if o["kind"] == "Deployment"
    ]
    for name in list(os.environ):
        if name.startswith(ENV_PREFIX):
            monkeypatch.delenv(name)
    for name, value in env_of(workload["spec"]["template"]["spec"]["containers"][0]).items():
        monkeypatch.setenv(name, value)
    assert load_settings().auth.value == auth


# --- the chart's own documents ---------------------------------------------------------------


def test_every_value_is_commented_schema_checked_and_in_the_readme():
    values_text = (CHART / "values.yaml").read_text()
    values = yaml.safe_load(values_text)
    schema = json.loads((CHART / "values.schema.json").read_text())
    readme = (CHART / "README.md").read_text()

    def leaves(tree: dict, schema_node: dict, prefix: str = ""):
        assert set(tree) == set(schema_node["properties"]), prefix or "top level"
        for name, value in tree.items():
            path = prefix + name
            node = schema_node["properties"][name]
            if isinstance(value, dict) and node.get("properties") and name != "namespaceSelector":
                yield path
                yield from leaves(value, node, path + ".")
            else:
                yield path

    # The path of each key in values.yaml, and whether a comment line stands right above it.
    commented: dict[str, bool] = {}
    stack: list[tuple[int, str]] = []
    previous = ""
    for line in values_text.splitlines():
        if found := re.match(r"( *)([A-Za-z]\w*):", line):
            indent = len(found[1])
            stack = [(i, n) for i, n in stack if i < indent] + [(indent, found[2])]
            commented[".".join(n for _, n in stack)] = previous.lstrip().startswith("#")
        previous = line
    for path in leaves(values, schema):
        assert f"`{path}`" in readme, f"{path} not in charts/podsweeper/README.md"
        assert commented[path], f"values.yaml: {path} has no comment right above it"
