"""Knative Serving's data plane on the real node, as far as it goes without a networking layer
(issue 41): the Revision of the Service we ship (knative/service/service.yaml) runs as a pod on the
kubelet with Serving's real queue-proxy beside podsweeper's container.

The world: NodeWorld(cluster_dns=True) with the controller manager's endpoints controller, and
Knative Serving v0.49.1's controller, autoscaler and webhook out of cluster
(tests/support/knative/serving.py). The queue-proxy is `knative.dev/serving/cmd/queue` of that
module as a scratch image (user 65532), tagged as config-deployment's `queue-sidecar-image` names
it; the Service's image `ghcr.io/podsweeper/podsweeper:0.1.0` is the local build of the Dockerfile,
tagged with that name in the node's containerd (a tag: the kubelet pulls nothing). The render of
knative/ is applied as `kubectl apply -k` does, but for the two sources (no Eventing here). In order:

a. the Revision's pod on the node, both containers Ready (the queue-proxy probes podsweeper's
   /healthz as the readiness probe says); the Service, Configuration, Revision and Route reach the
   conditions they reach on kwok's world: all True but the Route's IngressReady, Unknown with
   reason IngressNotConfigured (no networking layer reconciles the Ingress), and so the Route's
   and the Service's Ready; the Revision's Active is Unknown/NotReady (no activator);
b. a CloudEvent from a pod, with the PingSource identity's token, through the Revision's
   private Service by its name (cluster DNS, kube-proxy, the queue-proxy's port 8012): 200;
c. what the queue-proxy enforces, podsweeper's container frozen (cgroup freezer: `ctr tasks
   pause`) so that no request ends: of 120 requests at once, exactly 10 are refused at once (503:
   containerConcurrency 10 plus a queue of ten times that, 110, are held), and the 110 held are
   answered 504 when the Revision's timeoutSeconds (30) runs out (a figure); thawed, it answers.
"""

from __future__ import annotations

import sys
import threading
import time

import pytest
import requests
from kubernetes import client

from tests.node import podsweeper_image, shipped
from tests.node.build import binary_image
from tests.support import figures
from tests.support.controlplane.build import GoBinary, ensure_built
from tests.support.harness.processes import wait_until
from tests.support.knative import serving as ks

pytestmark = [pytest.mark.node, pytest.mark.timeout(600)]

QUEUE = GoBinary("knative-serving-queue", ks.SERVING_VERSION, f"{ks.SERVING_MODULE}/cmd/queue", ks.GOMOD)
SHIPPED_IMAGE = "ghcr.io/podsweeper/podsweeper:0.1.0"
NS = "podsweeper"
NOT_APPLIED = {"ApiServerSource", "PingSource"}
CONCURRENCY, TIMEOUT = 10, 30  # knative/service/service.yaml
QUEUE_DEPTH = 10 * CONCURRENCY  # the queue-proxy's breaker (pkg/queue/sharedmain): ten times the concurrency
SENT = 120
# The 504s come when the timeout runs out; 5 s for 110 answers on 2 shared cores.
TIMEOUT_MARGIN = 5.0


def say(text: str) -> None:
    print(f"\nserving-on-node: {text}", file=sys.stderr, flush=True)


@pytest.fixture(scope="module")
def world(pytestconfig):
    from tests.node.world import started

    with started(
        pytestconfig, also=(ks.build_all,), cluster_dns=True, extra_controllers=ks.KCM_CONTROLLERS
    ) as world:
        yield world


@pytest.fixture(scope="module")
def serving(world):
    with ks.KnativeServing(world.control_plane, log=sys.stderr) as started:
        yield started


@pytest.fixture(scope="module")
def api(world):
    with world.control_plane.api_client("admin") as admin:
        yield admin


@pytest.fixture(scope="module")
def revision_pod(world, serving, api):
    """The images on the node, knative/ applied; the Revision's pod once both containers are Ready."""
    from tests.support.controlplane.launcher import Kube
    from tests.support.tools.kustomize import render

    node, cp = world.real_node, world.control_plane
    queue = binary_image(
        ks.QUEUE_SIDECAR_IMAGE,
        ensure_built(QUEUE, log=sys.stderr),
        key=f"{QUEUE.name}-{QUEUE.version}",
        user="65532",
    )
    node._ctr(["images", "import", "--snapshotter", "overlayfs", str(queue)], timeout=300)
    shipped.import_image(node)
    node._ctr(["images", "tag", "--force", podsweeper_image.IMAGE, SHIPPED_IMAGE])
    kube = Kube(cp.url, cp.tokens["admin"], cp.ca_file)
    try:
        for obj in render(shipped.REPO / "knative"):
            if obj["kind"] not in NOT_APPLIED:
                kube.apply(obj)
    finally:
        kube.close()
    core = client.CoreV1Api(api)
    core.create_namespaced_service_account(NS, {"metadata": {"name": shipped.PINGSOURCE_SENDER}})
    started = time.monotonic()

    def ready():
        pods = core.list_namespaced_pod(NS, label_selector="serving.knative.dev/service=podsweeper").items
        for pod in pods:
            statuses = pod.status.container_statuses or []
            if len(statuses) == 2 and all(s.ready for s in statuses) and pod.spec.node_name == node.name:
                return pod
        return None

    pod = wait_until(
        "the Revision's pod Ready with both containers on the node",
        ready,
        timeout=180,
        check=lambda: (world.check_alive(), serving.check_alive()),
        tails=lambda: f"{node.tails()}\n{serving.tails()}\n{core.list_namespaced_pod(NS).items}",
        interval=0.5,
    )
    say(f"Revision pod {pod.metadata.name} Ready in {time.monotonic() - started:.1f}s at {pod.status.pod_ip}")
    return pod


def _conditions(serving, kind: str, name: str) -> dict[str, str]:
    """status.conditions as `status` or `status/reason` (reason when not True), as EXPECTED writes them."""
    plural = {
        "Revision": "revisions",
        "Route": "routes",
        "Service": "services",
        "Configuration": "configurations",
    }
    assert serving.kube is not None
    obj = serving.kube.get(f"/apis/serving.knative.dev/v1/namespaces/{NS}/{plural[kind]}/{name}") or {}
    return {
        c["type"]: c["status"]
        if c["status"] == "True" or not c.get("reason")
        else f"{c['status']}/{c['reason']}"
        for c in (obj.get("status") or {}).get("conditions") or []
    }


def test_a_the_revisions_pod_runs_with_the_real_queue_proxy(world, serving, api, revision_pod):
    """On the real node the Service, Configuration, Revision and Route reach the conditions they
    reach on kwok's world (tests/controllers/test_knative_serving.py, EXPECTED): Ready but for
    the Route's Ingress, which no networking layer reconciles (IngressNotConfigured)."""
    from tests.controllers.test_knative_serving import EXPECTED

    images = {c.name: c.image for c in revision_pod.spec.containers}
    assert images == {"podsweeper": SHIPPED_IMAGE, "queue-proxy": ks.QUEUE_SIDECAR_IMAGE}, images
    revision = revision_pod.metadata.labels["serving.knative.dev/revision"]
    names = {
        "Service": "podsweeper",
        "Configuration": "podsweeper",
        "Revision": revision,
        "Route": "podsweeper",
    }
    found: dict[str, dict[str, str]] = {}

    def settled() -> bool:
        found.update({kind: _conditions(serving, kind, name) for kind, name in names.items()})
        return all(
            found[kind].get(condition) == wanted
            for kind in names
            for condition, wanted in EXPECTED[kind].items()
        )

    wait_until(
        "the conditions kwok's world reaches",
        settled,
        timeout=90,
        check=serving.check_alive,
        tails=lambda: str(found),
        interval=1.0,
    )
    say(f"a: conditions {found}")


def test_b_a_cloudevent_through_the_revisions_private_service_by_name(world, api, revision_pod):
    core = client.CoreV1Api(api)
    revision = revision_pod.metadata.labels["serving.knative.dev/revision"]
    token = core.create_namespaced_service_account_token(
        shipped.PINGSOURCE_SENDER, NS, {"spec": {"audiences": [shipped.AUDIENCE], "expirationSeconds": 600}}
    ).status.token
    url = f"http://{revision}-private.{NS}.svc.cluster.local/"
    script = (
        "import os, urllib.request, uuid\n"
        f"request = urllib.request.Request({url!r}, data=b'{{}}', method='POST', headers={{\n"
        "    'Authorization': 'Bearer ' + os.environ['TOKEN'], 'Content-Type': 'application/json',\n"
        "    'ce-specversion': '1.0', 'ce-id': str(uuid.uuid4()), 'ce-type': 'dev.knative.sources.ping',\n"
        f"    'ce-source': '/apis/v1/namespaces/{NS}/pingsources/podsweeper-sweep'}})\n"
        "with urllib.request.urlopen(request, timeout=20) as answer:\n"
        "    print('ANSWER', answer.status)\n"
    )
    name = "sink-by-name"
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "c",
                        "image": podsweeper_image.IMAGE,
                        "imagePullPolicy": "Never",
                        "command": ["python", "-c", script],
                        "env": [{"name": "TOKEN", "value": token}],
                    }
                ],
            },
        },
    )
    wait_until(
        "the sender pod ended",
        lambda: core.read_namespaced_pod(name, "default").status.phase in ("Succeeded", "Failed"),
        timeout=90,
        check=world.check_alive,
        tails=lambda: "",
        interval=0.5,
    )
    log = core.read_namespaced_pod_log(name, "default")
    say(f"b: {url}: {log.strip()}")
    assert "ANSWER 200" in log.splitlines(), log


def test_c_the_queue_proxy_holds_concurrency_and_queue_and_answers_504_at_the_timeout(world, revision_pod):
    node = world.real_node
    (status,) = [s for s in revision_pod.status.container_statuses if s.name == "podsweeper"]
    container = status.container_id.split("://", 1)[1]
    url = f"http://{revision_pod.status.pod_ip}:8012/healthz"
    session = requests.Session()
    session.trust_env = False
    assert session.get(url, timeout=10).status_code == 200
    answers: list[tuple[float, int | str]] = []
    lock = threading.Lock()
    node._ctr(["tasks", "pause", container])
    try:
        started = time.monotonic()

        def send() -> None:
            try:
                code: int | str = requests.get(url, timeout=TIMEOUT + 30).status_code
            except requests.RequestException as error:
                code = type(error).__name__
            with lock:
                answers.append((time.monotonic() - started, code))

        threads = [threading.Thread(target=send) for _ in range(SENT)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(TIMEOUT + 60)
    finally:
        node._ctr(["tasks", "resume", container])
    refused = sorted(t for t, code in answers if code == 503)
    timed_out = sorted(t for t, code in answers if code == 504)
    others = [(t, code) for t, code in answers if code not in (503, 504)]
    say(
        f"c: {len(refused)} refused (503) by {max(refused, default=0):.2f}s, {len(timed_out)} timed out (504) "
        f"from {min(timed_out, default=0):.1f}s to {max(timed_out, default=0):.1f}s; others {others[:5]}"
    )
    assert len(answers) == SENT and not others, others
    assert len(refused) == SENT - (CONCURRENCY + QUEUE_DEPTH), len(refused)
    assert len(timed_out) == CONCURRENCY + QUEUE_DEPTH, len(timed_out)
    assert max(refused) < min(timed_out)
    assert min(timed_out) >= TIMEOUT - 1.0, min(timed_out)  # not before the timeout (1 s: thread start)
    assert figures.within(
        "serving, real node: s from the requests to the queue-proxy's last 504 (timeoutSeconds 30)",
        max(timed_out),
        "<=",
        TIMEOUT + TIMEOUT_MARGIN,
    ), max(timed_out)
    assert session.get(url, timeout=10).status_code == 200  # thawed, it answers
