"""The whole podsweeper path on one machine: control plane, function, Knative's receive adapter.

Two worlds around it (`world=`, which every caller names: no default, so a test says which
world its claims hold in):

- "real": tests/support/world on the same control plane: kube-controller-manager (garbage collector),
  kube-scheduler, kwok GPU nodes (the simulated kubelet) and the Kubeflow training operator
  v1.9.4 with its admission webhooks. Jobs are created as a user creates them; the operator
  makes the pods and Services and writes the job's status. A World instance may be passed
  instead, to share one world between several stacks (e.g. a second function instance with
  other settings); the stack then leaves it running.
- "players": no controller at all; the test plays the operator and the kubelet
  (tests/support/stack/players.py), and a minimal "kubelet" below finishes graceful deletions. Only for
  states no real controller produces (the test's docstring says which and why).

    kube-apiserver --watch--> apiserver_receive_adapter --CloudEvents/HTTP--> functions-framework
          ^                                                                        |
          +---------------- GET job, LIST pods, DELETE pod, create Event ----------+

- the control plane is tests/support/controlplane (etcd + kube-apiserver, Kubeflow CRDs, the
  function's RBAC from knative/function/rbac.yaml);
- the function is served by tests/support/harness/served.py (the README's and Dockerfile's command)
  on a free port, as the ServiceAccount user podsweeper/podsweeper, configured through
  PODSWEEPER_* variables;
- the adapter runs the shipped ApiServerSource (as knative/ renders it) restricted to the namespace,
  as podsweeper/podsweeper-source with knative/source/rbac.yaml (tests/support/adapter/launcher.py);
- players world only: a "kubelet" finishes graceful pod deletions: without a kubelet a deleted
  pod that is bound to a node stays Terminating forever, while a real kubelet stops its
  containers and then removes it (delete with grace period 0). In the real world kwok does it;
- optionally (`ping_schedule=`, or `start_ping()` on a running stack) the backstop sweep's
  ticks come from Knative's real PingSource dispatcher, mtping, running the shipped
  knative/source/pingsource.yaml with a fast schedule (tests/support/adapter/ping.py); the only ping
  the stack POSTs itself is the warm-up before the adapter starts. Off by default: periodic sweeps would race the tests that check
  what the ApiServerSource events alone do, and the latency they measure. The PingSource
  lives in namespace podsweeper, as shipped: one stack with ticks per control plane at a time.

The function acts in `namespaces` (PODSWEEPER_NAMESPACES); the adapter watches those plus
`watch_namespaces` (so events from a namespace outside the function's scope really arrive).

`python -m tests.support.stack --kubeconfig PATH --namespace NS [--world real|players]` runs it by
hand (see __main__.py); the e2e tests use `Stack` with their own control plane and namespaces.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

from tests.support.harness.served import Served, ServedError

_EVENTS_SAMPLE = re.compile(r'^podsweeper_events_total\{[^}]*outcome="([a-z_]+)"[^}]*\} (\S+)$', re.M)


class StackError(RuntimeError):
    """A part of the stack exited or never became ready; the message carries its log tail."""


class FunctionServer(Served):
    """The function as tests/support/harness/served.py serves it, for some namespaces, as the
    ServiceAccount user podsweeper/podsweeper; ready once GET /healthz answers 200."""

    def __init__(
        self,
        kubeconfig: str | Path,
        namespaces: list[str],
        *,
        env: dict | None = None,
        workdir: Path,
        log=sys.stderr,
        ready_timeout: float = 30.0,
    ):
        super().__init__(
            {"KUBECONFIG": str(kubeconfig), "PODSWEEPER_NAMESPACES": ",".join(namespaces), **(env or {})},
            workdir / "function.log",
        )
        self.namespaces = namespaces
        self.progress = log
        self.ready_timeout = ready_timeout
        self.started_in: float | None = None

    def start(self, timeout: float | None = None) -> FunctionServer:
        started = time.monotonic()
        try:
            super().start(timeout or self.ready_timeout)
        except ServedError as error:
            raise StackError(str(error)) from None
        self.started_in = time.monotonic() - started
        print(
            f"function: serving on {self.url} for namespace(s) {','.join(self.namespaces)} "
            f"after {self.started_in:.1f}s",
            file=self.progress,
            flush=True,
        )
        return self

    def warm_up(self) -> None:
        """One backstop sweep, so the first real event does not pay for the function's lazy
        start (importing the kubernetes client, the first TLS connection): a deployed
        function gets the same from its PingSource, or from earlier events.

        POSTed by hand, not left to mtping: it must be done at this exact moment, before the
        receive adapter starts (and most stacks run no mtping at all)."""
        response = self.post(
            {
                "specversion": "1.0",
                "id": f"warm-up-{time.time_ns()}",
                "source": "tests.support.stack",
                "type": "dev.knative.sources.ping",
                "data": {},
            }
        )
        if response.status_code != 200:
            raise StackError(f"warm-up sweep answered {response.status_code}: {response.text}\n{self.tail()}")

    def events_handled(self) -> float:
        """podsweeper_events_total summed over its labels, from /metrics."""
        return sum(self.events_by_outcome().values())

    def events_by_outcome(self) -> dict[str, float]:
        """podsweeper_events_total by its `outcome` label (processed, ignored, bad_request,
        api_unavailable, error), from /metrics of the running instance."""
        text = requests.get(f"{self.url}/metrics", timeout=5).text
        found: dict[str, float] = {}
        for match in _EVENTS_SAMPLE.finditer(text):
            found[match[1]] = found.get(match[1], 0.0) + float(match[2])
        return found


class Kubelet:
    """Finishes graceful deletions in one namespace the way a kubelet does once the
    containers have stopped: DELETE with gracePeriodSeconds=0 and the pod's uid as
    precondition (so a pod re-created under the same name is never touched).
    """

    def __init__(self, admin_api, namespace: str, *, delay: float = 0.0):
        from kubernetes import client

        self.core = client.CoreV1Api(admin_api)
        self.namespace = namespace
        self.delay = delay
        self.finished: dict[str, float] = {}  # pod uid -> time.monotonic() of the final delete
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._response = None
        self._version = ""

    def start(self) -> Kubelet:
        body = json.loads(self.core.list_namespaced_pod(self.namespace, _preload_content=False).data)
        self._version = body["metadata"]["resourceVersion"]
        for pod in body.get("items") or []:
            self._maybe_finish(pod)
        self._thread = threading.Thread(target=self._run, name=f"kubelet-{self.namespace}", daemon=True)
        self._thread.start()
        return self

    def _maybe_finish(self, pod: dict) -> None:
        meta = pod.get("metadata") or {}
        if not meta.get("deletionTimestamp") or meta["uid"] in self.finished:
            return
        from kubernetes.client.rest import ApiException

        if self.delay:
            time.sleep(self.delay)
        try:
            self.core.delete_namespaced_pod(
                meta["name"],
                self.namespace,
                grace_period_seconds=0,
                body={"preconditions": {"uid": meta["uid"]}, "gracePeriodSeconds": 0},
                _preload_content=False,
            )
        except ApiException as error:
            if error.status not in (404, 409):
                raise
        self.finished[meta["uid"]] = time.monotonic()

    def _run(self) -> None:
        from kubernetes.watch.watch import iter_resp_lines

        while not self._stop.is_set():
            try:
                self._response = self.core.list_namespaced_pod(
                    self.namespace,
                    watch=True,
                    resource_version=self._version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=60,
                    _preload_content=False,
                    _request_timeout=(5, 90),
                )
                for line in iter_resp_lines(self._response):
                    change = json.loads(line)
                    obj = change.get("object") or {}
                    if change.get("type") == "ERROR":
                        body = json.loads(
                            self.core.list_namespaced_pod(self.namespace, _preload_content=False).data
                        )
                        self._version = body["metadata"]["resourceVersion"]
                        for pod in body.get("items") or []:
                            self._maybe_finish(pod)
                        break
                    self._version = (obj.get("metadata") or {}).get("resourceVersion") or self._version
                    if change.get("type") in ("ADDED", "MODIFIED"):
                        self._maybe_finish(obj)
            except Exception as error:  # noqa: BLE001 - keep playing the kubelet
                if self._stop.is_set():
                    return
                print(
                    f"kubelet: watch broke ({type(error).__name__}: {error}); resuming",
                    file=sys.stderr,
                    flush=True,
                )
                self._stop.wait(0.2)

    def stop(self) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            try:
                getattr(response, "shutdown", response.close)()
            except Exception:  # noqa: BLE001
                pass
        if self._thread is not None:
            self._thread.join(timeout=2.0)


WORLDS = ("real", "players")


class Stack:
    """Function + receive adapter (+ world) for some namespaces, on a running control plane.

    `Stack.on(control_plane, namespace)` starts everything and returns once the adapter is
    watching; `stop()` (or leaving the `with` block) tears it down in reverse order.
    `namespace` is one name or a list: the namespaces the function acts in (all created);
    `watch_namespaces` adds namespaces only the adapter watches (created too).
    `ping_schedule` (e.g. tests.support.adapter.ping.FAST_SCHEDULE) also runs mtping with the
    shipped PingSource at that schedule, delivering ticks to the function (see start_ping()).
    """

    def __init__(
        self,
        control_plane,
        namespace: str | list[str],
        *,
        world,
        watch_namespaces: list[str] | None = None,
        mode: str = "Resource",
        function_env: dict | None = None,
        log=sys.stderr,
        kubelet_delay: float = 0.0,
        ping_schedule: str | None = None,
        source_manifest: Path | None = None,
        function_kubeconfig: Path | None = None,
        instances: int = 1,
    ):
        self.cp = control_plane
        self.namespaces = [namespace] if isinstance(namespace, str) else list(namespace)
        self.namespace = self.namespaces[0]
        self.watched = self.namespaces + [n for n in watch_namespaces or () if n not in self.namespaces]
        if isinstance(world, str) and world not in WORLDS:
            raise ValueError(f"world must be one of {WORLDS} or a running World, not {world!r}")
        self.world_kind = world if isinstance(world, str) else "real"
        self.world = None if isinstance(world, str) else world
        self._own_world = isinstance(world, str) and world == "real"
        self.mode = mode
        self.function_env = dict(function_env or {})
        self.log = log
        self.kubelet_delay = kubelet_delay
        self.workdir = Path(tempfile.mkdtemp(prefix="podsweeper-stack-"))
        self.admin_api = None
        self.function: FunctionServer | None = None
        self.adapter = None
        self.kubelets: list[Kubelet] = []
        self.ping_schedule = ping_schedule
        # The ApiServerSource the adapter runs (default: the shipped one; e.g. an overlay's).
        self.source_manifest = source_manifest
        # The function's kubeconfig (default: the control plane's, as its ServiceAccount user);
        # e.g. one through tests/support/faultproxy.py.
        self.function_kubeconfig = function_kubeconfig
        # More than one: that many function instances behind one round-robin front
        # (tests/support/spread.py), as a Service spreads a Deployment's pods.
        self.instances = instances
        self.functions: list[FunctionServer] = []
        self.spread = None
        self.made_namespaces: list[str] = []  # the namespaces start() created (not those it found)
        self.ping = None  # tests.support.adapter.ping.PingDispatcher, while ticks are on
        self.pingsource: dict | None = None  # the PingSource as the API server has it

    @property
    def kubelet(self) -> Kubelet | None:
        """The players world's kubelet of the first namespace (None in the real world)."""
        return self.kubelets[0] if self.kubelets else None

    @classmethod
    def on(cls, control_plane, namespace: str, **kwargs) -> Stack:
        return cls(control_plane, namespace, **kwargs).start()

    def __enter__(self) -> Stack:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> Stack:
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        from tests.support.adapter.launcher import install_source_rbac

        try:
            self.admin_api = self.cp.api_client("admin")
            for namespace in self.watched:
                try:
                    client.CoreV1Api(self.admin_api).create_namespace({"metadata": {"name": namespace}})
                    self.made_namespaces.append(namespace)
                except ApiException as error:
                    if error.status != 409:
                        raise
            install_source_rbac(self.admin_api)
            if self._own_world:
                from tests.support.world.launcher import World

                self.world = World(self.cp, log=self.log).start()
            elif self.world_kind == "players":
                for namespace in self.watched:
                    self.kubelets.append(Kubelet(self.admin_api, namespace, delay=self.kubelet_delay).start())
            for index in range(self.instances):
                function = FunctionServer(
                    self.function_kubeconfig or self.cp.function_kubeconfig,
                    self.namespaces,
                    env=self.function_env,
                    workdir=self.workdir / f"instance-{index}" if index else self.workdir,
                    log=self.log,
                )
                self.functions.append(function)
                function.start().warm_up()
            self.function = self.functions[0]
            if self.instances > 1:
                from tests.support.spread import Spread

                self.spread = Spread([f.url for f in self.functions]).start()
            self.start_adapter(self.mode)
            if self.ping_schedule is not None:
                self.start_ping(self.ping_schedule)
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def sink(self) -> str:
        """Where the adapter and mtping send: the function, or the front over its instances."""
        if self.spread is not None:
            return self.spread.url
        assert self.function is not None
        return self.function.url

    def start_adapter(self, mode: str | None = None):
        """(Re)start the receive adapter, e.g. in another mode; returns once it is watching."""
        from tests.support.adapter.launcher import ReceiveAdapter, source_config

        self.stop_adapter()
        self.mode = mode or self.mode
        source_kubeconfig = self.cp.write_kubeconfig(self.workdir / "kubeconfig-source", "source")
        self.adapter = ReceiveAdapter(
            source_kubeconfig,
            source_config(self.watched, self.mode, self.source_manifest),
            self.sink,
            workdir=self.workdir,
            log=self.log,
        ).start()
        return self.adapter

    def stop_adapter(self) -> None:
        if self.adapter is not None:
            self.adapter.stop()

    def start_ping(self, schedule: str | None = None):
        """Start Knative's PingSource dispatcher (mtping) and (re)create the shipped
        PingSource at `schedule` (default: every 2 seconds), marked Ready with the function
        as its sink; returns the dispatcher once it has scheduled that PingSource. From then
        on the function gets real ticks: `wait_sweep()` waits for one."""
        from tests.support.adapter.ping import FAST_SCHEDULE, PingDispatcher, install_pingsource

        self.stop_ping()
        self.ping_schedule = schedule or self.ping_schedule or FAST_SCHEDULE
        self.ping = PingDispatcher(self.cp, workdir=self.workdir, log=self.log).start()
        self.pingsource = install_pingsource(self.admin_api, self.sink, self.ping_schedule)
        self.ping.wait_scheduled(self.pingsource)
        print(
            f"mtping: PingSource {self.pingsource['metadata']['namespace']}/"
            f"{self.pingsource['metadata']['name']} at {self.ping_schedule!r} -> {self.sink}",
            file=self.log,
            flush=True,
        )
        return self.ping

    def stop_ping(self) -> None:
        """Stop mtping and delete the PingSource (idempotent)."""
        from tests.support.adapter.ping import remove_pingsource

        if self.ping is not None:
            self.ping.stop()
        if self.pingsource is not None and self.admin_api is not None:
            try:
                remove_pingsource(self.admin_api, self.pingsource)
            except Exception as error:  # noqa: BLE001 - stopping: report, keep tearing down
                print(f"mtping: PingSource not removed: {error}", file=self.log, flush=True)
            self.pingsource = None

    def wait_sweep(self, after: float | None = None, timeout: float = 30.0) -> dict:
        """Wait until mtping has delivered a tick it began sending after `after` (time.time(),
        default now) and the function acknowledged it, i.e. a whole sweep that started after
        that moment is done. Returns the send: {"id", "source", "target", "ts"}."""
        if self.ping is None:
            raise StackError("no PingSource ticks: start the stack with ping_schedule= or call start_ping()")
        return self.ping.wait_delivered(after, timeout)

    def check_alive(self) -> None:
        self.cp.check_alive()
        if self.world is not None:
            self.world.check_alive()
        for function in self.functions:
            if not function.alive():
                raise StackError(f"the function exited:\n{function.tail()}")
        for what, part in (("the receive adapter", self.adapter), ("mtping", self.ping)):
            # None: never started; 0 or -SIGTERM: stopped on purpose (stop_adapter, stop_ping)
            if part is not None and part.returncode not in (None, 0, -signal.SIGTERM):
                raise StackError(f"{what} exited:\n{part.tail()}")

    def stop(self) -> None:
        self.stop_ping()  # first: no tick may go to a function that is stopping
        self.stop_adapter()
        if self.spread is not None:
            self.spread.stop()
        for function in self.functions:
            function.stop()
        for kubelet in self.kubelets:
            kubelet.stop()
        self.kubelets.clear()
        self._keep_outputs()
        if self.world is not None and self._own_world:
            self.world.stop()
            self.world = None
        if self.admin_api is not None:
            self.admin_api.close()
            self.admin_api = None

    def _keep_outputs(self) -> None:
        """The Events and evidence stores of this stack's namespaces, kept for the end-of-run
        secrets check (tests/support/leaks.py) once its functions have stopped writing. A
        control plane already gone (a test that killed it) leaves nothing to keep."""
        from kubernetes import client

        from tests.support import leaks

        if self.admin_api is None or not self.functions:
            return
        # What the function was served with, over the defaults of podsweeper.config.
        env = {
            "PODSWEEPER_EVIDENCE_LOG_LINES": "20",
            "PODSWEEPER_EVIDENCE_LOGS_EXCLUDE_NAMESPACES": "",
            **self.functions[0].environment(),
        }
        try:
            records = namespace_outputs(client.CoreV1Api(self.admin_api), self.namespaces, env)
        except Exception as error:  # noqa: BLE001 - a stopped or killed control plane: nothing to keep
            print(f"stack: outputs not kept for the secrets check: {error}", file=self.log, flush=True)
            return
        leaks.keep(records)

    def cleanup(self) -> None:
        """Remove the logs (kept by default: a failing test points at them)."""
        from tests.support.harness.served import retire_log

        for function in self.functions:
            retire_log(function.log_path)
        shutil.rmtree(self.workdir, ignore_errors=True)


def namespace_outputs(core, namespaces: list[str], env: dict[str, str]) -> list[dict]:
    """The Events and evidence stores of `namespaces`, as tests/support/leaks.py keeps them for
    the end-of-run secrets check; `env`: the function's settings (the evidence log settings)."""
    from tests.support import leaks

    excluded = {n.strip() for n in env["PODSWEEPER_EVIDENCE_LOGS_EXCLUDE_NAMESPACES"].split(",")}
    records: list[dict] = []
    for namespace in namespaces:
        annotations = core.read_namespace(namespace).metadata.annotations or {}
        logs_allowed = (
            env["PODSWEEPER_EVIDENCE_LOG_LINES"] != "0"
            and namespace not in excluded
            and annotations.get("podsweeper.dev/evidence-logs") != "off"
        )
        for event in core.list_namespaced_event(namespace).items:
            records.append(
                {
                    "kind": leaks.Output.EVENT,
                    "where": f"{namespace}/{event.reason}",
                    "text": f"{event.reason} {event.message or ''}",
                    "logs_allowed": False,
                }
            )
        for store in core.list_namespaced_config_map(namespace).items:
            # The job's store, and the copy kept apart from a job podsweeper deleted.
            if store.metadata.name.startswith(("podsweeper-evidence-", "podsweeper-retained-")):
                records.append(
                    {
                        "kind": leaks.Output.EVIDENCE,
                        "where": f"{namespace}/{store.metadata.name}",
                        "text": json.dumps(store.data or {}),
                        "logs_allowed": logs_allowed,
                    }
                )
    return records
