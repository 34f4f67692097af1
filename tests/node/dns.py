"""Cluster DNS on the real node: CoreDNS as a cluster runs it, a pod behind the `kube-dns` Service.

    dns = ClusterDNS(world).start()   # NodeWorld(cluster_dns=True) does this itself
    dns.stop()

- The binary: CoreDNS v1.14.7 (COREDNS_VERSION) from its Go module, built from tests/node/coredns
  (a main with the plugins a cluster's DNS uses to answer for Services: kubernetes, cache,
  loadbalance, errors, log, health, ready; no `forward`, so no query leaves the machine), cached
  under ~/.cache/podsweeper by version and by that main's inputs (43 s with the kubelet's Go build
  cache). Its image: scratch with the static binary (tests/node/build.py binary_image).
- What is applied, in `kube-system`, as kubeadm's CoreDNS addon has it: the ServiceAccount
  `coredns`, a ClusterRole to list and watch Services, EndpointSlices, Namespaces (and Pods, for
  `pods insecure`) and its binding, the Corefile ConfigMap, a Deployment of one replica and the
  Service `kube-dns` at CLUSTER_DNS_IP (53 UDP and TCP). The kubelet writes that address into every
  ClusterFirst pod's resolv.conf (RealNode(cluster_dns=...)); the real kube-proxy routes it to the
  CoreDNS pod by the EndpointSlice the controller manager's endpointslice controller writes.
- CoreDNS reads the API in-cluster (its ServiceAccount token from the admission plugin, through the
  `kubernetes` Service): the world runs with service_accounts=True.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from tests.support.controlplane.build import GoBinary, ensure_built, source_digest
from tests.support.harness.processes import wait_until

if TYPE_CHECKING:
    from tests.node.world import NodeWorld

HERE = Path(__file__).parent / "coredns"
COREDNS_VERSION = "v1.14.7"  # tests/node/coredns/go.mod
COREDNS = GoBinary(
    "coredns",
    f"{COREDNS_VERSION}-{source_digest(HERE)}",
    "podsweeper.test/coredns",
    HERE,
    cold_build="1-5 minutes",
)
IMAGE = f"localhost/podsweeper-node-coredns:{COREDNS_VERSION}"
CLUSTER_DNS_IP = "10.0.0.10"  # kubeadm's choice: the tenth address of the Service range
NAMESPACE = "kube-system"
COREFILE = """.:53 {
    errors
    log
    health :8080
    ready :8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    cache 30
    loadbalance
}
"""
LABELS = {"k8s-app": "kube-dns"}


def archive(log: TextIO = sys.stderr) -> Path:
    """CoreDNS's image as a docker-archive, built (binary and image) on first use."""
    from tests.node.build import binary_image

    binary = ensure_built(COREDNS, log=log)
    return binary_image(IMAGE, binary, key=f"coredns-{COREDNS.version}", log=log)


def objects() -> list[dict]:
    rbac = "rbac.authorization.k8s.io/v1"
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "coredns", "namespace": NAMESPACE},
        },
        {
            "apiVersion": rbac,
            "kind": "ClusterRole",
            "metadata": {"name": "system:coredns"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"],
                },
                {
                    "apiGroups": ["discovery.k8s.io"],
                    "resources": ["endpointslices"],
                    "verbs": ["list", "watch"],
                },
            ],
        },
        {
            "apiVersion": rbac,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "system:coredns"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:coredns",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": NAMESPACE}],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "coredns", "namespace": NAMESPACE},
            "data": {"Corefile": COREFILE},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "coredns", "namespace": NAMESPACE, "labels": LABELS},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": LABELS},
                "template": {
                    "metadata": {"labels": LABELS},
                    "spec": {
                        "serviceAccountName": "coredns",
                        "dnsPolicy": "Default",  # its own queries never go to itself
                        "containers": [
                            {
                                "name": "coredns",
                                "image": IMAGE,
                                "imagePullPolicy": "Never",
                                "args": ["-conf", "/etc/coredns/Corefile"],
                                "ports": [
                                    {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                                    {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
                                ],
                                "volumeMounts": [
                                    {"name": "config", "mountPath": "/etc/coredns", "readOnly": True}
                                ],
                                "readinessProbe": {
                                    "httpGet": {"path": "/ready", "port": 8181},
                                    "periodSeconds": 2,
                                },
                                "livenessProbe": {
                                    "httpGet": {"path": "/health", "port": 8080},
                                    "periodSeconds": 10,
                                },
                            }
                        ],
                        "volumes": [{"name": "config", "configMap": {"name": "coredns"}}],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kube-dns", "namespace": NAMESPACE, "labels": LABELS},
            "spec": {
                "clusterIP": CLUSTER_DNS_IP,
                "selector": LABELS,
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                ],
            },
        },
    ]


class ClusterDNS:
    def __init__(self, world: NodeWorld, log: TextIO = sys.stderr):
        self.world = world
        self.log = log
        self.timings: dict[str, float] = {}

    def start(self, timeout: float = 120.0) -> ClusterDNS:
        """Image imported, objects applied; returns once the Deployment is Available and the
        Service has a ready endpoint (kube-proxy's rules follow within its sync)."""
        from kubernetes import client

        from tests.support.controlplane.launcher import Kube

        node, cp = self.world.real_node, self.world.control_plane
        assert cp is not None
        started = time.monotonic()
        image = archive(self.log)
        self.timings["image"] = time.monotonic() - started
        node._ctr(["images", "import", "--snapshotter", "overlayfs", str(image)], timeout=300)
        kube = Kube(cp.url, cp.tokens["admin"], cp.ca_file)
        try:
            for obj in objects():
                kube.apply(obj)
        finally:
            kube.close()
        begun = time.monotonic()
        with cp.api_client("admin") as api:
            apps, discovery = client.AppsV1Api(api), client.DiscoveryV1Api(api)

            def ready() -> bool:
                available = apps.read_namespaced_deployment("coredns", NAMESPACE).status.available_replicas
                slices = discovery.list_namespaced_endpoint_slice(
                    NAMESPACE, label_selector="kubernetes.io/service-name=kube-dns"
                ).items
                endpoints = [
                    e for s in slices for e in s.endpoints or [] if e.conditions and e.conditions.ready
                ]
                return bool(available) and bool(endpoints)

            wait_until(
                "CoreDNS Available behind the kube-dns Service",
                ready,
                timeout=timeout,
                check=self.world.check_alive,
                tails=node.tails,
                interval=0.5,
            )
        self.timings["ready"] = time.monotonic() - begun
        print(f"node: cluster DNS at {CLUSTER_DNS_IP} ready: {self.timings}", file=self.log, flush=True)
        return self
