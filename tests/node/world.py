"""The real Kubeflow world on one real node: tests/support/world's World, its nodes the RealNode.

`NodeWorld()` starts a control plane of its own (with the node's `apiserver_args`), the
controllers, scheduler and real training operator of World, and one RealNode instead of kwok's
nodes. Besides what World runs:

- kube-controller-manager also runs the node lifecycle controller: it lifts the node's
  `not-ready` taint once Ready, as on a cluster (kwok's worlds lift it by hand);
- the node is given `gpus_per_node` fake `nvidia.com/gpu` (a Node status capacity patch, as
  Kubernetes documents advertising an extended resource: nothing backs them, no device plugin),
  so the seed's pods ask for one GPU each as in the lab note;
- the operator's PyTorchJob worker init container (`init-pytorch`) is INIT_TEMPLATE: the node's
  one image, never pulled, and no DNS lookup of the master (there is no cluster DNS here).

Root only (tests/node/node.py).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from tests.node.node import IMAGE, RealNode
from tests.support.world.launcher import World

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
# The operator's PyTorchJob worker init container (pkg/controller.v1/pytorch/initcontainer.go,
# v1.9.4) as the real node can run it: the operator's own template but the node's one image,
# never pulled (the node has no way off the machine; the default is alpine:3.10, pulled), and
# no `nslookup` of the master's Service (there is no cluster DNS: the operator's loop would
# exit 1 after 100 tries). It waits 2 s, one turn of the operator's loop, and says so.
# ({{.MasterAddr}} and {{.InitContainerImage}} are the operator's template fields.)
INIT_TEMPLATE = """
- name: init-pytorch
  image: {{.InitContainerImage}}
  imagePullPolicy: Never
  resources:
    limits:
      cpu: 100m
      memory: 20Mi
    requests:
      cpu: 50m
      memory: 10Mi
  command: ['sh', '-c', 'echo waiting for master {{.MasterAddr}}; sleep 2; echo no cluster DNS here, not looked up']
"""


class NodeWorld(World):
    """World on one real node (`real_node`, a RealNode), and kwok nodes beside it if `nodes`
    (`nodes` names kwok's only, as in World). `apiserver_args`: more kube-apiserver flags, after
    the node's own (e.g. `--service-account-extend-token-expiration=false`)."""

    def __init__(
        self, *, nodes: int = 0, gpus_per_node: int = 8, cluster_dns: bool = False, log=sys.stderr, **world
    ):
        from tests.node.dns import CLUSTER_DNS_IP

        self.real_node = RealNode(
            "podsweeper-node", log=log, cluster_dns=CLUSTER_DNS_IP if cluster_dns else None
        )
        self.cluster_dns = cluster_dns
        self.proxy = None  # tests.node.proxy.KubeProxy, with cluster_dns
        self.dns = None  # tests.node.dns.ClusterDNS, with cluster_dns
        extra = (*world.pop("extra_controllers", ()), "node-lifecycle-controller")
        apiserver_args = (*self.real_node.apiserver_args, *world.pop("apiserver_args", ()))
        if cluster_dns:
            # CoreDNS reads the API with its ServiceAccount's token, and kube-proxy routes the
            # kube-dns Service by the EndpointSlices the controller manager writes.
            world["service_accounts"] = True
            extra = (*extra, "endpointslice-controller")
        super().__init__(
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            extra_controllers=extra,
            apiserver_args=apiserver_args,
            log=log,
            **world,
        )

    def start(self) -> NodeWorld:
        from tests.node import build as node_build

        node_build.ensure_all(log=self.log)
        super().start()
        if self.cluster_dns:
            from tests.node.dns import ClusterDNS
            from tests.node.proxy import KubeProxy

            try:
                self.proxy = KubeProxy(self.real_node, log=self.log).start()
                self.dns = ClusterDNS(self, log=self.log).start()
            except BaseException:
                self.stop()
                raise
        return self

    def check_alive(self) -> None:
        super().check_alive()
        self.real_node.check_alive()

    def _start_nodes(self) -> None:
        self._phase("real node", self._start_real_node)

    def _start_real_node(self) -> None:
        """Start the node, give it fake GPUs, and wait until the node lifecycle controller has
        lifted its not-ready taint (the scheduler places nothing before)."""
        node = self.real_node
        assert self.control_plane is not None
        node.start(self.control_plane)
        if self.gpus_per_node:
            # The kubelet keeps capacity entries it does not manage and derives allocatable from them.
            gpus = {"nvidia.com/gpu": str(self.gpus_per_node)}
            self._request(
                "PATCH",
                f"/api/v1/nodes/{node.name}/status",
                body={"status": {"capacity": gpus, "allocatable": gpus}},
                content_type="application/merge-patch+json",
            )

        def untainted() -> bool:
            found = self._request("GET", f"/api/v1/nodes/{node.name}")
            taints = [t["key"] for t in (found.get("spec") or {}).get("taints") or []]
            allocatable = (found.get("status") or {}).get("allocatable") or {}
            wanted = str(self.gpus_per_node) if self.gpus_per_node else None
            return NOT_READY_TAINT not in taints and allocatable.get("nvidia.com/gpu") == wanted

        self._wait(f"the node lifecycle controller to lift {NOT_READY_TAINT} from {node.name}", untainted)

    def _stop_nodes(self) -> None:
        if self.proxy is not None:
            self.proxy.stop()
        # The node deletes its pods through the API and waits for its kubelet to stop them.
        self.real_node.stop()

    def _operator_args(self) -> list[str]:
        assert self.workdir is not None
        template = self.workdir / "pytorch-init-container.yaml"
        template.write_text(INIT_TEMPLATE)
        return [
            f"--pytorch-init-container-template-file={template}",
            f"--pytorch-init-container-image={IMAGE}",
        ]

    def _probe_spec(self) -> dict:
        if self.nodes:  # kwok's: the scheduler may pick one of them
            return super()._probe_spec()
        limits = {"nvidia.com/gpu": "1"} if self.gpus_per_node else {}
        return {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "probe",
                    "image": IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "3600"],
                    "resources": {"limits": limits},
                }
            ],
        }


@contextlib.contextmanager
def started(pytestconfig=None, *, adapter: bool = False, also=(), **world) -> Iterator[NodeWorld]:
    """A NodeWorld (`world`: its arguments), started once what it runs is built or installed:
    etcd, kube-apiserver and the node's own parts, the receive adapter with `adapter`, and each
    of `also` (a callable taking the log), their progress on stderr with pytest's capture lifted;
    stopped at the end. Every node test module's world."""
    from tests.node import build
    from tests.support.controlplane.build import ETCD, KUBE_APISERVER, RECEIVE_ADAPTER, ensure_built

    capman = pytestconfig.pluginmanager.getplugin("capturemanager") if pytestconfig else None
    with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
        for binary in (ETCD, KUBE_APISERVER, *((RECEIVE_ADAPTER,) if adapter else ())):
            ensure_built(binary, log=sys.stderr)
        build.ensure_all(log=sys.stderr)
        for step in also:
            step(sys.stderr)
    with NodeWorld(log=sys.stderr, **world) as running:
        print(f"node: world ready: {running.timings}", file=sys.stderr, flush=True)
        yield running
