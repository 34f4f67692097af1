"""A real node in the test world: containerd + runc + the real kubelet, joined to the test control
plane, in a network namespace of the test's own.

    node = RealNode("podsweeper-node")                            # its CA, its work directory
    cp = ControlPlane(apiserver_args=node.apiserver_args).start() # trusts the node's CA
    node.start(cp)                                                # Node Ready when it returns
    ...                                                           # pods with spec.nodeName = node.name
    report = node.stop()                                          # pods, processes, mounts, netns gone

What it is made of (tests/node/build.py gets the binaries; docs: tests/support/world/README.md,
"Real node"):

- Network: a namespace held by tests.support.harness.netns.NetNamespace, joined to the host by a
  veth pair on a private /30 (host 10.250.N.1, node 10.250.N.2): the node's InternalIP, which the
  kubelet serves on (:10250) and kube-apiserver on the host reaches. The pods' subnet 10.251.N.0/24
  exists only on the node's bridge (CNI bridge + host-local); the host routes it to the node over
  the veth. Nothing in the namespace has a default route, so neither the node nor a pod can send
  anything off this machine. The kubelet reaches kube-apiserver at 127.0.0.1:<port> inside the
  namespace, forwarded to the host's loopback (NetNamespace.forward_out).
- containerd (Debian's 1.6) with its own root, state, socket, CNI config and netns directory
  under the node's work directory; CRI `restrict_oom_score_adj` and `disable_apparmor` (without
  the first, every sandbox fails on these machines: `runc create failed: ... can't get final
  child's PID from pipe: EOF`, the sandbox's oom_score_adj of -998 refused).
- The image: busybox-static on scratch (buildah), imported with `ctr images import` and used both
  as the sandbox ("pause") image and as the workload image (pods: imagePullPolicy Never, image
  IMAGE).
- The kubelet (the control plane's own version): `failCgroupV1: false` (the machines are cgroup
  v1), cgroupfs driver under a cgroup root of its own (/podsweeper-<name>), image GC off (an
  imported image cannot be pulled again), eviction thresholds at 1%, no DNS config for pods.
  Identity: a client certificate `system:node:<name>` in `system:nodes` (Node authorizer +
  NodeRestriction); its API served with a certificate for its InternalIP, which kube-apiserver
  verifies; kube-apiserver's calls authenticated by certificate and authorized by
  SubjectAccessReview.

Every process runs as a tests.support.harness.processes.Process (own session, log file, killed
with the test process). Shims and containers outlive containerd by design: stop() deletes the
node's pods through the API first (the kubelet stops them and tears their network down), then
stops the kubelet and containerd, then kills whatever is still in the node's cgroups or still
names its containerd socket, unmounts what is left under its directories, removes its cgroups,
its netns (the veth goes with it) and its work directory, and says what it had to do.
If the test process is killed outright, containerd and the kubelet die with it but shims and
containers do not: the next start (reap_stale) sweeps every node whose owner process is gone.
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import yaml  # type: ignore[import-untyped]

from tests.node import build
from tests.node.pki import APISERVER_KUBELET_CLIENT, NodeCa
from tests.support.harness import locks
from tests.support.harness.netns import NetNamespace
from tests.support.harness.processes import Process, wait_until

if TYPE_CHECKING:
    from tests.support.controlplane.launcher import ControlPlane

IMAGE = build.IMAGE_NAME
KUBELET_PORT = 10250
CGROUP_FS = Path("/sys/fs/cgroup")
LEGACY_CONTAINER_LOGS = Path("/var/log/containers")  # the kubelet's symlinks, a fixed path
SHIM_SOCKETS = Path("/run/containerd/s")  # containerd 1.6 puts every shim's socket there
# Fixed paths the kubelet uses whatever its --root-dir: its device plugin registration socket (two
# kubelets on one machine would share it) and the directory of its log symlinks. Removed at stop
# when this node made them (the directories once empty).
DEVICE_PLUGIN_SOCKET = Path("/var/lib/kubelet/device-plugins/kubelet.sock")
KUBELET_FIXED_DIRS = (DEVICE_PLUGIN_SOCKET.parent, DEVICE_PLUGIN_SOCKET.parent.parent, LEGACY_CONTAINER_LOGS)
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"}


class NodeError(RuntimeError):
    """A part of the node could not be set up or died; the message carries its log tail."""


@dataclass
class StopReport:
    """What stop() found and did. `own` lists the node's own files it removed as planned (the
    kubelet's log symlinks of containers it had not collected yet, its device plugin socket);
    `sweep` what the graceful path had left (processes killed, mounts unmounted, shim sockets);
    `remaining` what could not be removed."""

    pods_deleted: int = 0
    graceful_seconds: float = 0.0
    own: list[str] = field(default_factory=list)
    sweep: list[str] = field(default_factory=list)
    remaining: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.remaining


def _run(cmd: list[str], timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **ENV})
    if check and proc.returncode != 0:
        raise NodeError(
            f"{' '.join(cmd)} exited {proc.returncode}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    return proc


class RealNode:
    """One real node (see the module's docstring). Attributes once started: `name`, `ip` (its
    InternalIP), `pod_subnet`, `workdir`, `timings` (seconds per phase), `versions`."""

    def __init__(
        self,
        name: str = "podsweeper-node",
        *,
        log: TextIO = sys.stderr,
        ready_timeout: float = 120.0,
        cluster_dns: str | None = None,
    ):
        self.name = name
        # The cluster DNS Service's address the kubelet writes into pods' resolv.conf (ClusterFirst);
        # None: pods get no DNS configuration (tests/node/dns.py runs the cluster DNS).
        self.cluster_dns = cluster_dns
        self.log = log
        self.ready_timeout = ready_timeout
        self.workdir = Path(tempfile.mkdtemp(prefix=f"podsweeper-{name}-", dir="/var/tmp"))
        self.ca = NodeCa(self.workdir / "pki")
        self.apiserver_client = self.ca.issue("apiserver-kubelet-client", APISERVER_KUBELET_CLIENT)
        self.cgroup_root = f"/podsweeper-{name}-{secrets.token_hex(3)}"
        self.timings: dict[str, float] = {}
        self.versions: dict[str, str] = {}
        self.index: int | None = None
        self.netns: NetNamespace | None = None
        self.containerd: Process | None = None
        self.kubelet: Process | None = None
        self.control_plane: ControlPlane | None = None
        self._stopped = False
        self._made_dirs = [d for d in KUBELET_FIXED_DIRS if not d.exists()]

    # -- what the control plane must be started with ------------------------------------

    @property
    def apiserver_args(self) -> tuple[str, ...]:
        """kube-apiserver flags (ControlPlane(apiserver_args=...)): trust the node's CA for client
        certificates and for the kubelet's serving certificate, present a client certificate to
        kubelets, reach them at their InternalIP only, Node authorization + NodeRestriction.
        (--authorization-mode is a list flag: this one adds Node to the launcher's RBAC.)"""
        return (
            f"--client-ca-file={self.ca.cert}",
            f"--kubelet-certificate-authority={self.ca.cert}",
            f"--kubelet-client-certificate={self.apiserver_client.cert}",
            f"--kubelet-client-key={self.apiserver_client.key}",
            "--kubelet-preferred-address-types=InternalIP",
            "--authorization-mode=Node",
            "--enable-admission-plugins=NodeRestriction",
        )

    @property
    def cp(self) -> ControlPlane:
        assert self.control_plane is not None, "node not started"
        return self.control_plane

    # -- addresses ----------------------------------------------------------------------

    @property
    def ip(self) -> str:
        assert self.index is not None, "node not started"
        return f"10.250.{self.index}.2"

    @property
    def host_ip(self) -> str:
        assert self.index is not None, "node not started"
        return f"10.250.{self.index}.1"

    @property
    def pod_subnet(self) -> str:
        assert self.index is not None, "node not started"
        return f"10.251.{self.index}.0/24"

    @property
    def veth(self) -> str:
        return f"psnode{self.index}"

    @property
    def socket(self) -> Path:
        return self.workdir / "containerd" / "containerd.sock"

    @property
    def pod_logs(self) -> Path:
        return self.workdir / "pod-logs"

    def client_kubeconfig(self, path: Path, user: str, pair) -> Path:
        """A kubeconfig for the control plane (its CA inline) as `user`, with a client pair the
        node's CA issued (`pki.Pair`): the kubelet's, kube-proxy's."""
        ca = base64.b64encode(Path(str(self.cp.ca_file)).read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "podsweeper", "cluster": {"server": self.cp.url, "certificate-authority-data": ca}}
            ],
            "users": [
                {"name": user, "user": {"client-certificate": str(pair.cert), "client-key": str(pair.key)}}
            ],
            "contexts": [{"name": user, "context": {"cluster": "podsweeper", "user": user}}],
            "current-context": user,
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    # -- lifecycle ----------------------------------------------------------------------

    def __enter__(self) -> RealNode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, control_plane: ControlPlane) -> RealNode:
        """Get the binaries (first use: apt-get, go build, buildah), make the network, start
        containerd, import the image, start the kubelet; return once the Node is Ready."""
        if os.geteuid() != 0:
            raise NodeError("a real node needs root (network namespace, cgroups, mounts)")
        self.control_plane = control_plane
        atexit.register(self.stop)
        t0 = time.monotonic()
        reap_stale(self.log)
        try:
            self.versions = build.ensure_packages(self.log)
            kubelet_bin = build.kubelet(self.log)
            archive = build.image_archive(self.log)
            self.timings["binaries"] = time.monotonic() - t0
            self._phase("network", self._network)
            self._phase("containerd", self._start_containerd)
            self._phase("image", lambda: self._import(archive))
            self._phase("rbac", self._rbac)
            self._phase("kubelet", lambda: self._start_kubelet(kubelet_bin))
        except BaseException:
            self.stop()
            raise
        self.timings["total"] = time.monotonic() - t0
        self._say(
            f"{self.name} Ready at {self.ip} in {self.timings['total']:.1f}s ("
            + ", ".join(f"{k} {v:.1f}s" for k, v in self.timings.items() if k != "total")
            + ")"
        )
        return self

    def _phase(self, name: str, step: Callable[[], object]) -> None:
        started = time.monotonic()
        step()
        self.timings[name] = time.monotonic() - started

    def _network(self) -> None:
        with locks.held("node-network", self.log):  # one /30 per node on this machine
            used = _run(["ip", "-o", "-4", "addr", "show"]).stdout
            self.index = next(n for n in range(1, 255) if f" 10.250.{n}.1/" not in used)
            # What a later node needs to clean up after this one if this process is killed.
            (self.workdir / STATE_FILE).write_text(
                json.dumps(
                    {
                        "owner": _process_id(os.getpid()),
                        "name": self.name,
                        "index": self.index,
                        "cgroup_root": self.cgroup_root,
                    }
                )
            )
            self.netns = NetNamespace(self.name, self.ip, self.workdir, error=NodeError)
            inside = ["nsenter", f"--net={self.netns.path}", "--"]
            for cmd in (
                [
                    "ip",
                    "link",
                    "add",
                    self.veth,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "eth0",
                    "netns",
                    str(self.netns.pid),
                ],
                ["ip", "addr", "add", f"{self.host_ip}/30", "dev", self.veth],
                ["ip", "link", "set", self.veth, "up"],
                ["ip", "route", "add", self.pod_subnet, "via", self.ip, "dev", self.veth],
                [*inside, "ip", "addr", "add", f"{self.ip}/30", "dev", "eth0"],
                [*inside, "ip", "link", "set", "eth0", "up"],
                [*inside, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"],
            ):
                _run(cmd)
        # kube-apiserver listens on the host's loopback only: 127.0.0.1:<port> inside reaches it.
        port = int(self.cp.url.rsplit(":", 1)[1])
        self.netns.forward_out(port)

    def _inside(self, argv: list[str]) -> list[str]:
        assert self.netns is not None
        return ["nsenter", f"--net={self.netns.path}", "--", *argv]

    def _start_containerd(self) -> None:
        root = self.workdir / "containerd"
        cni = self.workdir / "cni"
        (cni / "net.d").mkdir(parents=True, exist_ok=True)
        (cni / "net.d" / "10-podsweeper.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "0.4.0",
                    "name": "podsweeper-node",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": "cni0",
                            "isGateway": True,
                            "ipMasq": False,  # nothing leaves the node: no NAT to anywhere
                            "hairpinMode": True,
                            "ipam": {
                                "type": "host-local",
                                "ranges": [[{"subnet": self.pod_subnet}]],
                                "routes": [{"dst": "0.0.0.0/0"}],
                                "dataDir": str(cni / "ipam"),
                            },
                        }
                    ],
                },
                indent=1,
            )
        )
        config = root / "config.toml"
        root.mkdir(parents=True, exist_ok=True)
        config.write_text(
            f"""version = 2
root = "{root / "root"}"
state = "{root / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{self.socket}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{root / "opt"}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{IMAGE}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{build.CNI_BIN_DIR}"
    conf_dir = "{cni / "net.d"}"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{root / "state" / "runc"}"
"""
        )
        self.containerd = Process("containerd", self.workdir / "containerd.log", error=NodeError).launch(
            self._inside(["/usr/bin/containerd", "--config", str(config), "--log-level", "info"]),
            env={**os.environ, **ENV},
            cwd=self.workdir,
        )
        self.containerd.wait(
            "serve its socket",
            lambda: self.socket.exists() and self._ctr(["version"], check=False).returncode == 0,
            timeout=60,
        )

    def _ctr(
        self, args: list[str], check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return _run(
            ["ctr", "--address", str(self.socket), "-n", "k8s.io", *args], timeout=timeout, check=check
        )

    def _import(self, archive: Path) -> None:
        self._ctr(["images", "import", "--snapshotter", "overlayfs", str(archive)])
        listed = self._ctr(["images", "ls", "-q"]).stdout.split()
        if not any(ref.endswith(IMAGE) for ref in listed):
            raise NodeError(f"{IMAGE} not among containerd's images after import: {listed}")

    def _rbac(self) -> None:
        """kube-apiserver's client identity may use the kubelet API (logs, exec): RBAC's own role."""
        from kubernetes import client

        api = self.cp.api_client("admin")
        try:
            binding: Any = {
                "metadata": {"name": f"podsweeper-{self.name}-apiserver-kubelet"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "system:kubelet-api-admin",
                },
                "subjects": [
                    {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "User",
                        "name": APISERVER_KUBELET_CLIENT,
                    }
                ],
            }
            client.RbacAuthorizationV1Api(api).create_cluster_role_binding(binding)
        except client.ApiException as e:
            if e.status != 409:
                raise
        finally:
            api.close()

    def _make_cgroups(self) -> None:
        """The kubelet's cgroup root in every hierarchy (it refuses a root that is missing); cpuset
        children need cpus and mems before any task may join."""
        for hierarchy in _hierarchies():
            path = hierarchy / self.cgroup_root.lstrip("/")
            path.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):
                if (path / name).exists() and not (path / name).read_text().strip():
                    (path / name).write_text((hierarchy / name).read_text())

    def _start_kubelet(self, binary: Path) -> None:
        self._make_cgroups()
        kdir = self.workdir / "kubelet"
        kdir.mkdir(exist_ok=True)
        serving = self.ca.issue(
            "kubelet-serving", f"system:node:{self.name}", server=True, ips=(self.ip,), dns=(self.name,)
        )
        client_pair = self.ca.issue("kubelet-client", f"system:node:{self.name}", organization="system:nodes")
        kubeconfig = self.client_kubeconfig(kdir / "kubeconfig", self.name, client_pair)
        config = kdir / "config.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubelet.config.k8s.io/v1beta1",
                    "kind": "KubeletConfiguration",
                    "failCgroupV1": False,  # these machines are cgroup v1 (KEP-5573)
                    "cgroupDriver": "cgroupfs",
                    "cgroupRoot": self.cgroup_root,
                    "containerRuntimeEndpoint": f"unix://{self.socket}",
                    "address": self.ip,
                    "port": KUBELET_PORT,
                    "readOnlyPort": 0,
                    "healthzBindAddress": "127.0.0.1",
                    "healthzPort": 10248,
                    "tlsCertFile": str(serving.cert),
                    "tlsPrivateKeyFile": str(serving.key),
                    "authentication": {
                        "anonymous": {"enabled": False},
                        "webhook": {"enabled": True},
                        "x509": {"clientCAFile": str(self.ca.cert)},
                    },
                    "authorization": {"mode": "Webhook"},
                    "failSwapOn": False,
                    "podLogsDir": str(self.pod_logs),
                    "volumePluginDir": str(kdir / "volume-plugins"),
                    # The host's resolv.conf is never handed to pods (nothing resolves off the machine).
                    "resolvConf": "",
                    **(
                        {"clusterDNS": [self.cluster_dns], "clusterDomain": "cluster.local"}
                        if self.cluster_dns
                        else {}
                    ),
                    # An imported image cannot be pulled again: never collect images.
                    "imageGCHighThresholdPercent": 100,
                    "imageGCLowThresholdPercent": 99,
                    "evictionHard": {
                        "memory.available": "1Mi",
                        "nodefs.available": "1%",
                        "nodefs.inodesFree": "1%",
                        "imagefs.available": "1%",
                    },
                    "enforceNodeAllocatable": [],
                    "registerNode": True,
                    "serializeImagePulls": False,
                }
            )
        )
        self.kubelet = Process("kubelet", self.workdir / "kubelet.log", error=NodeError).launch(
            self._inside(
                [
                    str(binary),
                    f"--config={config}",
                    f"--kubeconfig={kubeconfig}",
                    f"--hostname-override={self.name}",
                    f"--node-ip={self.ip}",
                    f"--root-dir={kdir / 'root'}",
                    f"--cert-dir={kdir / 'pki'}",
                    "--node-labels=podsweeper.dev/real-node=true",
                    "--v=1",
                ]
            ),
            env={**os.environ, **ENV},
            cwd=self.workdir,
        )
        self.kubelet.wait("report its Node Ready", self.node_ready, timeout=self.ready_timeout, interval=0.5)

    def node_ready(self) -> bool:
        from kubernetes import client

        api = self.cp.api_client("admin")
        try:
            node = client.CoreV1Api(api).read_node(self.name)
        except client.ApiException as e:
            if e.status == 404:
                return False
            raise
        finally:
            api.close()
        conditions = node.status.conditions if node.status else None
        return any(c.type == "Ready" and c.status == "True" for c in conditions or [])

    def check_alive(self) -> None:
        for process in (self.containerd, self.kubelet):
            if process is not None:
                process.check()

    def tails(self, lines: int = 30) -> str:
        return "\n".join(
            f"--- {p.name}:\n{p.tail(lines)}" for p in (self.containerd, self.kubelet) if p is not None
        )

    # -- stop ----------------------------------------------------------------------------

    def stop(self, pod_timeout: float = 60.0) -> StopReport:
        """Delete the node's pods through the API and wait until the kubelet has stopped them,
        stop the kubelet and containerd, then sweep (see the module docstring). Idempotent."""
        report = StopReport()
        if self._stopped:
            return report
        self._stopped = True
        atexit.unregister(self.stop)
        t0 = time.monotonic()
        if (
            self.kubelet is not None
            and self.kubelet.alive()
            and self.control_plane is not None
            and self.control_plane.workdir
        ):
            try:
                report.pods_deleted = self._delete_pods(pod_timeout)
            except Exception as e:  # noqa: BLE001 - the sweep below still runs
                report.sweep.append(f"deleting the node's pods failed: {e}")
        for process in (self.kubelet, self.containerd):
            if process is not None:
                process.stop(timeout=10.0)
        # The kubelet makes its root directory a shared bind mount of itself: its own, expected.
        root_dir = str(self.workdir / "kubelet" / "root")
        for _ in range(4):  # it may be mounted more than once
            if root_dir not in self._mounts():
                break
            _run(["umount", root_dir], check=False)
        self._remove_own_files(report)
        report.graceful_seconds = time.monotonic() - t0
        self._sweep(report)
        self._say(
            f"{self.name} stopped in {time.monotonic() - t0:.1f}s ({report.pods_deleted} pods deleted, "
            f"{len(report.own)} own files removed"
            + (f"; sweep: {'; '.join(report.sweep)}" if report.sweep else "; nothing left to sweep")
            + (f"; REMAINING: {'; '.join(report.remaining)}" if report.remaining else "")
            + ")"
        )
        return report

    def _delete_pods(self, timeout: float) -> int:
        from kubernetes import client

        api = self.cp.api_client("admin")
        try:
            core = client.CoreV1Api(api)
            selector = f"spec.nodeName={self.name}"
            pods = core.list_pod_for_all_namespaces(field_selector=selector).items
            for pod in pods:
                try:
                    meta: Any = pod.metadata
                    core.delete_namespaced_pod(meta.name, meta.namespace, grace_period_seconds=1)
                except client.ApiException as e:
                    if e.status != 404:
                        raise
            # The kubelet deletes each pod for good once its containers and sandbox are stopped.
            wait_until(
                "the kubelet to stop the node's pods",
                lambda: not core.list_pod_for_all_namespaces(field_selector=selector).items,
                timeout=timeout,
                check=lambda: None,
                tails=self.tails,
                error=NodeError,
                interval=0.5,
            )
            try:
                core.delete_node(self.name)
            except client.ApiException as e:
                if e.status != 404:
                    raise
            try:
                client.RbacAuthorizationV1Api(api).delete_cluster_role_binding(
                    f"podsweeper-{self.name}-apiserver-kubelet"
                )
            except client.ApiException as e:
                if e.status != 404:
                    raise
            return len(pods)
        finally:
            api.close()

    def _remove_own_files(self, report: StopReport) -> None:
        # Exited containers the kubelet had not collected yet (it does every minute) keep their
        # symlinks in the fixed /var/log/containers.
        if LEGACY_CONTAINER_LOGS.is_dir():
            for link in LEGACY_CONTAINER_LOGS.iterdir():
                if link.is_symlink() and os.readlink(link).startswith(str(self.workdir)):
                    report.own.append(f"removed {link}")
                    link.unlink()
        if DEVICE_PLUGIN_SOCKET.parent in self._made_dirs and DEVICE_PLUGIN_SOCKET.is_socket():
            report.own.append(f"removed {DEVICE_PLUGIN_SOCKET}")
            DEVICE_PLUGIN_SOCKET.unlink()

    def _sweep(self, report: StopReport) -> None:
        # 1. Processes: anything in the node's cgroups (containers, sandboxes), any shim of its
        #    containerd (a shim outlives containerd by design).
        shims = self._shim_pids()
        sockets = [_shim_socket(str(self.socket), _cmdline(pid).split()) for pid in shims]
        pids = set(self._cgroup_pids()) | set(shims)
        for pid in sorted(pids):
            report.sweep.append(f"killed pid {pid} ({_cmdline(pid)[:80]})")
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while any(Path(f"/proc/{pid}").exists() for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        # 2. Mounts under the work directory (rootfs overlays, shm, netns, volumes), deepest first.
        for mount in sorted(self._mounts(), key=lambda m: -len(m)):
            report.sweep.append(f"unmounted {mount}")
            if _run(["umount", mount], check=False).returncode != 0:
                _run(["umount", "-l", mount], check=False)
        # 3. The kubelet's cgroups, deepest first.
        for hierarchy in _hierarchies():
            top = hierarchy / self.cgroup_root.lstrip("/")
            if not top.exists():
                continue
            for path in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [
                top
            ]:
                try:
                    path.rmdir()
                except OSError as e:
                    report.remaining.append(f"cgroup {path}: {e}")
        # 4. The sockets of the shims killed above (a shim removes its own when it exits).
        for socket in sockets:
            if socket is not None and socket.exists():
                report.sweep.append(f"removed {socket}")
                socket.unlink()
        # 5. The network namespace (its veth pair goes with it), then the work directory.
        if self.netns is not None:
            self.netns.close()
        if self.index is not None:
            # The kernel tears a network namespace down in a work queue, after its last user:
            # 10 s was once not enough on a loaded machine (the link was gone moments later).
            deadline = time.monotonic() + 30
            while _run(["ip", "link", "show", self.veth], check=False).returncode == 0:
                if time.monotonic() > deadline:
                    report.remaining.append(f"host link {self.veth}")
                    break
                time.sleep(0.1)
        for pid in self._cgroup_pids() + self._shim_pids():
            report.remaining.append(f"process {pid} ({_cmdline(pid)[:80]})")
        for mount in self._mounts():
            report.remaining.append(f"mount {mount}")
        if not report.remaining:
            shutil.rmtree(self.workdir, ignore_errors=True)
            if self.workdir.exists():
                report.remaining.append(f"directory {self.workdir}")
        for directory in (*self._made_dirs, SHIM_SOCKETS, SHIM_SOCKETS.parent):  # if empty
            try:
                directory.rmdir()
            except OSError:
                pass

    def _cgroup_pids(self) -> list[int]:
        pids: set[int] = set()
        for hierarchy in _hierarchies():
            top = hierarchy / self.cgroup_root.lstrip("/")
            if top.exists():
                for procs in top.rglob("cgroup.procs"):
                    try:
                        pids.update(int(p) for p in procs.read_text().split())
                    except OSError:
                        pass
        return sorted(pids)

    def _shim_pids(self) -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                argv = _cmdline(int(entry.name)).split()
                if argv and "containerd-shim" in argv[0] and str(self.socket) in argv:
                    found.append(int(entry.name))
        return found

    def _mounts(self) -> list[str]:
        mounts = []
        prefix = str(self.workdir) + "/"
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if point.startswith(prefix):
                mounts.append(point)
        return mounts

    def _say(self, message: str) -> None:
        print(f"node: {message}", file=self.log, flush=True)


STATE_FILE = "node.json"


def _process_id(pid: int) -> str:
    """pid and start time: a pid the kernel has reused since does not match."""
    try:
        return f"{pid}:{Path(f'/proc/{pid}/stat').read_text().rpartition(')')[2].split()[19]}"
    except OSError:
        return f"{pid}:gone"


def reap_stale(log: TextIO = sys.stderr) -> list[StopReport]:
    """Clean up after nodes whose test process was killed (SIGKILL, OOM): containerd and the
    kubelet died with it (die_with_parent), but shims, containers, their mounts and the network
    namespace they hold outlive it. Sweeps every node work directory whose owner is gone."""
    reports = []
    for state in Path("/var/tmp").glob(f"podsweeper-*/{STATE_FILE}"):
        try:
            info = json.loads(state.read_text())
        except (OSError, ValueError):
            continue
        pid = int(info["owner"].split(":")[0])
        if _process_id(pid) == info["owner"]:
            continue  # its owner runs: a node of another test process
        node = RealNode.__new__(RealNode)
        node.name, node.log, node.workdir = info["name"], log, state.parent
        node.index, node.cgroup_root, node.netns = info["index"], info["cgroup_root"], None
        node._made_dirs = []
        report = StopReport()
        node._remove_own_files(report)
        node._sweep(report)
        node._say(f"reaped the stale node {state.parent}: {report}")
        reports.append(report)
    return reports


def _hierarchies() -> list[Path]:
    """The mounted cgroup hierarchies (v1: one per controller; the v2 `unified` one too)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        point = fields[4]
        fstype = fields[fields.index("-") + 1]
        if fstype in ("cgroup", "cgroup2") and point.startswith(str(CGROUP_FS) + "/"):
            found.append(Path(point))
    return found


def _shim_socket(address: str, argv: list[str]) -> Path | None:
    """Where containerd 1.6 puts a shim's socket: /run/containerd/s/<sha256(address/ns/id)>."""
    try:
        namespace, shim_id = argv[argv.index("-namespace") + 1], argv[argv.index("-id") + 1]
    except (ValueError, IndexError):
        return None
    return SHIM_SOCKETS / hashlib.sha256(os.path.join(address, namespace, shim_id).encode()).hexdigest()


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""
