"""podsweeper's Deployment as it ships, on the real node (issue 41): the pods made by the real
Deployment and ReplicaSet controllers, placed by the scheduler, given their ServiceAccount
token by the admission plugin; the PodDisruptionBudget and the rolling update as a cluster runs
them.

The world: NodeWorld(service_accounts=True) (tests/node/world.py): kube-apiserver with the
ServiceAccount admission plugin on, the controller manager's Deployment, ReplicaSet,
ServiceAccount, root-CA publisher and disruption controllers, the scheduler and one real node.
`knative/overlays/without-serving` is applied but for its two sources (no Eventing CRDs here),
in its namespace labelled Pod Security `restricted`, with the live Deployment of
`knative/overlays/live-without-serving`; the one change to it is the image (the local build of
the Dockerfile, imagePullPolicy Never). kube-proxy routes the `kubernetes` Service. In order:

a. the two replicas Ready through their probes, each with the token volume the admission plugin
   added, each answering a PingSource tick 200 (the token of the PingSource's identity) after
   reading the API in-cluster with its own ServiceAccount token;
b. the PodDisruptionBudget (minAvailable 1): with both Ready one eviction is allowed, a second
   at once is refused (429), and the ReplicaSet's replacement is Ready after;
c. a rolling update (a template annotation changed; maxSurge 1, maxUnavailable 0): at every
   moment the watch saw, two pods not terminating were Ready (above the PDB's floor of one),
   and the rollout ends with two new pods Ready;
d. a replica's container SIGKILLed while it answers a tick: the kubelet restarts it, it is Ready
   again, and it answers the next tick 200; the other replica answered throughout.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid

import pytest
import requests
from kubernetes import client, watch

from tests.node import shipped
from tests.support.harness.processes import wait_until

pytestmark = pytest.mark.node

SELECTOR = "app.kubernetes.io/name=podsweeper,app.kubernetes.io/component=function"
NS = shipped.NAMESPACE


def say(text: str) -> None:
    print(f"\ndeployment: {text}", file=sys.stderr, flush=True)


@pytest.fixture(scope="module")
def world(pytestconfig):
    from tests.node.world import started

    with started(pytestconfig, service_accounts=True, extra_controllers=("disruption-controller",)) as world:
        yield world


@pytest.fixture(scope="module")
def installed(world):
    """The image imported, the install applied, kube-proxy on, the Deployment Available."""
    from tests.node.proxy import KubeProxy
    from tests.support.controlplane.launcher import Kube

    cp, node = world.control_plane, world.real_node
    shipped.import_image(node)
    kube = Kube(cp.url, cp.tokens["admin"], cp.ca_file)
    try:
        applied = shipped.apply_overlay(kube, shipped.rendered())
        kube.apply(shipped.live_deployment())
    finally:
        kube.close()
    say(f"applied: {applied} and the live Deployment")
    proxy = KubeProxy(node).start()
    api = cp.api_client("admin")
    core = client.CoreV1Api(api)
    core.create_namespaced_service_account(NS, {"metadata": {"name": shipped.PINGSOURCE_SENDER}})
    apps = client.AppsV1Api(api)
    started = time.monotonic()
    wait_until(
        "the Deployment's two replicas Available",
        lambda: (apps.read_namespaced_deployment("podsweeper", NS).status.available_replicas or 0) == 2,
        timeout=180,
        check=world.check_alive,
        tails=lambda: f"{node.tails()}\n{_pods_text(core)}",
        interval=0.5,
    )
    say(f"Deployment Available in {time.monotonic() - started:.1f}s")
    yield api
    proxy.stop()
    api.close()


def _pods_text(core) -> str:
    return "\n".join(
        f"{p.metadata.name} {p.status.phase} {[(c.type, c.status) for c in p.status.conditions or []]}"
        for p in core.list_namespaced_pod(NS, label_selector=SELECTOR).items
    )


def _serving(core) -> list:
    """The replicas not terminating, Ready."""
    return [
        p
        for p in core.list_namespaced_pod(NS, label_selector=SELECTOR).items
        if not p.metadata.deletion_timestamp
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    ]


def test_a_the_replicas_ready_with_the_admission_plugins_token_answer_a_tick(world, installed):
    core = client.CoreV1Api(installed)
    pods = _serving(core)
    assert len(pods) == 2, _pods_text(core)
    for pod in pods:
        assert pod.spec.node_name == world.real_node.name  # placed by the scheduler
        assert pod.spec.service_account_name == "podsweeper"
        projected = [v for v in pod.spec.volumes if v.name.startswith("kube-api-access-")]
        assert len(projected) == 1, [v.name for v in pod.spec.volumes]  # the admission plugin's
        sources = projected[0].projected.sources
        assert any(s.service_account_token for s in sources) and any(
            s.config_map and s.config_map.name == "kube-root-ca.crt" for s in sources
        )
        answer = shipped.tick(core, pod.status.pod_ip)
        assert answer.status_code == 200, f"{pod.metadata.name}: {answer.status_code} {answer.text}"
    say(f"a: both replicas answered a tick 200: {[p.metadata.name for p in pods]}")


def test_b_the_disruption_budget_allows_one_eviction_and_refuses_the_second(world, installed):
    core = client.CoreV1Api(installed)
    policy = client.PolicyV1Api(installed)
    wait_until(
        "the disruption controller: 1 disruption allowed",
        lambda: (
            policy.read_namespaced_pod_disruption_budget("podsweeper", NS).status.disruptions_allowed == 1
        ),
        timeout=60,
        check=world.check_alive,
        tails=lambda: str(policy.read_namespaced_pod_disruption_budget("podsweeper", NS).status),
        interval=0.5,
    )
    first, second = sorted(p.metadata.name for p in _serving(core))

    def evict(name: str) -> None:
        core.create_namespaced_pod_eviction(
            name, NS, client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=NS))
        )

    evict(first)
    with pytest.raises(client.ApiException) as refused:
        evict(second)
    assert refused.value.status == 429, refused.value.body
    say(f"b: evicted {first}; {second} refused: {json.loads(refused.value.body)['message']}")
    wait_until(
        "the replacement Ready (two replicas serving)",
        lambda: len(_serving(core)) == 2 and first not in {p.metadata.name for p in _serving(core)},
        timeout=120,
        check=world.check_alive,
        tails=lambda: _pods_text(core),
        interval=0.5,
    )


class _ReadyWatch(threading.Thread):
    """Every change of the replicas, as the watch delivers it: the fewest not terminating and Ready."""

    def __init__(self, api):
        super().__init__(daemon=True)
        self.core = client.CoreV1Api(api)
        self.stopped = threading.Event()
        self.ready: dict[str, bool] = {}
        self.fewest: int | None = None
        self.changes = 0

    def run(self) -> None:
        listed = self.core.list_namespaced_pod(NS, label_selector=SELECTOR)
        for pod in listed.items:
            self._saw(pod)
        stream = watch.Watch()
        for event in stream.stream(
            self.core.list_namespaced_pod,
            NS,
            label_selector=SELECTOR,
            resource_version=listed.metadata.resource_version,
            timeout_seconds=300,
        ):
            pod = event["object"]
            if event["type"] == "DELETED":
                self.ready.pop(pod.metadata.name, None)
            else:
                self._saw(pod)
            self.changes += 1
            count = sum(self.ready.values())
            self.fewest = count if self.fewest is None else min(self.fewest, count)
            if self.stopped.is_set():
                stream.stop()

    def _saw(self, pod) -> None:
        self.ready[pod.metadata.name] = not pod.metadata.deletion_timestamp and any(
            c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []
        )


def test_c_a_rolling_update_keeps_a_replica_serving_throughout(world, installed):
    core = client.CoreV1Api(installed)
    apps = client.AppsV1Api(installed)
    before = {p.metadata.name for p in _serving(core)}
    watcher = _ReadyWatch(installed)
    watcher.start()
    time.sleep(1.0)  # the watch is open
    apps.patch_namespaced_deployment(
        "podsweeper",
        NS,
        {"spec": {"template": {"metadata": {"annotations": {"podsweeper.dev/rollout": str(uuid.uuid4())}}}}},
    )
    started = time.monotonic()

    def rolled() -> bool:
        found = apps.read_namespaced_deployment("podsweeper", NS)
        status = found.status
        serving = {p.metadata.name for p in _serving(core)}
        return (
            status.observed_generation == found.metadata.generation
            and status.updated_replicas == 2
            and (status.available_replicas or 0) == 2
            and not (status.replicas or 0) > 2
            and len(serving) == 2
            and not serving & before
        )

    wait_until(
        "the rollout done", rolled, timeout=240, check=world.check_alive, tails=lambda: _pods_text(core)
    )
    took = time.monotonic() - started
    time.sleep(1.0)
    watcher.stopped.set()
    # (The watch thread ends at its next event or its timeout; it is a daemon.)
    say(f"c: rollout in {took:.1f}s; fewest Ready while it ran: {watcher.fewest} ({watcher.changes} changes)")
    assert watcher.changes >= 6, watcher.changes  # two pods made Ready, two terminated, at the least
    # maxUnavailable 0: an old replica goes only once a new one is Ready, so both keep serving,
    # above the PDB's floor of one (the watch delivers a namespace's pod changes in etcd's order).
    assert watcher.fewest is not None and watcher.fewest >= 2, watcher.fewest


def test_d_a_replica_killed_mid_tick_restarts_and_answers_again(world, installed):
    core = client.CoreV1Api(installed)
    victim, other = sorted(_serving(core), key=lambda p: p.metadata.name)
    (status,) = victim.status.container_statuses
    restarts = status.restart_count
    container_id = status.container_id.split("://", 1)[1]
    answers: dict[str, object] = {}

    def in_flight() -> None:
        try:
            answers["victim"] = shipped.tick(core, victim.status.pod_ip, timeout=20).status_code
        except requests.RequestException as error:
            answers["victim"] = type(error).__name__

    sender = threading.Thread(target=in_flight)
    sender.start()
    time.sleep(0.05)
    world.real_node._ctr(["tasks", "kill", "--signal", "SIGKILL", container_id])
    sender.join(30)
    assert shipped.tick(core, other.status.pod_ip).status_code == 200  # the other replica serves on

    def back() -> bool:
        pod = core.read_namespaced_pod(victim.metadata.name, NS)
        (now,) = pod.status.container_statuses
        return now.restart_count > restarts and now.ready

    wait_until(
        "the killed replica restarted and Ready",
        back,
        timeout=120,
        check=world.check_alive,
        tails=lambda: _pods_text(core),
        interval=0.5,
    )
    pod = core.read_namespaced_pod(victim.metadata.name, NS)
    (now,) = pod.status.container_statuses
    assert now.last_state.terminated is not None and now.last_state.terminated.exit_code == 137, (
        now.last_state
    )
    answer = shipped.tick(core, pod.status.pod_ip)
    say(
        f"d: the tick in flight got {answers.get('victim')}; restarted {now.restart_count}x, answers {answer.status_code}"
    )
    assert answer.status_code == 200, answer.text
