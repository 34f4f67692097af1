"""Run Knative's real PingSource dispatcher (mtping) against the test control plane.

What a cluster runs for every PingSource is one multi-tenant dispatcher,
knative.dev/eventing/cmd/mtping (the `pingsource-mt-adapter` Deployment in knative-eventing),
built here from gomod/ at the receive adapter's eventing version into the podsweeper cache.
It watches PingSources (sources.knative.dev/v1, all namespaces), and for each one that is
Ready it adds a cron entry that POSTs the source's CloudEvent to `status.sinkUri`.

`PingDispatcher.start()` sets up what it needs outside a cluster, all from the eventing
module's own config/ (read from the Go module cache, never copied):

- the PingSource CRD (config/core/resources/pingsource.yaml), installed as admin;
- the namespace knative-eventing, which is both SYSTEM_NAMESPACE (leader election Leases)
  and NAMESPACE (its ConfigMaps); there the shipped config-logging and config-observability
  ConfigMaps (without config-observability it panics: it parses a nil ConfigMap; without
  either its ConfigMap watcher refuses to start). config-logging gets one addition, the
  dispatcher's level at debug, so that it logs each event's id, source and target;
- its ServiceAccount, ClusterRole and binding (config/core/200-pingsource-mt-adapter-
  serviceaccount.yaml, config/core/roles/pingsource-mt-adapter-clusterrole.yaml). The test
  control plane knows only a fixed set of token users (tests/support/controlplane), so mtping runs
  with the admin token *impersonating* system:serviceaccount:knative-eventing:pingsource-mt-adapter
  (kubeconfig `as`/`as-groups`): every request it makes is authorized as that ServiceAccount
  by the shipped ClusterRole, as in a cluster.

It runs with leader election on (as shipped: one Lease per bucket in knative-eventing,
released when it stops), K_NO_SHUTDOWN_AFTER=59 (as shipped, a SIGTERM after second 55 of a
minute holds the process until the next minute, so no tick is lost during a rollout; here a
stop should be a stop), health probes on the fixed :8080 (a bind failure is ignored: the
receive adapter has it already) and pprof on a free PROFILING_PORT. Metrics export is off
(config-observability's default protocol "none").

`install_pingsource()` creates the PingSource we ship, knative/source/pingsource.yaml, read
from the file with only its schedule replaced (tests want a tick every few seconds, not every
5 minutes), in its own namespace (podsweeper, created if needed).

Limitation: the eventing *controller* is not run. In a cluster it resolves spec.sink (a
Knative Service `podsweeper`) to an address, and marks the PingSource Ready (SinkProvided,
Deployed: the mtping Deployment is available, OIDCIdentityCreated). Here there is no Knative
Service, so `install_pingsource()` writes that status itself through the status subresource:
sinkUri = the served function's URL, every condition True. mtping only schedules a source
whose status is Ready, and sends to status.sinkUri, never to spec.sink; so what is not
exercised is the sink resolution and the Ready computation, not the dispatch.

Schedule: mtping's cron parser (robfig/cron, SecondOptional|Minute|...|Descriptor) accepts a
6-field schedule with seconds, e.g. "*/2 * * * * *"; the eventing webhook accepts the same
(it rejects only "@every"), so a test schedule is one a cluster would admit too. Each tick
is sent after a random 0-500 ms delay (mtping spreads its sends), with up to 5 retries
(exponential backoff from 50 ms) on failure.
"""

from __future__ import annotations

import copy
import json
import os
import re
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml

from tests.support.controlplane.build import GoBinary, ensure_built
from tests.support.controlplane.versions import ADAPTER_EVENTING_VERSION
from tests.support.harness.ports import free_port
from tests.support.harness.processes import Process

HERE = Path(__file__).parent
REPO_ROOT = HERE.parents[2]
SHIPPED_PINGSOURCE = REPO_ROOT / "knative" / "source" / "pingsource.yaml"

EVENTING_MODULE = "knative.dev/eventing"
MTPING = GoBinary("mtping", ADAPTER_EVENTING_VERSION, f"{EVENTING_MODULE}/cmd/mtping", HERE / "gomod")

SYSTEM_NAMESPACE = "knative-eventing"
SERVICE_ACCOUNT = "pingsource-mt-adapter"
COMPONENT = "pingsource-mt-adapter"  # the logger's name, and its level key in config-logging
# A test schedule: every 2 seconds (6 fields, the first is seconds).
FAST_SCHEDULE = "*/2 * * * * *"

PING_TYPE = "dev.knative.sources.ping"


class PingError(RuntimeError):
    """mtping exited or never scheduled the PingSource; the message carries its log tail."""


# -- the eventing module's own manifests -------------------------------------------------------


def eventing_dir() -> Path:
    """The eventing module (at the adapter's version) in the Go module cache."""
    from tests.support.controlplane.manifests import go_module_dir

    return go_module_dir(EVENTING_MODULE, ADAPTER_EVENTING_VERSION)


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def pingsource_crd() -> dict:
    (crd,) = _docs(eventing_dir() / "config" / "core" / "resources" / "pingsource.yaml")
    return crd


def system_objects() -> list[dict]:
    """knative-eventing's ConfigMaps and the dispatcher's RBAC, as the module ships them."""
    config = eventing_dir() / "config" / "core"
    objects = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}},
        *_docs(config / "200-pingsource-mt-adapter-serviceaccount.yaml"),
        *_docs(config / "roles" / "pingsource-mt-adapter-clusterrole.yaml"),
    ]
    for name in ("logging.yaml", "observability.yaml"):
        (cm,) = _docs(config / "configmaps" / name)
        if cm["metadata"]["name"] == "config-logging":
            cm = copy.deepcopy(cm)
            cm["data"][f"loglevel.{COMPONENT}"] = "debug"  # "sending cloudevent id: ..., source: ..."
        objects.append(cm)
    return objects


def install_system(admin_api) -> None:
    """The PingSource CRD, knative-eventing's ConfigMaps and the dispatcher's RBAC, applied
    server-side (a ConfigMap a previous run left with another level is overwritten)."""
    from tests.support.controlplane.manifests import install_crds
    from tests.support.kubectl import RawApi

    install_crds(admin_api, [pingsource_crd()])
    RawApi(admin_api).apply_all(system_objects())


# -- the shipped PingSource ----------------------------------------------------------------------


def shipped_pingsource(schedule: str | None = None, manifest: Path = SHIPPED_PINGSOURCE) -> dict:
    """knative/source/pingsource.yaml's PingSource, with only spec.schedule replaced."""
    sources = [d for d in _docs(manifest) if d.get("kind") == "PingSource"]
    if len(sources) != 1:
        raise ValueError(f"{manifest} holds {len(sources)} PingSources, expected one")
    source = copy.deepcopy(sources[0])
    if schedule is not None:
        source["spec"]["schedule"] = schedule
    return source


def ce_source(source: dict) -> str:
    """The CloudEvent source mtping sets: sourcesv1.PingSourceSource(namespace, name)."""
    meta = source["metadata"]
    return f"/apis/v1/namespaces/{meta['namespace']}/pingsources/{meta['name']}"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def ready_status(sink: str, generation: int) -> dict:
    """What the eventing controller would write once the sink resolved (see the module doc)."""
    now = _now()
    return {
        "observedGeneration": generation,
        "sinkUri": sink,
        "conditions": [
            {"type": kind, "status": "True", "lastTransitionTime": now}
            for kind in ("Deployed", "OIDCIdentityCreated", "Ready", "SinkProvided")
        ],
    }


def install_pingsource(admin_api, sink: str, schedule: str | None = FAST_SCHEDULE) -> dict:
    """(Re)create the shipped PingSource and mark it Ready with `sink` as its sinkUri.

    An existing one (a previous stack's, with another sink) is deleted first, so mtping sees
    a new source. Returns the object as the API server has it after the status write.
    """
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    source = shipped_pingsource(schedule)
    ns, name = source["metadata"]["namespace"], source["metadata"]["name"]
    try:
        client.CoreV1Api(admin_api).create_namespace({"metadata": {"name": ns}})
    except ApiException as error:
        if error.status != 409:
            raise
    custom = client.CustomObjectsApi(admin_api)
    remove_pingsource(admin_api, source)
    created = custom.create_namespaced_custom_object("sources.knative.dev", "v1", ns, "pingsources", source)
    created["status"] = ready_status(sink, created["metadata"].get("generation", 1))
    return custom.replace_namespaced_custom_object_status(
        "sources.knative.dev", "v1", ns, "pingsources", name, created
    )


def remove_pingsource(admin_api, source: dict | None = None, timeout: float = 10.0) -> None:
    """Delete the shipped PingSource (if there) and wait until it is gone."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    source = source or shipped_pingsource()
    ns, name = source["metadata"]["namespace"], source["metadata"]["name"]
    custom = client.CustomObjectsApi(admin_api)
    try:
        custom.delete_namespaced_custom_object("sources.knative.dev", "v1", ns, "pingsources", name)
    except ApiException as error:
        if error.status == 404:
            return
        raise
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            custom.get_namespaced_custom_object("sources.knative.dev", "v1", ns, "pingsources", name)
        except ApiException as error:
            if error.status == 404:
                return
            raise
        time.sleep(0.1)
    raise PingError(f"PingSource {ns}/{name} still there {timeout:.0f}s after its delete")


# -- the process ---------------------------------------------------------------------------------


def impersonating_kubeconfig(
    control_plane, path: Path, namespace: str = SYSTEM_NAMESPACE, service_account: str = SERVICE_ACCOUNT
) -> Path:
    """The admin kubeconfig, impersonating a ServiceAccount (by default mtping's; see the
    module doc): every request is authorized as that ServiceAccount, as in a pod."""
    config = control_plane.kubeconfig_dict("admin")
    for entry in config["users"]:
        entry["user"]["as"] = f"system:serviceaccount:{namespace}:{service_account}"
        entry["user"]["as-groups"] = [
            "system:serviceaccounts",
            f"system:serviceaccounts:{namespace}",
            "system:authenticated",
        ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def _epoch(ts: str) -> float:
    """A zap iso8601 time ("2026-12-01T00:07:58.124Z") as time.time() seconds."""
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


_SENDING = re.compile(r"sending cloudevent id: (\S+), source: (\S+), target: (\S+)")


class PingDispatcher(Process):
    """One mtping process: `start()` returns once it is running (it has logged starting its
    controller); `wait_scheduled()` once it has scheduled a given PingSource; `stop()` ends it.

    Use as a context manager.
    """

    def __init__(
        self,
        control_plane,
        *,
        log=sys.stderr,
        workdir: Path | None = None,
        ready_timeout: float = 60.0,
        sink_timeout: int = 10,
        container_env: dict[str, str] | None = None,
        kubeconfig: Path | None = None,
    ):
        self.cp = control_plane
        # The env of the pingsource-mt-adapter container as the PingSource reconciler filled it
        # in (tests/support/knative), with the kubeconfig of its ServiceAccount: used as they are
        # instead of the ones start() sets up.
        self.container_env = container_env
        self.kubeconfig = kubeconfig
        self.log = log
        self.ready_timeout = ready_timeout
        self.sink_timeout = sink_timeout
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="podsweeper-mtping-"))
        # SIGTERM: it stops its cron, waits for a send in flight, releases its Leases.
        super().__init__("mtping", self.workdir / f"mtping-{int(time.time() * 1000)}.log", error=PingError)
        self.started_in: float | None = None

    def __enter__(self) -> PingDispatcher:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> PingDispatcher:
        binary = ensure_built(MTPING, log=self.log)
        if self.container_env is not None and self.kubeconfig is not None:
            kubeconfig = self.kubeconfig
            env = {**os.environ, **self.container_env, "PROFILING_PORT": str(free_port())}
        else:
            admin_api = self.cp.api_client("admin")
            try:
                install_system(admin_api)
            finally:
                admin_api.close()
            kubeconfig = impersonating_kubeconfig(self.cp, self.workdir / "kubeconfig-mtping")
            env = {
                **os.environ,
                "SYSTEM_NAMESPACE": SYSTEM_NAMESPACE,
                "NAMESPACE": SYSTEM_NAMESPACE,
                "POD_NAME": "mtping-test",
                "K_NO_SHUTDOWN_AFTER": "59",
                "K_SINK_TIMEOUT": str(self.sink_timeout),
                "PROFILING_PORT": str(free_port()),
            }
        started = time.monotonic()
        env.pop("KUBECONFIG", None)  # only --kubeconfig: never the caller's credentials
        self.launch([str(binary), f"--kubeconfig={kubeconfig}"], env=env)
        try:
            self._wait_for(lambda: '"Starting controller"' in self.text(), "start its controller")
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - started
        print(
            f"mtping: running after {self.started_in:.1f}s (log {self.log_path})", file=self.log, flush=True
        )
        return self

    def _wait_for(self, ready, what: str, timeout: float | None = None) -> None:
        self.wait(what, ready, timeout or self.ready_timeout, interval=0.05)

    def scheduled(self, source: dict) -> bool:
        """Has it scheduled this PingSource object (same uid) with its status.sinkUri? Its
        runner logs "Creating client" with the source and the sink when it adds the entry."""
        uid, sink = source["metadata"]["uid"], source.get("status", {}).get("sinkUri")
        return any(
            entry.get("msg") == "Creating client"
            and (entry.get("source") or {}).get("metadata", {}).get("uid") == uid
            and (entry.get("env") or {}).get("Sink") == sink
            for entry in self.entries()
        )

    def wait_scheduled(self, source: dict, timeout: float | None = None) -> None:
        meta = source["metadata"]
        self._wait_for(
            lambda: self.scheduled(source), f"schedule PingSource {meta['namespace']}/{meta['name']}", timeout
        )

    def sent(self) -> list[dict]:
        """Every send it logged: {"id", "source", "target", "ts"} (debug level, see the doc)."""
        found = []
        for entry in self.entries():
            match = _SENDING.search(entry.get("msg", ""))
            if match:
                found.append({"id": match[1], "source": match[2], "target": match[3], "ts": entry.get("ts")})
        return found

    def failed_sends(self) -> list[dict]:
        """Sends it gave up on (non-2xx or no answer after its 5 retries)."""
        return [e for e in self.entries() if e.get("msg", "").startswith("failed to send cloudevent")]

    def delivered(self, after: float | None = None) -> list[dict]:
        """Sends (as sent()) that it began after `after` (time.time(); None: all) and that
        the sink acknowledged (2xx): it logs "Finished sending" once Send returned, after a
        "failed to send" if the sink never acknowledged. Log times have millisecond
        resolution, so a send within the same millisecond as `after` is not counted."""
        entries = self.entries()
        finished = {
            e["msg"].rsplit(" ", 1)[-1] for e in entries if e.get("msg", "").startswith("Finished sending")
        }
        failed = {e.get("id") for e in entries if e.get("msg", "").startswith("failed to send cloudevent")}
        return [
            send
            for send in self.sent()
            if send["id"] in finished
            and send["id"] not in failed
            and (after is None or _epoch(send["ts"]) > after)
        ]

    def wait_delivered(self, after: float | None = None, timeout: float = 30.0) -> dict:
        """The first send begun after `after` (default: now) that the sink acknowledged."""
        after = time.time() if after is None else after
        found: list[dict] = []

        def ready() -> bool:
            found[:] = self.delivered(after)
            return bool(found)

        self._wait_for(ready, "deliver a ping", timeout)
        return found[0]

    def entries(self) -> list[dict]:
        """Its JSON log lines (config-logging's zap encoder is json)."""
        found = []
        for line in self.text().splitlines():
            if line.startswith("{"):
                try:
                    found.append(json.loads(line))
                except ValueError:
                    continue
        return found
