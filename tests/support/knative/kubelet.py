"""The kubelet's part for the pods Knative's controllers generate: run their real binaries.

kwok plays the kubelet for pod objects (a pod is scheduled, becomes Running and Ready, with
no container behind it). For a few images the test world knows, that is not enough: the
receive adapter of an ApiServerSource, the PingSource dispatcher and podsweeper itself must
really run, with exactly the configuration the controllers wrote. `Kubelet` watches the pods
of the namespaces it is given; for each Running pod with a container whose image it has a
runner for, it starts that runner with the container's env resolved as a kubelet would
(`value`, `fieldRef`, `configMapKeyRef`), authenticated as the pod's ServiceAccount
(impersonation, see tests/support/adapter/ping.py), and with the Service network's proxy
(network.py). When the pod is deleted or replaced (a new ReplicaSet after the controller
changed the Deployment), the process is stopped, as the kubelet would kill the container.

What differs from a node, on purpose and only here: every pod shares this host's network, so
a process listens on a free port instead of its containerPort (the Service network maps it)
and pprof goes to a free PROFILING_PORT; the pod's Ready condition is kwok's, not a probe's.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


class Process(Protocol):
    def alive(self) -> bool: ...

    def stop(self) -> None: ...

    def tail(self, lines: int = 40) -> str: ...


@dataclass
class PodContainer:
    """One container of one pod, as the kubelet would start it."""

    namespace: str
    pod: str
    uid: str
    container: str
    image: str
    env: dict[str, str]  # resolved, in the pod spec's order
    kubeconfig: Path  # the pod's ServiceAccount
    workdir: Path
    network_env: dict[str, str]
    labels: dict[str, str] = field(default_factory=dict)  # the pod's, for Service selectors
    named_ports: dict[str, int] = field(default_factory=dict)  # port name -> containerPort
    ports: dict[int, int] = field(default_factory=dict)  # containerPort -> local port (the runner's)
    process: Any = None
    error: str | None = None
    started_at: float | None = None


Runner = Callable[[PodContainer], Process]


class KubeletError(RuntimeError):
    pass


def resolve_env(pod: dict, container: dict, config_map: Callable[[str, str], dict | None]) -> dict[str, str]:
    """A container's env as the kubelet computes it (the sources the generated pods use)."""
    fields = {
        "metadata.name": pod["metadata"]["name"],
        "metadata.namespace": pod["metadata"]["namespace"],
        "metadata.uid": pod["metadata"]["uid"],
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
        "spec.nodeName": pod["spec"].get("nodeName", ""),
        "status.podIP": pod.get("status", {}).get("podIP", ""),
    }
    env: dict[str, str] = {}
    for item in container.get("env") or []:
        name, source = item["name"], item.get("valueFrom")
        if source is None:
            env[name] = item.get("value", "")
        elif "fieldRef" in source:
            env[name] = fields[source["fieldRef"]["fieldPath"]]
        elif "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            data = (config_map(pod["metadata"]["namespace"], ref["name"]) or {}).get("data") or {}
            if ref["key"] in data:
                env[name] = data[ref["key"]]
            elif not ref.get("optional"):
                raise KubeletError(
                    f"{pod['metadata']['name']}: env {name}: no key {ref['key']} in {ref['name']}"
                )
        else:
            raise KubeletError(f"{pod['metadata']['name']}: env {name}: unsupported source {source}")
    return env


class Kubelet:
    """Runs the known images of the pods in `namespaces`; `containers` lists what it started."""

    def __init__(
        self,
        control_plane,
        runners: dict[str, Runner],
        namespaces: tuple[str, ...],
        *,
        network_env: dict[str, str],
        workdir: Path,
        log=sys.stderr,
        period: float = 0.2,
    ):
        from kubernetes import client

        self.cp = control_plane
        self.runners = runners
        self.namespaces = namespaces
        self.network_env = network_env
        self.workdir = workdir
        self.log = log
        self.period = period
        self._api = control_plane.api_client("admin")
        self._core = client.CoreV1Api(self._api)
        self._lock = threading.Lock()
        self.containers: dict[tuple[str, str], PodContainer] = {}  # (pod uid, container)
        self.history: list[PodContainer] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kubelet", daemon=True)
        # Processes start from these long-lived threads: a child started with
        # die_with_parent() (PR_SET_PDEATHSIG) is killed when the *thread* that forked it ends.
        self._starters = ThreadPoolExecutor(max_workers=4, thread_name_prefix="kubelet-start")

    def start(self) -> Kubelet:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        with self._lock:
            running = list(self.containers.values())
            self.containers.clear()
        with ThreadPoolExecutor(max_workers=max(1, len(running))) as killers:  # SIGTERM all at once
            list(killers.map(self._kill, running))
        self._starters.shutdown(wait=False, cancel_futures=True)
        self._api.close()

    # -- what runs ----------------------------------------------------------------------------

    def running(self, image: str | None = None) -> list[PodContainer]:
        """Started containers (of `image`) whose process is alive."""
        with self._lock:
            entries = list(self.containers.values())
        return [
            e
            for e in entries
            if e.process is not None and e.process.alive() and (image is None or e.image == image)
        ]

    def wait_running(self, image: str, count: int = 1, timeout: float = 120.0) -> list[PodContainer]:
        deadline = time.monotonic() + timeout
        while True:
            found = self.running(image)
            if len(found) >= count:
                return found
            failed = [e for e in self.history if e.image == image and e.error]
            if failed:
                raise KubeletError(f"{image} failed to start: {failed[-1].error}")
            if time.monotonic() > deadline:
                raise KubeletError(
                    f"{len(found)} of {count} {image} container(s) running after {timeout:.0f}s"
                )
            time.sleep(0.1)

    def endpoints(self, namespace: str, service: str, port: int) -> list[int]:
        """The local ports behind a Service port: its selector's pods that run here, the
        target port mapped to where their process listens (kube-proxy's part). A Knative
        Service's address (the Route's placeholder Service, no selector) goes where its
        KIngress routes: `ingress()`."""
        import json

        from kubernetes.client.rest import ApiException

        try:
            svc = json.loads(
                self._core.read_namespaced_service(service, namespace, _preload_content=False).data
            )
        except ApiException:
            return []
        spec, labels = svc["spec"], svc["metadata"].get("labels") or {}
        if not spec.get("selector") and "serving.knative.dev/route" in labels:
            return self.ingress(
                namespace, labels["serving.knative.dev/route"], f"{service}.{namespace}.svc.cluster.local"
            )
        selector = spec.get("selector") or {}
        (svc_port,) = [p for p in spec.get("ports") or [] if p["port"] == port] or [None]
        if svc_port is None or not selector:
            return []
        target = svc_port.get("targetPort", port)
        found = []
        for entry in self.running():
            if entry.namespace != namespace or not _matches(selector, entry):
                continue
            number = entry.named_ports.get(target, -1) if isinstance(target, str) else target
            local = entry.ports.get(number)
            if local:
                found.append(local)
        return found

    def ingress(self, namespace: str, route: str, host: str) -> list[int]:
        """The ingress and activator's part, which no process plays here: the Revisions the
        Route's KIngress sends `host` to (its splits with a share of the traffic), and of
        those the ready pods' user containers. queue-proxy is not run: the request goes to
        the user container's port directly (what is not proven here: docs/deploy.md)."""
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        try:
            kingress = client.CustomObjectsApi(self._api).get_namespaced_custom_object(
                "networking.internal.knative.dev", "v1alpha1", namespace, "ingresses", route
            )
        except ApiException:
            return []
        revisions: list[str] = []
        for rule in kingress["spec"].get("rules") or []:
            if host not in rule.get("hosts", []):
                continue
            for path in rule["http"]["paths"]:
                for split in path.get("splits") or []:
                    if split.get("percent", 100) > 0:
                        revisions.append(split["serviceName"])
        found = []
        for entry in self.running():
            if entry.namespace == namespace and entry.labels.get("serving.knative.dev/revision") in revisions:
                found.extend(entry.ports.values())
        return found

    # -- the loop -----------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            try:
                self._sync()
            except Exception as error:  # noqa: BLE001 - the API may be briefly gone; keep going
                print(f"kubelet: sync failed: {error}", file=self.log, flush=True)

    def _sync(self) -> None:
        import json

        seen: set[tuple[str, str]] = set()
        for namespace in self.namespaces:
            resp = self._core.list_namespaced_pod(namespace, _preload_content=False)
            for pod in json.loads(resp.data)["items"]:
                meta = pod["metadata"]
                if meta.get("deletionTimestamp") or pod.get("status", {}).get("phase") != "Running":
                    continue
                for container in pod["spec"]["containers"]:
                    runner = self.runners.get(container["image"])
                    if runner is None:
                        continue
                    key = (meta["uid"], container["name"])
                    seen.add(key)
                    with self._lock:
                        known = key in self.containers
                    if not known:
                        self._launch(pod, container, runner)
        with self._lock:
            gone = [self.containers.pop(k) for k in list(self.containers) if k not in seen]
        for entry in gone:
            print(
                f"kubelet: pod {entry.namespace}/{entry.pod} gone: stopping {entry.container}", file=self.log
            )
            threading.Thread(target=self._kill, args=(entry,), daemon=True).start()

    def _launch(self, pod: dict, container: dict, runner: Runner) -> None:
        meta = pod["metadata"]
        workdir = self.workdir / f"{meta['name']}-{container['name']}"
        workdir.mkdir(parents=True, exist_ok=True)
        account = pod["spec"].get("serviceAccountName") or "default"
        entry = PodContainer(
            namespace=meta["namespace"],
            pod=meta["name"],
            uid=meta["uid"],
            container=container["name"],
            image=container["image"],
            env=resolve_env(pod, container, self._config_map),
            kubeconfig=service_account_kubeconfig(
                self.cp, workdir / "kubeconfig", meta["namespace"], account
            ),
            workdir=workdir,
            network_env=dict(self.network_env),
            labels=dict(meta.get("labels") or {}),
            named_ports={
                p["name"]: p["containerPort"] for p in container.get("ports") or [] if p.get("name")
            },
        )
        with self._lock:
            self.containers[(entry.uid, entry.container)] = entry
            self.history.append(entry)
        print(
            f"kubelet: starting {entry.container} of pod {entry.namespace}/{entry.pod}",
            file=self.log,
            flush=True,
        )
        self._starters.submit(self._run, entry, runner)

    def _run(self, entry: PodContainer, runner: Runner) -> None:
        try:
            entry.process = runner(entry)
            entry.started_at = time.time()
        except Exception as error:  # noqa: BLE001 - recorded, the waiter raises it
            entry.error = f"{type(error).__name__}: {error}"
            print(f"kubelet: {entry.pod}/{entry.container} failed: {entry.error}", file=self.log, flush=True)

    def _kill(self, entry: PodContainer) -> None:
        if entry.process is not None:
            entry.process.stop()

    def _config_map(self, namespace: str, name: str) -> dict | None:
        import json

        from kubernetes.client.rest import ApiException

        try:
            resp = self._core.read_namespaced_config_map(name, namespace, _preload_content=False)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return json.loads(resp.data)


def service_account_kubeconfig(control_plane, path: Path, namespace: str, account: str) -> Path:
    """Credentials of a pod's ServiceAccount: the control plane's token user of that exact
    name and groups where it has one (any client can use it; the Python client cannot
    impersonate), else the admin token impersonating it (Go clients)."""
    from tests.support.adapter.ping import impersonating_kubeconfig
    from tests.support.controlplane.launcher import USERS

    username = f"system:serviceaccount:{namespace}:{account}"
    for user in USERS.values():
        if user.username == username:
            return control_plane.write_kubeconfig(path, user.key)
    return impersonating_kubeconfig(control_plane, path, namespace, account)


def _matches(selector: dict[str, str], entry: PodContainer) -> bool:
    return all(entry.labels.get(k) == v for k, v in selector.items())
