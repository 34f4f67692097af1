"""Knative Serving's real controllers reconcile the Service we ship (knative/service/service.yaml).

One world for the module (tests/support/world: kube-apiserver, kube-controller-manager with the
deployment and endpoints controllers added, scheduler, kwok nodes) and Knative Serving v0.49.1's
controller, autoscaler and webhook out of cluster (tests/support/knative/serving.py). The real
kustomize render of knative/ is applied through the API (the objects Serving acts on: the
Namespace, the ServiceAccount podsweeper and the serving.knative.dev Service), later the render
of knative/overlays/live. No container runs: kwok marks the pods Running and Ready.

The render is applied as it is. kwok keeps a ReplicaSet's pods running (tests/support/world/
README.md, "Stages"); before it did, it "ended" every container after 10 s, as it does a training
pod's, and under restartPolicy Always the Revision flipped between Ready and
ContainerHealthy=False (reason ExitCode0) every ~12 s. No toleration or nodeSelector is needed:
the world lifts its nodes' not-ready taint and the pods ask for nothing the nodes lack.

- test_revision_deployment_carries_what_deploy_md_promises: the Revision's Deployment (what a
  kubelet would run) against docs/deploy.md and the shipped manifest;
- test_podautoscaler_honours_the_scale_settings: min-scale/max-scale and containerConcurrency;
- test_conditions_reached: which conditions become True and which stay Unknown here, and
  status.address;
- test_live_overlay_makes_a_revision_that_deletes: overlays/live's Revision has
  PODSWEEPER_DRY_RUN=false and is otherwise the same; traffic moves to it (the old Revision
  keeps its replica here: see the test).

tests/support/knative/README.md has the findings.
"""

from __future__ import annotations

import contextlib
import copy
import json
import sys
import time
from pathlib import Path

import pytest

from tests.support import figures
from tests.support.knative import serving as ks
from tests.support.tools.kustomize import render

REPO = Path(__file__).resolve().parents[2]
NS = "podsweeper"
SERVING = f"/apis/serving.knative.dev/v1/namespaces/{NS}"
AUTOSCALING = f"/apis/autoscaling.internal.knative.dev/v1alpha1/namespaces/{NS}"
NETWORKING = f"/apis/networking.internal.knative.dev/v1alpha1/namespaces/{NS}"
SETTLE = 60.0  # seconds: the longest one reconciliation outcome is waited for
ADDRESS = "http://podsweeper.podsweeper.svc.cluster.local"


def serving_objects(kustomization: str) -> list[dict]:
    """The render's Namespace, ServiceAccount podsweeper and serving.knative.dev Service, in its order."""
    keep = []
    for obj in render(REPO / kustomization):
        kind, name = obj["kind"], obj["metadata"]["name"]
        if (
            kind == "Namespace"
            or (kind == "ServiceAccount" and name == "podsweeper")
            or (kind == "Service" and obj["apiVersion"] == "serving.knative.dev/v1")
        ):
            keep.append(obj)
    return keep


def the_service(objects: list[dict]) -> dict:
    (svc,) = [o for o in objects if o["kind"] == "Service"]
    return svc


def applied(objects: list[dict]) -> list[dict]:
    """The objects as applied: the render, unchanged."""
    return copy.deepcopy(objects)


def conditions(obj: dict | None) -> dict[str, str]:
    """type -> "True", or "<status>/<reason>" when not True."""
    out = {}
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        out[c["type"]] = c["status"] if c["status"] == "True" else f"{c['status']}/{c.get('reason', '')}"
    return out


@pytest.fixture(scope="module")
def serving(pytestconfig):
    """World + Serving, the base render applied. timings: seconds per phase (printed at the end)."""
    from tests.support.world.launcher import World

    if not all(b.path.exists() for b in ks.BINARIES.values()):
        # A cold build of the controller takes minutes: show its progress instead of a silent pause.
        capman = pytestconfig.pluginmanager.getplugin("capturemanager")
        with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
            ks.build_all(log=sys.stderr)
    t0 = time.monotonic()
    with (
        World(extra_controllers=ks.KCM_CONTROLLERS, log=sys.stderr) as world,
        ks.KnativeServing(world.control_plane, log=sys.stderr) as serving,
    ):
        serving.timings["world"] = world.timings["total"]
        for obj in applied(serving_objects("knative")):
            serving.kube.apply(obj)
        serving.timings["up+applied"] = time.monotonic() - t0
        yield serving
        print(f"\nknative serving test timings: {json.dumps(serving.timings)}", file=sys.stderr)


def get(serving, path: str) -> dict | None:
    return serving.kube.get(path)


def deployment(serving, revision: str) -> dict:
    return serving.wait(
        f"Deployment {revision}-deployment",
        lambda: get(serving, f"/apis/apps/v1/namespaces/{NS}/deployments/{revision}-deployment"),
        SETTLE,
    )


def containers(dep: dict) -> dict[str, dict]:
    return {c["name"]: c for c in dep["spec"]["template"]["spec"]["containers"]}


def env(container: dict) -> list[tuple[str, str]]:
    """(name, value) in order; a valueFrom shows as its field path."""
    return [
        (e["name"], e.get("value", e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath", "")))
        for e in container.get("env") or []
    ]


def knative_env(revision: str) -> list[tuple[str, str]]:
    return [
        ("PORT", "8080"),
        ("K_REVISION", revision),
        ("K_CONFIGURATION", "podsweeper"),
        ("K_SERVICE", "podsweeper"),
    ]


def test_revision_deployment_carries_what_deploy_md_promises(serving):
    shipped = the_service(serving_objects("knative"))["spec"]["template"]
    (ours,) = shipped["spec"]["containers"]
    dep = deployment(serving, "podsweeper-00001")
    pod = dep["spec"]["template"]["spec"]
    by_name = containers(dep)
    assert list(by_name) == ["podsweeper", "queue-proxy"]
    user, queue = by_name["podsweeper"], by_name["queue-proxy"]

    assert pod["serviceAccountName"] == "podsweeper"
    # The shipped env in its order (dry-run first, "" for the namespace list), then Knative's.
    assert env(user) == [(e["name"], e["value"]) for e in ours["env"]] + knative_env("podsweeper-00001")
    assert env(user)[0] == ("PODSWEEPER_DRY_RUN", "true")
    assert user["image"] == ours["image"] == "ghcr.io/podsweeper/podsweeper:0.1.0"  # tag kept: no digest
    assert user["resources"] == ours["resources"]
    assert user["securityContext"] == ours["securityContext"]
    assert user["volumeMounts"] == ours["volumeMounts"]
    assert pod["volumes"] == shipped["spec"]["volumes"]
    # Knative renames the port (http1 -> user-port) and keeps the number.
    assert user["ports"] == [{"name": "user-port", "containerPort": 8080, "protocol": "TCP"}]

    # Readiness: off the user container, run by queue-proxy against it (the webhook's defaults
    # timeoutSeconds 1 / successThreshold 1 added to the shipped period and threshold).
    assert "readinessProbe" not in user
    queue_env = dict(env(queue))
    assert json.loads(queue_env["SERVING_READINESS_PROBE"]) == {
        "httpGet": {"path": "/healthz", "port": 8080, "host": "127.0.0.1", "scheme": "HTTP"},
        "timeoutSeconds": 1,
        "periodSeconds": ours["readinessProbe"]["periodSeconds"],
        "successThreshold": 1,
        "failureThreshold": ours["readinessProbe"]["failureThreshold"],
    }
    # The kubelet probes queue-proxy instead, with the shipped period and threshold.
    assert queue["readinessProbe"] == {
        "httpGet": {
            "path": "/",
            "port": 8012,
            "scheme": "HTTP",
            "httpHeaders": [{"name": "K-Network-Probe", "value": "queue"}],
        },
        "timeoutSeconds": 1,
        "periodSeconds": 5,
        "successThreshold": 1,
        "failureThreshold": 3,
    }
    # Liveness stays on the user container, as shipped, with the user port written in.
    assert user["livenessProbe"] == {
        "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
        "timeoutSeconds": ours["livenessProbe"]["timeoutSeconds"],
        "periodSeconds": ours["livenessProbe"]["periodSeconds"],
        "successThreshold": 1,
        "failureThreshold": ours["livenessProbe"]["failureThreshold"],
    }
    # What Knative adds around the user container.
    assert user["lifecycle"] == {
        "preStop": {"httpGet": {"path": "/wait-for-drain", "port": 8022, "scheme": "HTTP"}}
    }
    assert user["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert pod["terminationGracePeriodSeconds"] == shipped["spec"]["timeoutSeconds"] == 30
    assert pod["enableServiceLinks"] is False

    # queue-proxy: containerConcurrency and the request timeout are its settings.
    assert queue["image"] == ks.QUEUE_SIDECAR_IMAGE
    assert queue_env["CONTAINER_CONCURRENCY"] == "10"
    assert queue_env["REVISION_TIMEOUT_SECONDS"] == "30"
    assert queue_env["USER_PORT"] == "8080"
    assert queue_env["SERVING_REVISION"] == "podsweeper-00001"
    assert [p["containerPort"] for p in queue["ports"]] == [9090, 9091, 8012, 8112]

    # The template's annotations reach the pods: Prometheus scrapes the user container's 8080.
    annotations = dep["spec"]["template"]["metadata"]["annotations"]
    for key in ("prometheus.io/scrape", "prometheus.io/port", "prometheus.io/path"):
        assert annotations[key] == shipped["metadata"]["annotations"][key]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == "podsweeper"
    assert labels["serving.knative.dev/service"] == "podsweeper"
    # One replica (min-scale 1), rolled without ever dropping below it.
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_podautoscaler_honours_the_scale_settings(serving):
    pa = serving.wait(
        "PodAutoscaler podsweeper-00001 scaled",
        lambda: (
            (p := get(serving, f"{AUTOSCALING}/podautoscalers/podsweeper-00001"))
            and (p.get("status") or {}).get("actualScale") == 1
            and p
        ),
        SETTLE,
    )
    annotations = pa["metadata"]["annotations"]
    assert annotations["autoscaling.knative.dev/min-scale"] == "1"
    assert annotations["autoscaling.knative.dev/max-scale"] == "5"
    assert annotations["autoscaling.knative.dev/class"] == "kpa.autoscaling.knative.dev"
    assert annotations["autoscaling.knative.dev/metric"] == "concurrency"
    assert pa["spec"]["containerConcurrency"] == 10
    assert pa["spec"]["reachability"] == "Reachable"
    assert pa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "podsweeper-00001-deployment",
    }
    assert pa["status"]["desiredScale"] == 1
    pods = serving.kube.request(
        "GET",
        f"/api/v1/namespaces/{NS}/pods",
        params={"labelSelector": "serving.knative.dev/revision=podsweeper-00001"},
    )["items"]
    assert [p["status"]["phase"] for p in pods] == ["Running"]


# What this machine reaches, and why the rest stays Unknown (tests/support/knative/README.md):
# no KIngress implementation (IngressReady), no activator (the SKS stays in Proxy mode, whose
# public endpoints are the activator's: "activator-service" not found).
EXPECTED = {
    "Service": {
        "ConfigurationsReady": "True",
        "RoutesReady": "Unknown/IngressNotConfigured",
        "Ready": "Unknown/IngressNotConfigured",
    },
    "Configuration": {"Ready": "True"},
    "Revision": {
        "ResourcesAvailable": "True",
        "ContainerHealthy": "True",
        "Ready": "True",
        "Active": "Unknown/NotReady",
    },
    "Route": {
        "AllTrafficAssigned": "True",
        "CertificateProvisioned": "True",
        "IngressReady": "Unknown/IngressNotConfigured",
        "Ready": "Unknown/IngressNotConfigured",
    },
    "PodAutoscaler": {
        "Active": "True",
        "ScaleTargetInitialized": "True",
        "SKSReady": "Unknown/NotReady",
        "Ready": "Unknown/NotReady",
    },
    # EndpointsPopulated's reason is "" or CreatingPublicService, depending on timing.
    # Unknown either way; the reason is the reconcile's step that met the missing activator:
    # NewObservedGenFailure or, with the shipped target-burst-capacity -1 (the activator always in
    # the path), CreatingPublicService (both seen on the real controller, by timing).
    "ServerlessService": {"EndpointsPopulated": "Unknown", "Ready": "Unknown"},
    "Ingress": {},  # nothing reconciles a KIngress here: no status at all
}


def observed(serving, revision: str = "podsweeper-00001") -> dict[str, dict[str, str]]:
    paths = {
        "Service": f"{SERVING}/services/podsweeper",
        "Configuration": f"{SERVING}/configurations/podsweeper",
        "Revision": f"{SERVING}/revisions/{revision}",
        "Route": f"{SERVING}/routes/podsweeper",
        "PodAutoscaler": f"{AUTOSCALING}/podautoscalers/{revision}",
        "ServerlessService": f"{NETWORKING}/serverlessservices/{revision}",
        "Ingress": f"{NETWORKING}/ingresses/podsweeper",
    }
    return {kind: conditions(get(serving, path)) for kind, path in paths.items()}


def matches(seen: dict[str, dict[str, str]], expected: dict[str, dict[str, str]]) -> bool:
    """Equal, but an expected "Unknown"/"False" without a reason matches any reason."""
    if seen.keys() != expected.keys():
        return False
    for kind, want in expected.items():
        got = seen[kind]
        if got.keys() != want.keys():
            return False
        for name, value in want.items():
            if got[name] != value and not ("/" not in value and got[name].split("/")[0] == value):
                return False
    return True


def wait_observed(serving, expected: dict, revision: str = "podsweeper-00001") -> dict:
    seen: list[dict] = []

    def settled():
        seen[:] = [observed(serving, revision)]
        return matches(seen[0], expected)

    try:
        serving.wait(f"the conditions of {revision}'s objects", settled, SETTLE)
    except ks.ServingError as e:
        raise AssertionError(f"last observed: {json.dumps(seen, indent=1)}\n{e}") from None
    return seen[0]


def test_conditions_reached(serving):
    wait_observed(serving, EXPECTED)
    svc = get(serving, f"{SERVING}/services/podsweeper")
    status = svc["status"]
    # The address an ApiServerSource sink resolves to is published although Ready is Unknown.
    assert status["address"] == {"url": ADDRESS}
    assert status["url"] == ADDRESS  # cluster-local: the .svc.cluster.local name only
    assert status["latestReadyRevisionName"] == status["latestCreatedRevisionName"] == "podsweeper-00001"
    assert status["traffic"] == [{"latestRevision": True, "percent": 100, "revisionName": "podsweeper-00001"}]
    route = get(serving, f"{SERVING}/routes/podsweeper")
    assert route["status"]["address"] == {"url": ADDRESS}
    # The name behind it is the Route's placeholder Service, an ExternalName pointing at itself
    # until an ingress reports its load balancer: it would resolve nowhere on this cluster.
    placeholder = get(serving, f"/api/v1/namespaces/{NS}/services/podsweeper")
    assert placeholder["spec"]["type"] == "ExternalName"
    assert placeholder["spec"]["externalName"] == "podsweeper.podsweeper.svc.cluster.local"
    ingress = get(serving, f"{NETWORKING}/ingresses/podsweeper")
    assert ingress["metadata"]["labels"]["networking.knative.dev/visibility"] == "cluster-local"
    assert (
        ingress["metadata"]["annotations"]["networking.knative.dev/ingress.class"]
        == "istio.ingress.networking.knative.dev"
    )
    assert [rule["visibility"] for rule in ingress["spec"]["rules"]] == ["ClusterLocal"]
    # The SKS keeps the activator in the request path (Proxy): the excess burst capacity is
    # 1 pod x containerConcurrency 10 - the default target-burst-capacity 211 < 0.
    sks = get(serving, f"{NETWORKING}/serverlessservices/podsweeper-00001")
    assert sks["spec"]["mode"] == "Proxy"
    private = get(serving, f"/api/v1/namespaces/{NS}/endpoints/podsweeper-00001-private")
    assert [len(s.get("addresses") or []) for s in private["subsets"]] == [1]


def test_live_overlay_makes_a_revision_that_deletes(serving):
    base = the_service(serving_objects("knative"))
    live_objects = serving_objects("knative/overlays/live")
    assert [o["kind"] for o in live_objects] == ["Service"]  # the overlay renders only the Service
    for obj in applied(live_objects):
        serving.kube.apply(obj)
    dep = deployment(serving, "podsweeper-00002")
    user = containers(dep)["podsweeper"]
    shipped_env = [(e["name"], e["value"]) for e in base["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert env(user) == [("PODSWEEPER_DRY_RUN", "false"), *shipped_env[1:]] + knative_env("podsweeper-00002")
    old = containers(deployment(serving, "podsweeper-00001"))["podsweeper"]
    for key in ("image", "resources", "securityContext", "livenessProbe", "volumeMounts"):
        assert user[key] == old[key], key

    expected = copy.deepcopy(EXPECTED)
    wait_observed(serving, expected, "podsweeper-00002")

    def moved():
        status = get(serving, f"{SERVING}/services/podsweeper")["status"]
        traffic = [{"latestRevision": True, "percent": 100, "revisionName": "podsweeper-00002"}]
        return (
            status.get("latestReadyRevisionName") == "podsweeper-00002"
            and status.get("traffic") == traffic
            and status
        )

    status = serving.wait("all traffic on podsweeper-00002", moved, SETTLE)
    assert status["address"] == {"url": ADDRESS}
    # The old Revision stays labelled routingState=active and its PodAutoscaler Reachable, so
    # min-scale keeps its replica: the labeler clears a Revision's routing state only once the
    # Route is Ready or Failed (pkg/reconciler/labeler/metasync.go), and without a KIngress
    # implementation it stays Unknown. On a cluster with a networking layer the old Revision
    # goes to "reserve", Unreachable, and scales to zero.
    old_rev = get(serving, f"{SERVING}/revisions/podsweeper-00001")
    assert old_rev["metadata"]["labels"]["serving.knative.dev/routingState"] == "active"
    old_pa = get(serving, f"{AUTOSCALING}/podautoscalers/podsweeper-00001")
    assert old_pa["spec"]["reachability"] == "Reachable"
    assert (
        get(serving, f"/apis/apps/v1/namespaces/{NS}/deployments/podsweeper-00001-deployment")["spec"][
            "replicas"
        ]
        == 1
    )


def test_eventing_resolves_the_knative_service_and_the_seed_goes_through_its_route(serving):
    """`kubectl apply -k knative/` then `-k knative/overlays/live`, with Eventing's real controller
    beside Serving's: the ApiServerSource and the PingSource resolve the Knative Service's
    address and become Ready, the adapter and dispatcher they generated run, and the seed's
    workers are deleted by the live Revision's replica, within figures.SEED_CLEANUP_BOUND of
    Succeeded (the 1 s claim, measured by make bench, plus a margin for the shared machine).

    Between the adapter and the replica sit Knative's ingress and activator, which do not run
    here: the test world routes the Service's address to the ready pods of the Revision its
    KIngress sends traffic to, straight to the user container (tests/support/knative/kubelet.py,
    `ingress`). So the routing decision is Serving's, the request path is not."""
    import yaml
    from kubernetes import client

    from tests.support.knative.eventing import MTPING_IMAGE, RECEIVE_ADAPTER_IMAGE, Eventing, function_image
    from tests.support.stack.users import condition

    ready = {"SinkProvided": "True", "SufficientPermissions": "True", "Deployed": "True", "Ready": "True"}
    with Eventing(serving.control_plane, log=sys.stderr) as eventing:
        # What `kubectl apply -k knative/` adds to what is there; the Service stays the live one.
        rest = [o for o in render(REPO / "knative") if o["apiVersion"] != "serving.knative.dev/v1"]
        eventing.install(rest)
        source = eventing.wait_conditions("ApiServerSource", "podsweeper", ready, timeout=120)
        ping = eventing.wait_conditions("PingSource", "podsweeper-sweep", {"Ready": "True"}, timeout=120)
        assert source["status"]["sinkUri"] == ping["status"]["sinkUri"] == ADDRESS
        (adapter,) = eventing.kubelet.wait_running(RECEIVE_ADAPTER_IMAGE)
        eventing.kubelet.wait_running(MTPING_IMAGE)
        assert adapter.env["K_SINK"] == ADDRESS
        replicas = eventing.kubelet.wait_running(function_image(), count=2)  # 00001 is kept (above)
        live = [r for r in replicas if r.labels.get("serving.knative.dev/revision") == "podsweeper-00002"]
        assert len(live) == 1 and live[0].env["PODSWEEPER_DRY_RUN"] == "false"
        assert eventing.kubelet.endpoints(NS, "podsweeper", 80) == list(live[0].ports.values())

        core, custom = client.CoreV1Api(eventing.admin), client.CustomObjectsApi(eventing.admin)
        core.create_namespace({"metadata": {"name": "team-kn"}})
        (job,) = [
            d for d in yaml.safe_load_all((REPO / "examples" / "pytorchjob-seed.yaml").read_text()) if d
        ]
        custom.create_namespaced_custom_object("kubeflow.org", "v1", "team-kn", "pytorchjobs", job)
        workers: dict[str, float | None] = {}
        seen = None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            current = custom.get_namespaced_custom_object(
                "kubeflow.org", "v1", "team-kn", "pytorchjobs", "pytest"
            )
            uids = {
                p.metadata.uid
                for p in core.list_namespaced_pod("team-kn").items
                if "-worker-" in p.metadata.name
            }
            now = time.time()
            for uid in uids:
                workers.setdefault(uid, None)
            for uid in workers:
                if workers[uid] is None and uid not in uids:
                    workers[uid] = now
            if seen is None and condition(current, "Succeeded"):
                seen = now
            if seen and len(workers) == 3 and all(workers.values()):
                break
            time.sleep(0.02)
        assert seen is not None and len(workers) == 3 and all(workers.values()), workers
        gone = max(t for t in workers.values() if t) - seen
        print(
            f"\nknative serving + eventing: seed workers gone {gone * 1000:.0f} ms after Succeeded",
            file=sys.stderr,
        )
        assert figures.within(
            "seed, Knative Serving: s from Succeeded seen to the last worker gone",
            gone,
            "<=",
            figures.SEED_CLEANUP_BOUND,
        )
        decisions = [d for d in live[0].process.decisions() if d.get("action") == "delete"]
        assert {d["name"] for d in decisions if d.get("namespace") == "team-kn"} == {
            "pytest-worker-0",
            "pytest-worker-1",
            "pytest-worker-2",
        }
