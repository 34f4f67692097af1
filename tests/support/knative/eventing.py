"""Knative Eventing's real control plane on the test world, and podsweeper installed as a user does.

`Eventing(world.control_plane).start()`:

1. builds `knative.dev/eventing/cmd/controller` at the receive adapter's version (a third
   `tool` of tests/support/adapter/gomod, so the three binaries share one module graph and
   one Go build cache);
2. installs what Eventing's release installs for its core, read from the eventing module's
   own `config/core/` in the Go module cache: every CRD of `resources/` (all its reconcilers
   start, so all their types must be served), the namespace, ServiceAccounts, ClusterRoles
   and bindings, the ConfigMaps, and the `pingsource-mt-adapter` Deployment (0 replicas: the
   PingSource reconciler fills it in and scales it up). Images keep their import paths with
   `ko://` dropped, as ko would name them;
3. runs the controller out of cluster (`--kubeconfig`, `--disable-ha`) as its ServiceAccount
   `knative-eventing/eventing-controller`, with the env of the module's
   `deployments/controller.yaml` (SYSTEM_NAMESPACE, APISERVER_RA_IMAGE, AUTH_PROXY_IMAGE, ...);
4. starts the Service network (network.py) and a kubelet for three images (kubelet.py): the
   receive adapter, mtping, and podsweeper's own image, each run as its real binary or serve
   command with the env and ServiceAccount of the pod the controllers generated.

`install(objects)` then applies a kustomize render of knative/ through the API, as
`kubectl apply -k` does. The eventing webhook is not run: its defaults (ApiServerSource
`eventMode`, ServiceAccount) are applied in memory by the reconcilers (knative.dev/pkg's
`PreProcessReconcile`), and its validation is checked without a server by
tests/support/deploy/knative_admission.py.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

from tests.support.adapter.ping import COMPONENT, PingDispatcher, eventing_dir, impersonating_kubeconfig
from tests.support.controlplane.build import RECEIVE_ADAPTER, GoBinary, ensure_built
from tests.support.controlplane.versions import ADAPTER_EVENTING_VERSION
from tests.support.harness.ports import free_port
from tests.support.harness.processes import Process
from tests.support.knative.kubelet import Kubelet, PodContainer
from tests.support.knative.network import ClusterNetwork
from tests.support.kubectl import RawApi

HERE = Path(__file__).parent
REPO_ROOT = HERE.parents[2]

EVENTING_CONTROLLER = GoBinary(
    "eventing-controller",
    ADAPTER_EVENTING_VERSION,
    "knative.dev/eventing/cmd/controller",
    RECEIVE_ADAPTER.module_dir,
)
SYSTEM_NAMESPACE = "knative-eventing"
CONTROLLER_ACCOUNT = "eventing-controller"
RECEIVE_ADAPTER_IMAGE = "knative.dev/eventing/cmd/apiserver_receive_adapter"
MTPING_IMAGE = "knative.dev/eventing/cmd/mtping"
AUTH_PROXY_IMAGE = "knative.dev/eventing/cmd/auth_proxy"  # required at start; only OIDC uses it
FIELD_MANAGER = "kubectl"


class EventingError(RuntimeError):
    """The controller exited or a source never got where it should; carries the log tail."""


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _unko(obj: dict) -> dict:
    """Images as `ko resolve` would leave them, without a registry: the import path."""
    text = json.dumps(obj).replace('"ko://', '"')
    return json.loads(text)


def core_crds() -> list[dict]:
    return [
        d
        for path in sorted((eventing_dir() / "config" / "core" / "resources").glob("*.yaml"))
        for d in _docs(path)
    ]


def core_objects(oidc: bool = True) -> list[dict]:
    """Eventing's core install minus its controller and webhook Deployments (run out of
    cluster or not at all) and the webhook configurations. `oidc`: config-features'
    authentication-oidc enabled, as docs/deploy.md (Sender identity) asks: the sources then
    send tokens, which the shipped function requires."""
    core = eventing_dir() / "config" / "core"
    paths = [
        core / "100-namespace.yaml",
        *sorted(core.glob("200-*.yaml")),
        *sorted((core / "roles").glob("*.yaml")),
        *sorted((core / "configmaps").glob("*.yaml")),
        core / "deployments" / "pingsource-mt-adapter.yaml",
    ]
    objects = []
    for path in paths:
        for obj in _docs(path):
            obj = _unko(obj)
            if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == "config-logging":
                # mtping logs each send at debug (tests/support/adapter/ping.py reads them); the
                # PingSource reconciler copies this ConfigMap into the dispatcher's env.
                obj["data"][f"loglevel.{COMPONENT}"] = "debug"
            if oidc and obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == "config-features":
                obj["data"]["authentication-oidc"] = "enabled"
            objects.append(obj)
    return objects


def function_image() -> str:
    (service,) = [
        d for d in _docs(REPO_ROOT / "knative" / "service" / "service.yaml") if d["kind"] == "Service"
    ]
    return service["spec"]["template"]["spec"]["containers"][0]["image"]


class Eventing:
    """The eventing controller, the Service network and the kubelet for its pods, on a
    control plane that runs the world (tests/support/world: its controller manager makes the
    generated Deployments' pods, kwok runs them)."""

    # The Service network and the kubelet of processes run the generated pods; a real node's
    # world runs them itself (tests/node/eventing.py).
    stand_ins = True

    def __init__(
        self,
        control_plane,
        *,
        log=sys.stderr,
        workdir: Path | None = None,
        ready_timeout: float = 90.0,
        oidc: bool = True,
    ):
        self.cp = control_plane
        self.oidc = oidc
        self.log = log
        self.ready_timeout = ready_timeout
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="podsweeper-eventing-"))
        self.log_path = self.workdir / "eventing-controller.log"
        # It drains its work queues for up to 10 s on SIGTERM; nothing here needs that.
        self.controller = Process("eventing controller", self.log_path, error=EventingError, grace=2.0)
        self.admin = self.cp.api_client("admin")
        self.api = RawApi(self.admin, FIELD_MANAGER)
        # The images the generated Deployments name (a real node's tagged ones: tests/node/eventing.py).
        self.adapter_image, self.mtping_image = RECEIVE_ADAPTER_IMAGE, MTPING_IMAGE
        self.network = ClusterNetwork(lambda ns, svc, port: self.kubelet.endpoints(ns, svc, port))
        self.kubelet = Kubelet(
            self.cp,
            {
                RECEIVE_ADAPTER_IMAGE: self._run_adapter,
                MTPING_IMAGE: self._run_mtping,
                function_image(): self._run_function,
            },
            ("podsweeper", SYSTEM_NAMESPACE),
            network_env=self.network.proxy_env(),
            workdir=self.workdir / "pods",
            log=log,
        )

    def __enter__(self) -> Eventing:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- start / stop ------------------------------------------------------------------------

    def start(self) -> Eventing:
        from tests.support.adapter.ping import MTPING
        from tests.support.controlplane.manifests import install_crds

        binaries = [ensure_built(b, log=self.log) for b in (EVENTING_CONTROLLER, RECEIVE_ADAPTER, MTPING)]
        started = time.monotonic()
        install_crds(self.admin, core_crds(), timeout=60)
        self.api.apply_all(self._core_objects())
        if self.stand_ins:
            self.network.start()
            self.kubelet.start()
        kubeconfig = impersonating_kubeconfig(
            self.cp, self.workdir / "kubeconfig-controller", SYSTEM_NAMESPACE, CONTROLLER_ACCOUNT
        )
        env = {
            **{k: v for k, v in os.environ.items() if k != "KUBECONFIG"},
            # deployments/controller.yaml's env, the fieldRefs resolved as the kubelet would.
            "SYSTEM_NAMESPACE": SYSTEM_NAMESPACE,
            "POD_NAME": "eventing-controller-0",
            "CONFIG_LOGGING_NAME": "config-logging",
            "CONFIG_OBSERVABILITY_NAME": "config-observability",
            "METRICS_DOMAIN": "knative.dev/eventing",
            "APISERVER_RA_IMAGE": self.adapter_image,
            "AUTH_PROXY_IMAGE": AUTH_PROXY_IMAGE,
            "PROFILING_PORT": str(free_port()),
        }
        self.controller.launch([str(binaries[0]), f"--kubeconfig={kubeconfig}", "--disable-ha"], env=env)
        try:
            self._wait(lambda: "Starting controllers..." in self.controller.text(), "start its controllers")
        except BaseException:
            self.stop()
            raise
        print(
            f"eventing: controller running after {time.monotonic() - started:.1f}s", file=self.log, flush=True
        )
        return self

    def stop(self) -> None:
        if self.stand_ins:
            self.kubelet.stop()
        self.controller.stop()
        if self.stand_ins:
            self.network.stop()
        self.admin.close()

    def _core_objects(self) -> list[dict]:
        objects = core_objects(self.oidc)
        if self.mtping_image != MTPING_IMAGE:
            old, new = f'"{MTPING_IMAGE}"', f'"{self.mtping_image}"'
            objects = [json.loads(json.dumps(o).replace(old, new)) for o in objects]
        return objects

    def check_alive(self) -> None:
        self.controller.check()

    def _wait(self, ready, what: str, timeout: float | None = None) -> None:
        self.controller.wait(what, ready, timeout or self.ready_timeout, interval=0.1)

    # -- what a user does ----------------------------------------------------------------------

    def install(self, objects: list[dict]) -> None:
        """`kubectl apply -k` of a render: every object through server-side apply."""
        self.api.apply_all(copy.deepcopy(objects))

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict | None:
        return self.api.get(
            {"apiVersion": api_version, "kind": kind, "metadata": {"namespace": namespace, "name": name}}
        )

    def source(self, kind: str, name: str, namespace: str = "podsweeper") -> dict | None:
        return self.get("sources.knative.dev/v1", kind, namespace, name)

    def wait_conditions(
        self,
        kind: str,
        name: str,
        wanted: dict[str, str],
        namespace: str = "podsweeper",
        timeout: float = 90.0,
    ) -> dict:
        """Wait until the source's conditions have the `wanted` statuses; returns the source.
        The error names every condition as it stands, with its reason and message."""
        deadline = time.monotonic() + timeout
        while True:
            obj = self.source(kind, name, namespace) or {}
            found = conditions(obj)
            if all(found.get(t, {}).get("status") == s for t, s in wanted.items()):
                return obj
            self.check_alive()
            if time.monotonic() > deadline:
                raise EventingError(
                    f"{kind} {namespace}/{name}: wanted {wanted}, found "
                    f"{json.dumps(found, indent=1)}\ncontroller log:\n{self.controller.tail(20)}"
                )
            time.sleep(0.2)

    # -- the images the kubelet runs -----------------------------------------------------------

    def _run_adapter(self, pod: PodContainer):
        from tests.support.adapter.launcher import ReceiveAdapter

        config = json.loads(pod.env["K_SOURCE_CONFIG"])
        return ReceiveAdapter(
            pod.kubeconfig,
            config,
            pod.env["K_SINK"],
            name=pod.env.get("NAME", pod.pod),
            log=self.log,
            workdir=pod.workdir,
            container_env={**pod.env, **pod.network_env},
        ).start()

    def _run_mtping(self, pod: PodContainer):
        return PingDispatcher(
            self.cp,
            log=self.log,
            workdir=pod.workdir,
            container_env={**pod.env, **pod.network_env},
            kubeconfig=pod.kubeconfig,
        ).start()

    def _run_function(self, pod: PodContainer):
        from tests.support.harness.served import Served

        served = Served(
            {**pod.env, "KUBECONFIG": str(pod.kubeconfig)},
            pod.workdir / "function.log",
            name=pod.pod,
            as_shipped=True,
        ).start()
        for number in pod.named_ports.values() or (8080,):
            pod.ports[number] = served.port  # every declared port is the one it serves on
        return served


def conditions(obj: dict) -> dict[str, dict]:
    """status.conditions by type."""
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
