"""Cluster DNS on the real node (issue 41): CoreDNS behind the `kube-dns` Service, as a cluster
runs it (tests/node/dns.py), so a pod reaches a Service by the name Knative writes into a sink:
`http://<service>.<namespace>.svc.cluster.local`.

The world: NodeWorld(cluster_dns=True): the ServiceAccount admission plugin on, the controller
manager's endpointslice controller, kube-proxy, CoreDNS v1.14.7 from its Go module as a pod; the
kubelet writes 10.0.0.10 into every ClusterFirst pod's resolv.conf. In order:

a. a pod's resolv.conf names the cluster DNS and the cluster's search path, and its lookups of
   `kubernetes.default.svc.cluster.local` and `kube-dns.kube-system.svc.cluster.local` answer the
   Services' ClusterIPs, exactly;
   a name no Service has is NXDOMAIN (busybox's nslookup, which asks the server itself);
b. podsweeper's live Deployment and Service as they ship (knative/overlays/without-serving): a
   pod of podsweeper's image (Python, glibc's resolver: what a dynamically linked program uses)
   reaches its /healthz by `http://podsweeper.podsweeper.svc.cluster.local/healthz` and, through
   the search path, by `http://podsweeper.podsweeper/healthz` (DNS, then kube-proxy to a Ready
   replica); a name no Service has is not found. (busybox-static's own wget cannot resolve names
   in a scratch image: its static glibc has no NSS modules to load; it crashes.)
"""

from __future__ import annotations

import sys
import time

import pytest
from kubernetes import client

from tests.node import podsweeper_image, shipped
from tests.node.dns import CLUSTER_DNS_IP
from tests.node.node import IMAGE
from tests.support.harness.processes import wait_until

pytestmark = pytest.mark.node

KUBERNETES = "kubernetes.default.svc.cluster.local"
KUBE_DNS = "kube-dns.kube-system.svc.cluster.local"
NOWHERE = "nothing-here.default.svc.cluster.local"


def say(text: str) -> None:
    print(f"\ncluster-dns: {text}", file=sys.stderr, flush=True)


@pytest.fixture(scope="module")
def world(pytestconfig):
    from tests.node.world import started

    with started(pytestconfig, cluster_dns=True) as world:
        say(f"DNS {world.dns.timings if world.dns else None}")
        yield world


@pytest.fixture(scope="module")
def api(world):
    with world.control_plane.api_client("admin") as admin:
        yield admin


def _run(core, namespace: str, name: str, command: list[str], image: str = IMAGE, timeout: float = 90) -> str:
    """A pod running `command` to its end (the node's busybox image by default); its log."""
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "c", "image": image, "imagePullPolicy": "Never", "command": command}],
            },
        },
    )
    wait_until(
        f"pod {name} ended",
        lambda: core.read_namespaced_pod(name, namespace).status.phase in ("Succeeded", "Failed"),
        timeout=timeout,
        check=lambda: None,
        tails=lambda: str(core.read_namespaced_pod(name, namespace).status),
        interval=0.5,
    )
    log = core.read_namespaced_pod_log(name, namespace)
    phase = core.read_namespaced_pod(name, namespace).status.phase
    assert phase == "Succeeded", f"{name} {phase}:\n{log}"
    return log


def test_a_a_pods_lookups_answer_the_services_cluster_ips(world, api):
    core = client.CoreV1Api(api)
    wait_until(
        "ServiceAccount default in namespace default",
        lambda: any(
            sa.metadata.name == "default" for sa in core.list_namespaced_service_account("default").items
        ),
        timeout=30,
        check=lambda: None,
        tails=lambda: "",
    )
    log = _run(
        core,
        "default",
        "lookup",
        [
            "sh",
            "-c",
            f"cat /etc/resolv.conf; nslookup {KUBERNETES}; nslookup {KUBE_DNS}; nslookup {NOWHERE} || echo nslookup exited $?",
        ],
    )
    say(f"a: {log}")
    kubernetes_ip = core.read_namespaced_service("kubernetes", "default").spec.cluster_ip
    assert f"nameserver {CLUSTER_DNS_IP}" in log.splitlines(), log
    assert "search default.svc.cluster.local svc.cluster.local cluster.local" in log.splitlines(), log
    assert _answers(log, KUBERNETES) == [kubernetes_ip], log
    assert _answers(log, KUBE_DNS) == [CLUSTER_DNS_IP], log
    assert f"** server can't find {NOWHERE}: NXDOMAIN" in log, log


def _answers(log: str, name: str) -> list[str]:
    """The addresses busybox's nslookup printed for `name` (the lines after its `Name:` line)."""
    found, current = [], None
    for line in log.splitlines():
        if line.startswith("Name:"):
            current = line.split(None, 1)[1].strip()
        elif line.startswith("Address:") and current == name:
            found.append(line.split(None, 1)[1].strip())
        elif not line.strip():
            current = None
    return found


def test_b_podsweepers_service_is_reached_by_its_name(world, api):
    from tests.support.controlplane.launcher import Kube

    cp, node = world.control_plane, world.real_node
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    shipped.import_image(node)
    kube = Kube(cp.url, cp.tokens["admin"], cp.ca_file)
    try:
        shipped.apply_overlay(kube, shipped.rendered())
        kube.apply(shipped.live_deployment())
    finally:
        kube.close()
    started = time.monotonic()
    wait_until(
        "podsweeper's Deployment Available",
        lambda: (
            (apps.read_namespaced_deployment("podsweeper", shipped.NAMESPACE).status.available_replicas or 0)
            == 2
        ),
        timeout=180,
        check=world.check_alive,
        tails=node.tails,
        interval=0.5,
    )
    say(f"b: podsweeper Available in {time.monotonic() - started:.1f}s")
    # Python's resolver (glibc, as every dynamically linked program of a pod uses it), from
    # podsweeper's own image: by the full name, by the short one through the search path, and
    # a name no Service has.
    script = (
        "import socket, urllib.request\n"
        "for url in ('http://podsweeper.podsweeper.svc.cluster.local/healthz', 'http://podsweeper.podsweeper/healthz'):\n"
        "    with urllib.request.urlopen(url, timeout=10) as answer:\n"
        "        print('ANSWER', url, answer.status, answer.read()[:40])\n"
        "try:\n"
        "    socket.getaddrinfo('nothing-here.podsweeper.svc.cluster.local', 80)\n"
        "except socket.gaierror as error:\n"
        "    print('NOT-FOUND', error)\n"
    )
    log = _run(core, "default", "by-name", ["python", "-c", script], image=podsweeper_image.IMAGE)
    say(f"b: {log}")
    answers = [line.split() for line in log.splitlines() if line.startswith("ANSWER ")]
    assert [(a[1], a[2]) for a in answers] == [
        ("http://podsweeper.podsweeper.svc.cluster.local/healthz", "200"),
        ("http://podsweeper.podsweeper/healthz", "200"),
    ], log
    assert any(line.startswith("NOT-FOUND") for line in log.splitlines()), log
