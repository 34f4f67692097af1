"""kube-proxy on the real node (iptables mode, in the node's network namespace), and the one
Service backend this world has: the `kubernetes` Service, so a pod reaches kube-apiserver at the
Service's address (10.0.0.1:443) with the KUBERNETES_SERVICE_HOST/PORT the kubelet gives it.

    proxy = KubeProxy(node).start()   # after node.start(cp); returns once the Service's rules exist
    ...
    proxy.stop()                      # before node.stop()

- The binary: k8s.io/kubernetes/cmd/kube-proxy at the control plane's version, built in the same
  scratch copy of the control plane's module as the kubelet (tests/node/build.py), cached under
  ~/.cache/podsweeper (11 s with the kubelet's Go build cache).
- Identity: a client certificate `system:kube-proxy` from the node's CA, which the bootstrap
  ClusterRoleBinding `system:node-proxier` authorizes (as on a kubeadm cluster).
- Configuration: mode iptables, clusterCIDR the node's pod subnet, health and metrics on the
  namespace's loopback, and nothing set machine-wide: no conntrack sizes or timeouts (kube-proxy
  writes them to /proc/sys/net/netfilter only when they are set), oomScoreAdj 0.
- The `kubernetes` Service's endpoints: the test control plane runs kube-apiserver with
  `--endpoint-reconciler-type=none` on the host's loopback, so nothing publishes them. Here an
  EndpointSlice `kubernetes` names the node's own address (10.250.N.2, port = kube-apiserver's),
  where a forwarder listening in the node's namespace passes connections to the host's loopback
  (as RealNode's forward_out does at 127.0.0.1:<port>; loopback addresses are refused in an
  EndpointSlice). The API server's certificate names 10.0.0.1, the address the pods dial.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import yaml  # type: ignore[import-untyped]

from tests.node.build import KUBELET
from tests.support.controlplane.build import GoBinary
from tests.support.harness import netns as netns_mod
from tests.support.harness.processes import Process

if TYPE_CHECKING:
    from tests.node.node import RealNode

KUBE_PROXY = GoBinary(
    "kube-proxy",
    KUBELET.version,
    "k8s.io/kubernetes/cmd/kube-proxy",
    KUBELET.module_dir,
    stamp=KUBELET.stamp,
)
SLICE_MANAGER = "podsweeper-tests"


class ProxyError(RuntimeError):
    """kube-proxy could not be built or started, or never wrote the Service's rules."""


def kube_proxy(log: TextIO = sys.stderr) -> Path:
    """The kube-proxy binary, built on first use."""
    from tests.support.world.build import build

    return build(KUBE_PROXY, log=log)


class KubeProxy:
    def __init__(self, node: RealNode, log: TextIO = sys.stderr):
        self.node = node
        self.log = log
        self.process: Process | None = None
        self.timings: dict[str, float] = {}

    @property
    def api_port(self) -> int:
        return int(self.node.cp.url.rsplit(":", 1)[1])

    def start(self, timeout: float = 60.0) -> KubeProxy:
        started = time.monotonic()
        binary = kube_proxy(self.log)
        self.timings["binary"] = time.monotonic() - started
        self._forward_node_address()
        self._endpoints()
        self._launch(binary)
        begun = time.monotonic()
        assert self.process is not None
        self.process.wait(
            "write the kubernetes Service's iptables rules", self.has_service_rules, timeout=timeout
        )
        self.timings["rules"] = time.monotonic() - begun
        return self

    def _forward_node_address(self) -> None:
        """kube-apiserver's port on the node's own address, inside its namespace."""
        node = self.node
        assert node.netns is not None
        pid, port, ip = node.netns.pid, self.api_port, node.ip

        def listen_inside():
            netns_mod._setns(pid)
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((ip, port))
            s.listen(64)
            return s

        listener = netns_mod._in_thread(listen_inside)
        # Closed with the node's namespace (NetNamespace.close closes its forwarders).
        node.netns.forwarders.append(netns_mod._Forwarder(listener, lambda: netns_mod._dial(port)))

    def _endpoints(self) -> None:
        from kubernetes import client

        api = self.node.cp.api_client("admin")
        try:
            body = {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": "kubernetes",
                    "namespace": "default",
                    "labels": {
                        "kubernetes.io/service-name": "kubernetes",
                        "endpointslice.kubernetes.io/managed-by": SLICE_MANAGER,
                    },
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": [self.node.ip], "conditions": {"ready": True}}],
                "ports": [{"name": "https", "port": self.api_port, "protocol": "TCP"}],
            }
            try:
                client.DiscoveryV1Api(api).create_namespaced_endpoint_slice("default", body)
            except client.ApiException as e:
                if e.status != 409:
                    raise
                client.DiscoveryV1Api(api).replace_namespaced_endpoint_slice("kubernetes", "default", body)
        finally:
            api.close()

    def _launch(self, binary: Path) -> None:
        node = self.node
        pdir = node.workdir / "kube-proxy"
        pdir.mkdir(exist_ok=True)
        pair = node.ca.issue("kube-proxy-client", "system:kube-proxy")
        kubeconfig = node.client_kubeconfig(pdir / "kubeconfig", "kube-proxy", pair)
        config = pdir / "config.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
                    "kind": "KubeProxyConfiguration",
                    "clientConnection": {"kubeconfig": str(kubeconfig)},
                    "hostnameOverride": node.name,
                    "mode": "iptables",
                    "clusterCIDR": node.pod_subnet,
                    "healthzBindAddress": "127.0.0.1:10256",
                    "metricsBindAddress": "127.0.0.1:10249",
                    "oomScoreAdj": 0,
                    "conntrack": {
                        "maxPerCore": 0,
                        "min": 0,
                        "tcpEstablishedTimeout": "0s",
                        "tcpCloseWaitTimeout": "0s",
                    },
                    "iptables": {"localhostNodePorts": False},
                    # NodePorts on the node's InternalIP only (unset: every local address, and an
                    # error line at start saying so).
                    "nodePortAddresses": ["primary"],
                }
            )
        )
        from tests.node.node import ENV, NodeError

        self.process = Process("kube-proxy", node.workdir / "kube-proxy.log", error=NodeError).launch(
            node._inside([str(binary), f"--config={config}", "--v=2"]),
            env={**os.environ, **ENV},
            cwd=node.workdir,
        )

    def iptables_save(self) -> str:
        return subprocess.run(
            self.node._inside(["iptables-save", "-t", "nat"]), capture_output=True, text=True, timeout=30
        ).stdout

    def has_service_rules(self) -> bool:
        rules = self.iptables_save()
        return "default/kubernetes:https" in rules and f"{self.node.ip}:{self.api_port}" in rules

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(timeout=10.0)

    def tail(self, lines: int = 30) -> str:
        return self.process.tail(lines) if self.process is not None else ""


if __name__ == "__main__":
    started = time.monotonic()
    print(kube_proxy(), f"({time.monotonic() - started:.0f}s)")
