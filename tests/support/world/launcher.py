"""The real Kubeflow world on top of the test control plane: only the kubelet is simulated.

Components, each a child process in its own process group (SIGTERM, then SIGKILL; killed by
the kernel if the launcher dies):

- kube-controller-manager: garbage collector (owned pods go when their job goes), job,
  replicaset, namespace and serviceaccount controllers;
- kube-scheduler: binds pods to nodes, so GPU requests must fit the nodes' capacity;
- kwok: plays the kubelet of a few fake GPU nodes with the Stage files in stages/;
- the Kubeflow training operator v1.9.4, out of cluster, all six kinds, every namespace, with
  its validating admission webhooks served on loopback (see webhook_cert.py);
- opt-in (`trainer=True`): the JobSet v0.12.0 and Kubeflow Trainer v2.3.0 controllers with
  their admission webhooks and the `torch-distributed` ClusterTrainingRuntime
  (see trainer_world.py), next to the v1 operator;
- opt-in (`mpi_operator=True`): the mpi-operator v0.8.0 serving MPIJob v2beta1, the training
  operator then running every kind but MPIJob (see mpi_world.py).
- opt-in (`volcano=True`): Volcano v1.10.0's scheduler and controller manager, started before
  the training operator, which then gang-schedules with it (see volcano_world.py).

World starts its own ControlPlane, or runs on top of one already running (then stop() leaves
the control plane up and removes what would break it without us: the webhook configuration).

    with World() as world:
        api = world.control_plane.api_client("admin")
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tests.fixtures.builders import LOG_SECRET
from tests.support.controlplane.launcher import ControlPlane, Kube
from tests.support.controlplane.manifests import go_module_dir, load_yaml
from tests.support.harness.ports import free_port
from tests.support.harness.processes import Process, answers_ok, tails, wait_until
from tests.support.world import build, mpi_world, trainer_world, volcano_world, webhook_cert

HERE = Path(__file__).parent
STAGES = HERE / "stages"
NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
OPERATOR_NAMESPACE = "kubeflow"  # the operator's default $MY_POD_NAMESPACE
WEBHOOK_SECRET = "training-operator-webhook-cert"
WEBHOOK_CONFIGURATION = "validator.training-operator.kubeflow.org"  # hard-coded in its main.go
KCM_CONTROLLERS = (
    "garbage-collector-controller",
    "job-controller",
    "replicaset-controller",
    "namespace-controller",
    "serviceaccount-controller",
    # Knative's own installs (tests/support/knative): the receive adapter and PingSource
    # dispatcher are Deployments whose Available condition the sources' Ready needs, and
    # Eventing's addressable-resolver ClusterRole is an aggregated one.
    "deployment-controller",
    "clusterrole-aggregation-controller",
)
ROOT_CA_PUBLISHER = "root-ca-certificate-publisher-controller"
# What `kubectl logs` shows for every simulated container (CRI log format, as kwok reads it).
CONTAINER_LOG = "".join(
    f"2026-01-01T00:00:0{i}.000000000Z stdout F {line}\n"
    for i, line in enumerate(
        [f"simulated by kwok (tests/support/world) {LOG_SECRET}", "epoch 1/1: loss 0.42", "done"]
    )
)


class WorldError(RuntimeError):
    """A component died or did not become ready; the message carries its log tail."""


class World:
    """Controller manager, scheduler, kwok nodes and the training operator on a ControlPlane.

    Attributes once started: ``control_plane``, ``workdir`` (logs), ``nodes`` (names),
    ``webhook_port`` and ``timings`` (seconds per phase); with ``trainer=True`` also
    ``trainer_phase`` (its webhook ports).
    """

    def __init__(
        self,
        control_plane: ControlPlane | None = None,
        *,
        nodes: int = 3,
        gpus_per_node: int = 8,
        webhooks: bool = True,
        trainer: bool = False,
        volcano: bool = False,
        mpi_operator: bool = False,
        extra_controllers: tuple[str, ...] = (),
        apiserver_args: tuple[str, ...] = (),
        service_accounts: bool = False,
        log=sys.stderr,
        ready_timeout: float = 90.0,
    ):
        """`nodes`: kwok nodes (0: none; a subclass brings its own, tests/node/world.py).
        `apiserver_args`: for the control plane the world starts, when it starts one."""
        self.control_plane = control_plane
        # More kube-controller-manager controllers than KCM_CONTROLLERS, e.g. Knative Serving's
        # ("deployment-controller", "endpoints-controller"; tests/support/knative/serving.py).
        self.kcm_controllers = (*KCM_CONTROLLERS, *(c for c in extra_controllers if c not in KCM_CONTROLLERS))
        self._own_control_plane = control_plane is None
        self.apiserver_args = apiserver_args
        # The ServiceAccount admission plugin on, and what it needs from the controller manager
        # (each namespace's kube-root-ca.crt; `default` is made already): its own control plane only.
        self.service_accounts = service_accounts
        if service_accounts:
            self.kcm_controllers = (*self.kcm_controllers, ROOT_CA_PUBLISHER)
        self.nodes = [f"kwok-node-{i}" for i in range(nodes)]
        self.gpus_per_node = gpus_per_node
        self.webhooks = webhooks
        self.trainer = trainer
        self.volcano = volcano
        self.mpi_operator = mpi_operator
        self.trainer_phase: trainer_world.TrainerPhase | None = None
        self.log = log
        self.ready_timeout = ready_timeout
        self.workdir: Path | None = None
        self.webhook_port = 0
        self.timings: dict[str, float] = {}
        self._procs: list[Process] = []
        self._netns: list = []  # tests.support.harness.netns.NetNamespace: a component's own network
        self._api: Kube | None = None

    def __enter__(self) -> World:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> World:
        t0 = time.monotonic()
        atexit.register(self.stop)
        try:
            wanted = {
                **build.CORE,
                **(build.TRAINER if self.trainer else {}),
                **(build.MPI if self.mpi_operator else {}),
                **(build.VOLCANO if self.volcano else {}),
            }
            bins = {name: build.build(b, log=self.log) for name, b in wanted.items()}
            self.timings["build"] = time.monotonic() - t0
            if self.control_plane is None:
                self.control_plane = ControlPlane(
                    log=self.log,
                    mpi_operator=self.mpi_operator,
                    apiserver_args=self.apiserver_args,
                    service_accounts=self.service_accounts,
                ).start()
            self.workdir = Path(tempfile.mkdtemp(prefix="podsweeper-world-"))
            cp = self.control_plane
            self._api = Kube(cp.url, cp.tokens["admin"], cp.ca_file, error=WorldError)
            kubeconfig = str(self.control_plane.admin_kubeconfig)
            self._phase("controllers", lambda: self._start_kube(bins, kubeconfig))
            if self.nodes:
                self._phase("kwok", lambda: self._start_kwok(bins["kwok"], kubeconfig))
            self._start_nodes()
            if self.volcano:  # its PodGroup CRD must be served when the operator starts
                self._phase("volcano", lambda: volcano_world.VolcanoPhase(self).start(bins, kubeconfig))
            self._phase("operator", lambda: self._start_operator(bins["training-operator"], kubeconfig))
            if self.trainer:
                self.trainer_phase = trainer_world.TrainerPhase(self)
                self._phase("trainer", lambda: self.trainer_phase.start(bins, kubeconfig))
            if self.mpi_operator:
                mpi = mpi_world.MpiPhase(self, OPERATOR_NAMESPACE)
                self._phase("mpi-operator", lambda: mpi.start(bins["mpi-operator"], kubeconfig))
            self._phase("probe", self._probe_pod)
        except BaseException:
            self.stop()
            raise
        self.timings["total"] = time.monotonic() - t0
        self._say(f"ready in {self.timings['total']:.1f}s {self._timings()}; logs in {self.workdir}")
        return self

    def stop(self) -> None:
        """Stop every component (operator first), then our own control plane. Idempotent."""
        if self._api is not None and self.webhooks and not self._own_control_plane:
            # Left behind, a webhook with failurePolicy Fail would refuse every job create.
            try:
                self._request("DELETE", self._vwc_path(), ok=(200, 404))
            except Exception as e:  # noqa: BLE001 - best effort while tearing down
                self._say(f"could not remove the webhook configuration: {e}")
        if self._api is not None and self.trainer_phase is not None and not self._own_control_plane:
            try:
                self.trainer_phase.remove_webhooks()
            except Exception as e:  # noqa: BLE001 - best effort while tearing down
                self._say(f"could not remove the JobSet/Trainer webhook configurations: {e}")
        self.trainer_phase = None
        for proc in reversed(self._procs):
            proc.stop()
        self._procs.clear()
        self._stop_nodes()
        for netns in self._netns:
            netns.close()
        self._netns.clear()
        if self._api is not None:
            self._api.close()
            self._api = None
        if self._own_control_plane and self.control_plane is not None:
            self.control_plane.stop()
            self.control_plane = None
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
        atexit.unregister(self.stop)

    def check_alive(self) -> None:
        """Raise WorldError (with the log tail) if a component has exited."""
        if self.control_plane is not None:
            self.control_plane.check_alive()
        for proc in self._procs:
            proc.check()

    def log_path(self, name: str) -> Path:
        """The log of one component: kube-controller-manager, kube-scheduler, kwok, training-operator,
        jobset-controller, trainer-controller-manager, vc-scheduler, vc-controller-manager."""
        assert self.workdir is not None, "world is not running"
        return self.workdir / f"{name}.log"

    # -- what a subclass brings (tests/node/world.py: a real node) -----------------------

    def _start_nodes(self) -> None:
        """Nodes besides kwok's, started after the controllers (none here)."""

    def _stop_nodes(self) -> None:
        """Stop them: after the operator (it would make its pods again), before the control plane."""

    def _operator_args(self) -> list[str]:
        """More training-operator flags."""
        return []

    def _probe_spec(self) -> dict:
        """The probe pod's spec: one container kwok runs (it never reads the image)."""
        return {
            "containers": [
                {"name": "probe", "image": "probe", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ]
        }

    def _root_ca_publisher(self) -> tuple[str, ...]:
        """With the ServiceAccount admission plugin, every pod's token volume names the
        namespace's kube-root-ca.crt: the controller manager publishes it."""
        if not self.service_accounts:
            return ()
        assert self.control_plane is not None and self.control_plane.ca_file is not None
        return (f"--root-ca-file={self.control_plane.ca_file}",)

    # -- phases ------------------------------------------------------------------------

    def _start_kube(self, bins: dict, kubeconfig: str) -> None:
        self._spawn(
            "kube-controller-manager",
            [
                str(bins["kube-controller-manager"]),
                f"--kubeconfig={kubeconfig}",
                "--secure-port=0",
                "--leader-elect=false",
                f"--controllers={','.join(self.kcm_controllers)}",
                "--use-service-account-credentials=false",
                *self._root_ca_publisher(),
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                str(bins["kube-scheduler"]),
                f"--kubeconfig={kubeconfig}",
                "--secure-port=0",
                "--leader-elect=false",
            ],
        )
        # The serviceaccount controller creating `default` shows the controller manager is working.
        self._wait(
            "kube-controller-manager (ServiceAccount default/default)",
            lambda: (
                self._request("GET", "/api/v1/namespaces/default/serviceaccounts/default", ok=(200, 404)).get(
                    "kind"
                )
                == "ServiceAccount"
            ),
        )

    def _start_kwok(self, kwok_bin: Path, kubeconfig: str) -> None:
        assert self.workdir is not None
        log_file = self.workdir / "container.log"
        log_file.write_text(CONTAINER_LOG)
        cluster_logs = {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "ClusterLogs",
            "metadata": {"name": "every-container"},
            "spec": {
                "logs": [{"containers": [], "logsFile": str(log_file), "previousLogsFile": str(log_file)}]
            },
        }
        config = self.workdir / "kwok-logs.yaml"
        config.write_text(json.dumps(cluster_logs))
        port = free_port()
        self._spawn(
            "kwok",
            [
                str(kwok_bin),
                f"--kubeconfig={kubeconfig}",
                f"--manage-nodes-with-annotation-selector={'='.join(NODE_ANNOTATION)}",
                "--node-ip=127.0.0.1",  # the API server reaches the fake kubelet (logs) here
                f"--node-port={port}",
                f"--server-address=127.0.0.1:{port}",
                "--cidr=10.244.0.1/16",
                *[f"--config={p}" for p in sorted(STAGES.glob("*.yaml"))],
                f"--config={config}",
            ],
        )
        for name in self.nodes:
            self._request("POST", "/api/v1/nodes", body=self._node(name), ok=(201, 409))

        def ready() -> bool:
            items = self._request("GET", "/api/v1/nodes")["items"]
            return sum(
                any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in (n.get("status") or {}).get("conditions", [])
                )
                for n in items
                if n["metadata"]["name"] in self.nodes
            ) == len(self.nodes)

        self._wait("kwok nodes Ready", ready)
        # The API server taints new nodes not-ready; only the node-lifecycle controller (off here:
        # it would evict pods whenever kwok's heartbeat is late) lifts it. Lift it once, ourselves.
        for name in self.nodes:
            self._request(
                "PATCH",
                f"/api/v1/nodes/{name}",
                body={"spec": {"taints": None}},
                content_type="application/merge-patch+json",
            )

    def _node(self, name: str) -> dict:
        resources = {
            "cpu": "64",
            "memory": "512Gi",
            "ephemeral-storage": "1Ti",  # the MPIJob launcher's init container asks for some
            "pods": "110",
            "nvidia.com/gpu": str(self.gpus_per_node),
        }
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {NODE_ANNOTATION[0]: NODE_ANNOTATION[1], "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok"},
            },
            "status": {"capacity": resources, "allocatable": resources},
        }

    def _start_operator(self, operator_bin: Path, kubeconfig: str) -> None:
        self._request(
            "POST", "/api/v1/namespaces", body={"metadata": {"name": OPERATOR_NAMESPACE}}, ok=(201, 409)
        )
        self.webhook_port = free_port()
        probe_port = free_port()
        secret = {"metadata": {"name": WEBHOOK_SECRET, "namespace": OPERATOR_NAMESPACE}, "type": "Opaque"}
        if self.webhooks:
            pair = webhook_cert.shared_pair(OPERATOR_NAMESPACE)
            secret["data"] = {k: base64.b64encode(v).decode() for k, v in pair.items()}
            self._install_webhook_configuration(pair["ca.crt"])
        # Even without webhooks the operator waits for its rotator, which needs the Secret.
        self._request("POST", f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/secrets", body=secret, ok=(201, 409))
        env = {k: v for k, v in os.environ.items() if k != "KUBEFLOW_NAMESPACE"}
        env["MY_POD_NAMESPACE"] = OPERATOR_NAMESPACE
        proc = self._spawn(
            "training-operator",
            [
                str(operator_bin),
                f"--kubeconfig={kubeconfig}",
                "--metrics-bind-address=0",
                f"--health-probe-bind-address=127.0.0.1:{probe_port}",
                f"--webhook-server-port={self.webhook_port}",  # binds on all interfaces: not settable
                *(volcano_world.OPERATOR_ARGS if self.volcano else ()),
                *(mpi_world.operator_args() if self.mpi_operator else []),
                *self._operator_args(),
            ],
            env=env,
        )
        self._wait("training operator /readyz", lambda: answers_ok(f"http://127.0.0.1:{probe_port}/readyz"))
        # Controllers start after the certificates, in a goroutine: wait for all six (five).
        kinds = len(mpi_world.OPERATOR_SCHEMES) if self.mpi_operator else 6
        self._wait(
            f"training operator: {kinds} controllers started",
            lambda: proc.text().count("Starting workers") >= kinds,
        )
        if self.webhooks:
            self._wait("admission webhook denies an invalid PyTorchJob", self._webhook_denies)

    def _webhook_denies(self) -> bool:
        job = {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "world-webhook-probe", "namespace": OPERATOR_NAMESPACE},
            "spec": {
                "pytorchReplicaSpecs": {
                    "Master": {
                        "replicas": 1,
                        "template": {"spec": {"containers": [{"name": "x", "image": "x"}]}},
                    }
                }
            },
        }
        path = f"/apis/kubeflow.org/v1/namespaces/{OPERATOR_NAMESPACE}/pytorchjobs?dryRun=All"
        r = self._request("POST", path, body=job, ok=(201, 403, 500))
        return "denied the request" in r.get("message", "")

    def _install_webhook_configuration(self, ca: bytes) -> None:
        """The operator's own webhooks (manifests/base/webhook), called at https://127.0.0.1:<port>."""
        module = go_module_dir(build.TRAINING_OPERATOR_MODULE, build.TRAINING_OPERATOR_VERSION)
        (vwc,) = load_yaml(module / "manifests/base/webhook/manifests.yaml")
        vwc["metadata"] = {"name": WEBHOOK_CONFIGURATION}
        for hook in vwc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {
                "url": f"https://127.0.0.1:{self.webhook_port}{path}",
                "caBundle": base64.b64encode(ca).decode(),
            }
            hook["timeoutSeconds"] = 5
        self._request("DELETE", self._vwc_path(), ok=(200, 404))
        self._request(
            "POST", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", body=vwc
        )

    def _vwc_path(self) -> str:
        return (
            f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{WEBHOOK_CONFIGURATION}"
        )

    def _probe_pod(self) -> None:
        """One pod through the scheduler and a node: scheduled, Running, deleted and gone."""
        ns = OPERATOR_NAMESPACE
        pod = {
            "metadata": {"name": "world-probe", "annotations": {"sim.podsweeper.dev/run-for": "1h"}},
            "spec": self._probe_spec(),
        }
        self._request(
            "DELETE", f"/api/v1/namespaces/{ns}/pods/world-probe?gracePeriodSeconds=0", ok=(200, 404)
        )
        self._wait("probe pod deleted", lambda: self._pod(ns, "world-probe") is None)
        self._request("POST", f"/api/v1/namespaces/{ns}/pods", body=pod)
        self._wait(
            "probe pod scheduled and Running",
            lambda: ((self._pod(ns, "world-probe") or {}).get("status") or {}).get("phase") == "Running",
        )
        self._request("DELETE", f"/api/v1/namespaces/{ns}/pods/world-probe")
        self._wait("probe pod removed by its node", lambda: self._pod(ns, "world-probe") is None)

    # -- helpers -----------------------------------------------------------------------

    def _pod(self, ns: str, name: str) -> dict | None:
        pod = self._request("GET", f"/api/v1/namespaces/{ns}/pods/{name}", ok=(200, 404))
        return pod if pod.get("kind") == "Pod" else None

    def _spawn(self, name: str, argv: list[str], env: dict | None = None) -> Process:
        assert self.workdir is not None
        self._say(f"starting {name}")
        proc = Process(name, self.log_path(name), error=WorldError, grace=5.0)
        self._procs.append(proc.launch(argv, env=env, cwd=self.workdir))
        return proc

    def _request(self, method: str, path: str, body=None, ok=(200, 201), content_type="application/json"):
        """A raw API call as admin: JSON in and out, no client models (CRDs are large)."""
        assert self._api is not None, "world is not running"
        return self._api.request(method, path, body, ok, content_type)

    def _wait(self, what: str, condition, timeout: float | None = None) -> None:
        wait_until(
            what,
            condition,
            timeout=timeout or self.ready_timeout,
            check=self.check_alive,
            tails=lambda: tails(self._procs),
            error=WorldError,
        )

    def _phase(self, name: str, fn) -> None:
        t0 = time.monotonic()
        fn()
        self.timings[name] = time.monotonic() - t0

    def _timings(self) -> str:
        return "(" + ", ".join(f"{k} {v:.1f}s" for k, v in self.timings.items() if k != "total") + ")"

    def _say(self, message: str) -> None:
        print(f"world: {message}", file=self.log, flush=True)
