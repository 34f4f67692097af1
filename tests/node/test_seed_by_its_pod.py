"""The seed on a real node, cleaned by podsweeper running as a pod from what ships (issue 41): the
one node test `make test` runs (marker `ci`); the others are `make node`'s.

The world is NodeWorld (tests/node/world.py): the real training operator v1.9.4, the controller
manager, the scheduler and one real node (kubelet, containerd, runc). On it:

- podsweeper, the image built from the Dockerfile, as the pod of `knative/overlays/
  live-without-serving`'s Deployment (PODSWEEPER_DRY_RUN=false, every other setting as shipped:
  PODSWEEPER_AUTH=oidc among them), in the namespace of `knative/overlays/without-serving`
  labelled Pod Security `restricted`, with that overlay's ServiceAccount, RBAC and Service; it
  reads the API server in-cluster through the `kubernetes` Service (the real kube-proxy);
- Knative's real receive adapter with the shipped ApiServerSource's configuration, sending to
  the pod's IP with the bearer token it asks the API server for, as Eventing's sender identity
  makes it (K_AUDIENCE, K_OIDC_SERVICE_ACCOUNT): the function accepts nothing else.

Stand-ins, as in test_podsweeper_pod.py: the pod is made from the Deployment's template (no
Deployment controller; spec.nodeName, no scheduler for it), the ServiceAccount admission
plugin's token volume is added by the test, and the adapter runs on the host, not as the pod
Eventing's controller would generate (it is given the RBAC Eventing gives a generated adapter
to ask for its OIDC token).

The lab note's job (tests/node/seed.py) then runs: the workers crash-loop under the kubelet, the
master succeeds; podsweeper, from its pod, deletes the three workers within the seed's bound of
`Succeeded` (a figure), keeps the master, and keeps each worker's real exit code and the log
line the kubelet served in its evidence, read back with `podsweeper evidence`.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from pathlib import Path

import pytest
from kubernetes import client

from podsweeper.config import SHIPPED_AUDIENCE, SHIPPED_SENDERS
from tests.node import shipped
from tests.node.seed import (
    JOB,
    WORKER_LINE,
    WORKERS,
    Seen,
    Watched,
    assert_workers_cleaned_up,
    run_seed,
    runs_kept_twice,
    say,
)
from tests.support import figures
from tests.support.figures import SEED_CLEANUP_BOUND
from tests.support.harness.processes import wait_until
from tests.support.stack import observe

# The install and the job run in the test itself (image import, pod Ready, the seed's ~40 s):
# its own bound, not the node rung's 300 s.
pytestmark = [pytest.mark.node, pytest.mark.ci, pytest.mark.timeout(600)]

ADAPTER_SA = SHIPPED_SENDERS[0].rsplit(":", 1)[1]
POD = "podsweeper-0"


@pytest.fixture(scope="module")
def world(pytestconfig):
    """NodeWorld, with everything built first (the receive adapter too), progress on stderr."""
    from tests.node.world import started

    with started(pytestconfig, adapter=True) as world:
        yield world


def _install(world, core: client.CoreV1Api, timings: dict[str, float]) -> dict:
    """The image imported, the shipped objects applied, the pod made; returns the pod as Ready."""
    from tests.node.proxy import KubeProxy
    from tests.support.controlplane.launcher import Kube

    cp, node = world.control_plane, world.real_node
    started = time.monotonic()
    image = shipped.import_image(node)
    timings["image build" if image.built else "image (cached archive)"] = image.seconds
    timings["import"] = time.monotonic() - started - image.seconds

    kube = Kube(cp.url, cp.tokens["admin"], cp.ca_file)
    try:
        applied = shipped.apply_overlay(kube, shipped.rendered())
        # The Eventing controller's grant to a generated adapter: ask for its OIDC identity's token.
        kube.apply(_token_role())
        kube.apply(_token_binding())
    finally:
        kube.close()
    say(f"applied from {shipped.OVERLAY.relative_to(shipped.REPO)}: {applied}")
    core.create_namespaced_config_map(
        shipped.NAMESPACE,
        {"metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": Path(str(cp.ca_file)).read_text()}},
    )
    core.create_namespaced_service_account(shipped.NAMESPACE, {"metadata": {"name": ADAPTER_SA}})

    proxy = KubeProxy(node).start()
    timings.update({f"kube-proxy {k}": v for k, v in proxy.timings.items()})

    (deployment,) = [o for o in shipped.rendered(shipped.LIVE) if o["kind"] == "Deployment"]
    pod = shipped.pod_from_deployment(deployment, node.name)
    (container,) = pod["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["PODSWEEPER_DRY_RUN"] == "false" and "PODSWEEPER_AUTH" not in env, env  # live, oidc
    started = time.monotonic()
    core.create_namespaced_pod(shipped.NAMESPACE, pod)

    def ready() -> bool:
        found = core.read_namespaced_pod(POD, shipped.NAMESPACE)
        for status in found.status.container_statuses or []:
            if status.state.terminated or status.restart_count:
                raise AssertionError(f"podsweeper's container exited: {status}\n{_log(core, previous=True)}")
        return any(c.type == "Ready" and c.status == "True" for c in found.status.conditions or [])

    wait_until(
        "podsweeper's pod Ready", ready, timeout=120, check=node.check_alive, tails=node.tails, interval=0.2
    )
    timings["pod Ready"] = time.monotonic() - started
    found = core.read_namespaced_pod(POD, shipped.NAMESPACE)
    assert found.spec.containers[0].security_context.read_only_root_filesystem is True
    return found


def _token_role() -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "podsweeper-adapter-oidc-token", "namespace": shipped.NAMESPACE},
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["serviceaccounts/token"],
                "resourceNames": [ADAPTER_SA],
                "verbs": ["create"],
            }
        ],
    }


def _token_binding() -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "podsweeper-adapter-oidc-token", "namespace": shipped.NAMESPACE},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "podsweeper-adapter-oidc-token",
        },
        # The control plane's `source` user: the adapter's ServiceAccount (tests/support/controlplane).
        "subjects": [{"kind": "ServiceAccount", "name": "podsweeper-source", "namespace": "podsweeper"}],
    }


def _keep_for_the_secrets_check(core: client.CoreV1Api, namespace: str) -> None:
    """The seed namespace's Events and evidence stores, and podsweeper's pod log, for the check at
    the end of the run (tests/support/leaks.py): the seed's pods carry its secrets."""
    from tests.support import leaks
    from tests.support.harness.served import ALL_LOGS
    from tests.support.stack import namespace_outputs

    env = {"PODSWEEPER_EVIDENCE_LOG_LINES": "20", "PODSWEEPER_EVIDENCE_LOGS_EXCLUDE_NAMESPACES": ""}
    (deployment,) = [o for o in shipped.rendered(shipped.LIVE) if o["kind"] == "Deployment"]
    env.update(
        {e["name"]: e["value"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    )
    leaks.keep(namespace_outputs(core, [namespace], env))
    log = Path(tempfile.mkdtemp(prefix="podsweeper-node-pod-")) / "podsweeper.log"  # outlives the world
    log.write_text(_log(core))
    ALL_LOGS.append(log)


def _log(core: client.CoreV1Api, previous: bool = False) -> str:
    try:
        return core.read_namespaced_pod_log(POD, shipped.NAMESPACE, previous=previous)
    except client.ApiException as error:
        return f"(no log: {error.status} {error.reason})"


def test_the_seed_on_a_real_node_cleaned_by_podsweeper_as_a_pod(world, request):
    from tests.support.adapter.launcher import ReceiveAdapter, install_source_rbac, source_config

    cp = world.control_plane
    timings: dict[str, float] = {}
    admin_api = cp.api_client("admin")
    request.addfinalizer(admin_api.close)
    core = client.CoreV1Api(admin_api)
    found = _install(world, core, timings)
    sink = f"http://{found.status.pod_ip}:8080/"

    namespace = "seed-pod"
    core.create_namespace({"metadata": {"name": namespace}})
    install_source_rbac(admin_api)
    config = source_config([namespace], "Resource")
    workdir = world.workdir
    adapter_env = {
        "NAME": "podsweeper",
        "SYSTEM_NAMESPACE": "knative-eventing",
        "NAMESPACE": shipped.NAMESPACE,
        "K_SINK": sink,
        "K_SOURCE_CONFIG": json.dumps(config),
        # Eventing's sender identity (authentication-oidc), as it sets them on the adapter it generates.
        "K_AUDIENCE": SHIPPED_AUDIENCE,
        "K_OIDC_SERVICE_ACCOUNT": ADAPTER_SA,
    }
    kubeconfig = cp.write_kubeconfig(workdir / "kubeconfig-source", "source")
    adapter = ReceiveAdapter(kubeconfig, config, sink, workdir=workdir, container_env=adapter_env).start()
    request.addfinalizer(adapter.stop)

    def alive() -> None:
        world.check_alive()
        adapter.check()

    def done(now_seen: Seen) -> bool:
        return "Succeeded" in now_seen.conditions and all(
            now_seen.uids.get(w) in now_seen.gone for w in WORKERS
        )

    request.addfinalizer(lambda: _keep_for_the_secrets_check(core, namespace))
    seen, created = run_seed(Watched(namespace, admin_api, alive), done, 150)
    say(f"by its pod: timeline (s after the create):\n{seen.timeline()}\ntimings: {timings}")
    log = _log(core)
    assert "Succeeded" in seen.conditions, f"{seen.timeline()}\n--- podsweeper's log:\n{log[-3000:]}"
    succeeded = seen.conditions["Succeeded"][0]
    workers = {w: seen.uids[w] for w in WORKERS}
    assert all(uid in seen.deleting for uid in workers.values()), (
        f"workers not deleted:\n{seen.timeline()}\n--- podsweeper's log:\n{log[-3000:]}\n"
        f"--- adapter:\n{adapter.text()[-3000:]}"
    )
    assert not any(seen.deleting[u] < succeeded for u in workers.values()), (
        "a worker went before the job finished"
    )
    last_delete = max(seen.deleting[u] for u in workers.values())
    # The seed's bound (tests/support/figures.py): the claim of 1 s plus 2 s for a 2-core machine
    # shared with the rest of the run; here the events cross the node's veth and the pod reads
    # the API server through kube-proxy.
    assert figures.within(
        "seed, real node, podsweeper as a pod: s from Succeeded seen to the last worker's delete",
        last_delete - succeeded,
        "<=",
        SEED_CLEANUP_BOUND,
    ), f"{last_delete - succeeded:.3f}s"
    say(f"by its pod: the last worker's delete {1000 * (last_delete - succeeded):.0f} ms after Succeeded")

    # The master kept; the workers' deletes were podsweeper's (its PodsCleanedUp Event on the job).
    assert_workers_cleaned_up(core, namespace, seen, created["metadata"]["uid"])

    # The evidence the pod kept: each worker's real runs, exit 1, the line the kubelet served.
    records = observe.evidence(cp.admin_kubeconfig, namespace, JOB)
    assert {r["pod"] for r in records} == set(WORKERS), records
    for record in records:
        assert record["exit_code"] == 1 and record["container"] == "pytorch", record
        assert record["node"] == world.real_node.name, record
    for name in WORKERS:
        mine = [r for r in records if r["pod"] == name]
        assert any(r["source"] == "deleted by podsweeper" for r in mine), mine
        assert any(WORKER_LINE in (r.get("logs") or "") for r in mine), mine
    assert not runs_kept_twice(records)
    # Every request the adapter sent was accepted: its token was the one the function asked for.
    refused = [line for line in adapter.text().splitlines() if _refused(line)]
    assert not refused, refused[:5]


# klog's header: severity and date, time to the microsecond, thread id, file:line]. Its digits are
# no status: a microsecond field such as .782401 once read as a refused request.
_KLOG_HEADER = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{6}\s+\d+ [^\]]*\] ")
_UNAUTHORIZED = re.compile(r"(?<![\w.])401(?![\w.])")


def _refused(line: str) -> bool:
    """An adapter log line that says a send failed or was answered 401 (outside klog's header)."""
    message = _KLOG_HEADER.sub("", line)
    return "failed to send" in message or bool(_UNAUTHORIZED.search(message))


def test_a_refused_send_is_told_from_a_timestamp_that_holds_401():
    """The check above reads the adapter's log: a 401 answer counts, klog's digits do not."""
    cached = 'I1206 22:39:51.782401   12993 reflector.go:446] "Caches populated" type="*unstructured"'
    assert not _refused(cached)
    assert not _refused("I1206 22:39:51.000001     401 reflector.go:446] watch started")
    assert _refused('E1206 22:39:51.782400   12993 adapter.go:80] "send" status=401 "Unauthorized"')
    assert _refused('{"level":"error","msg":"failed to send cloudevent","error":"500"}')
    assert _refused('{"level":"error","msg":"sending event","code":401}')
