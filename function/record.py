"""`podsweeper record`: a namespace's watch, written as Knative's ApiServerSource would send it.

Each ADDED / MODIFIED / DELETED of a pod or a training job in the namespace becomes one
CloudEvent (structured JSON, one per line) with exactly the attributes the receive adapter
sets (see docs apiserversource.md, checked against knative.dev/eventing v0.49.2
pkg/adapter/apiserver/events): `type` dev.knative.apiserver.{resource,ref}.{add,update,delete},
`source` = the API server URL, `subject` = the adapter's self link, extensions `kind`,
`apiversion`, `name`, `namespace`, a fresh uuid4 `id` and the send `time`. In Resource mode
`data` is the object exactly as the watch delivered it (raw JSON, never through client
models); in Reference mode it is the adapter's ObjectReference.

Like the adapter, it sends nothing for objects that exist when the watch starts (it watches
from the initial list's resourceVersion), nor for what a relist would show after the watch
expired: such a gap is reported on stderr. The output is what `podsweeper replay` reads.
"""

from __future__ import annotations

import json
import queue
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TextIO

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from function import kinds
from function.errors import ApiUnavailable

VERBS = {"ADDED": "add", "MODIFIED": "update", "DELETED": "delete"}
# A server-side watch timeout: the stream ends cleanly and is resumed from the last version.
WATCH_SECONDS = 240


@dataclass(frozen=True)
class Resource:
    """One watched collection: the core pods, or one served version of a training kind."""

    group: str  # "" for core
    version: str
    plural: str

    @property
    def label(self) -> str:
        return f"{self.plural}.{self.group}/{self.version}" if self.group else f"{self.plural}/{self.version}"


# -- the adapter's event format ---------------------------------------------------------------

def guess_plural(kind: str) -> str:
    """k8s.io/apimachinery meta.UnsafeGuessKindToResource, which the adapter uses for `subject`."""
    singular = kind.lower()
    if singular.endswith("endpoints"):
        return singular
    if singular.endswith("s"):
        return singular + "es"
    if singular.endswith("y"):
        return singular[:-1] + "ies"
    return singular + "s"


def subject_for(api_version: str, kind: str, namespace: str, name: str) -> str:
    """The adapter's createSelfLink: `/apis/v1/...` even for core objects."""
    version = api_version
    if "." in version and "/" not in version:
        version += "/versionUnknown"
    return f"/apis/{version}/namespaces/{namespace}/{guess_plural(kind)}/{name}"


def reference(obj: dict) -> dict:
    """corev1.ObjectReference as the adapter marshals it (empty fields omitted, Go field order)."""
    meta = obj.get("metadata") or {}
    fields = (("kind", obj.get("kind")), ("namespace", meta.get("namespace")),
              ("name", meta.get("name")), ("apiVersion", obj.get("apiVersion")))
    return {key: value for key, value in fields if value}


def rfc3339(at: datetime) -> str:
    """Go's time.RFC3339Nano in UTC, as the CloudEvents SDK writes `time`."""
    text = at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0").rstrip(".")
    return text + "Z"


def make_event(verb: str, obj: dict, source: str, mode: str = "Resource", *,
               at: datetime | None = None, event_id: str | None = None) -> dict:
    """One CloudEvent (structured JSON form) for a watch change, as the receive adapter builds it."""
    meta = obj.get("metadata") or {}
    api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    namespace, name = meta.get("namespace", ""), meta.get("name", "")
    # Only exactly "Reference" selects Reference mode in the adapter; anything else is Resource.
    ref = mode == "Reference"
    return {
        "specversion": "1.0",
        "id": event_id or str(uuid.uuid4()),
        "source": source,
        "type": f"dev.knative.apiserver.{'ref' if ref else 'resource'}.{verb}",
        "subject": subject_for(api_version, kind, namespace, name),
        "time": rfc3339(at or datetime.now(timezone.utc)),
        "datacontenttype": "application/json",
        "kind": kind, "apiversion": api_version, "name": name, "namespace": namespace,
        "data": reference(obj) if ref else obj,
    }


# -- watching ------------------------------------------------------------------------------

def _raw(response) -> Any:
    return json.loads(response.data or b"null")


class Recorder:
    """Watches pods and every served training kind in one namespace from background threads.

    `start()` lists each collection (which fixes the version the watch starts from) and
    returns once every watch is running; changes then arrive on `changes` as
    (verb, object, received-at) tuples, in arrival order.
    """

    def __init__(self, api: client.ApiClient, namespace: str, *, pod_selector: str | None = None,
                 log: Callable[[str], None] | None = None):
        self.api = api
        self.namespace = namespace
        self.pod_selector = pod_selector
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.changes: queue.Queue[tuple[str, dict, datetime]] = queue.Queue()
        self.resources: list[Resource] = []
        self.errors: list[str] = []
        self.failed: str | None = None  # a watch that cannot work (e.g. 403): stop recording
        self._log = log or (lambda message: None)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._responses: dict[Resource, Any] = {}

    # One call shape for core pods and custom objects; `extra` carries list/watch parameters.
    def _request(self, resource: Resource, **extra):
        if resource.group == "":
            if self.pod_selector:
                extra["label_selector"] = self.pod_selector
            return self.core.list_namespaced_pod(self.namespace, _preload_content=False, **extra)
        return self.custom.list_namespaced_custom_object(
            resource.group, resource.version, self.namespace, resource.plural,
            _preload_content=False, **extra)

    def _list_version(self, resource: Resource) -> str | None:
        """The collection's current resourceVersion; None if the API does not serve it."""
        try:
            body = _raw(self._request(resource, limit=1, _request_timeout=30))
        except ApiException as error:
            if error.status == 404:
                return None
            raise ApiUnavailable(f"list {resource.label} in {self.namespace}: "
                                 f"API answered {error.status} {error.reason}") from None
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise ApiUnavailable(f"list {resource.label}: {type(error).__name__}: {error}") from None
        return str((body.get("metadata") or {}).get("resourceVersion") or "")

    def start(self) -> None:
        candidates: list[tuple[Resource, ...]] = [(Resource("", "v1", "pods"),)]
        candidates += [tuple(Resource(kinds.GROUP, version, kind.plural) for version in kind.versions)
                       for kind in kinds.TRAINING_KINDS]
        started: list[tuple[Resource, str]] = []
        for versions in candidates:
            # The first served version of each kind: a cluster serves e.g. MPIJob v1 (training
            # operator) or v2beta1 (mpi-operator), and one watch per kind is what the shipped
            # ApiServerSource configures.
            for resource in versions:
                version = self._list_version(resource)
                if version is not None:
                    started.append((resource, version))
                    break
            else:
                self._log(f"not served, not watched: {', '.join(r.label for r in versions)}")
        for resource, version in started:
            self.resources.append(resource)
            thread = threading.Thread(target=self._watch, args=(resource, version),
                                      name=f"watch-{resource.plural}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _watch(self, resource: Resource, version: str) -> None:
        failures = 0  # in a row: the wait before the next try doubles up to 5 s
        while not self._stop.is_set():
            problem = None
            try:
                response = self._request(resource, watch=True, resource_version=version,
                                         allow_watch_bookmarks=True, timeout_seconds=WATCH_SECONDS,
                                         _request_timeout=(10, WATCH_SECONDS + 30))
            except ApiException as error:
                if error.status in (401, 403) and not self._stop.is_set():
                    # No permission to watch: retrying cannot help.
                    self.failed = f"watch {resource.label}: API answered {error.status} {error.reason}"
                    self._note(self.failed)
                    return
                problem = f"API answered {error.status} {error.reason}"
            except (urllib3.exceptions.HTTPError, OSError) as error:
                problem = f"{type(error).__name__}: {str(error)[:200]}"
            else:
                self._responses[resource] = response
                try:
                    version = self._consume(resource, response, version)
                    failures = 0
                except (urllib3.exceptions.HTTPError, OSError, ValueError) as error:
                    problem = f"stream broke: {type(error).__name__}: {str(error)[:200]}"
                finally:
                    self._responses.pop(resource, None)
                    try:
                        response.release_conn()
                    except Exception:  # noqa: BLE001 - a stream shut down by stop()
                        pass
            if problem is None or self._stop.is_set():
                continue
            failures += 1
            if failures == 1 or failures % 20 == 0:  # say it once, then now and then
                self._note(f"watch {resource.label}: {problem}; retrying"
                           + (f" ({failures} failures in a row)" if failures > 1 else ""))
            self._stop.wait(min(5.0, 0.1 * 2 ** failures))

    def _consume(self, resource: Resource, response, version: str) -> str:
        """Read one watch stream to its end; returns the version to resume from."""
        for line in iter_resp_lines(response):
            if self._stop.is_set():
                return version
            received = datetime.now(timezone.utc)
            change = json.loads(line)
            kind, obj = change.get("type"), change.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:
                    # Expired: like the adapter's relist, objects changed meanwhile send nothing.
                    fresh = self._list_version(resource) or version
                    self._note(f"watch {resource.label} expired at {version}; restarted at {fresh}: "
                               "changes in between are not recorded (the adapter would not send them)")
                    return fresh
                raise ValueError(f"watch error {obj.get('code')}: {obj.get('message')}")
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if kind in VERBS:
                self.changes.put((VERBS[kind], obj, received))
        return version

    def _note(self, message: str) -> None:
        self.errors.append(message)
        self._log(message)

    def stop(self) -> None:
        self._stop.set()
        for response in list(self._responses.values()):
            try:  # interrupts a read blocked in another thread (urllib3 >= 2.3)
                getattr(response, "shutdown", response.close)()
            except Exception:  # noqa: BLE001 - best effort while stopping
                pass
        for thread in self._threads:
            thread.join(timeout=2.0)


# -- the command ---------------------------------------------------------------------------

def _describe(event: dict) -> str:
    data = event["data"] if event["type"].startswith("dev.knative.apiserver.resource.") else {}
    status = (data or {}).get("status") or {}
    detail = status.get("phase") or ",".join(
        c.get("type", "?") for c in status.get("conditions") or [] if c.get("status") == "True")
    verb = event["type"].rsplit(".", 1)[1]
    return f"{verb:6} {event['kind']}/{event['name']}" + (f" ({detail})" if detail else "")


def _write(stream: TextIO, event: dict, count: int, say: Callable[[str], None]) -> int:
    stream.write(json.dumps(event, separators=(",", ":"), ensure_ascii=False) + "\n")
    stream.flush()
    say(f"{count + 1:5} {_describe(event)}")
    return 1


def record(kubeconfig: str | None, namespace: str, out: str, seconds: float | None,
           mode: str = "Resource", *, pod_selector: str | None = None,
           log: TextIO | None = None, stop: threading.Event | None = None) -> int:
    """Record the namespace's changes to `out` ("-" = stdout) until SIGINT/SIGTERM or `seconds`."""
    from function.cluster.kube import load_api_client

    log = log or sys.stderr

    def say(message: str) -> None:
        print(f"podsweeper record: {message}", file=log, flush=True)

    stop = stop or threading.Event()
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())

    api = load_api_client(kubeconfig)
    source = api.configuration.host
    recorder = Recorder(api, namespace, pod_selector=pod_selector, log=say)
    count = 0
    stream = sys.stdout if out == "-" else open(out, "w", encoding="utf-8")  # noqa: SIM115
    try:
        recorder.start()
        say(f"watching {', '.join(r.label for r in recorder.resources)} in namespace {namespace} "
            f"({mode} mode, source {source}) -> {out}"
            + (f" for {seconds:g}s" if seconds else "; Ctrl-C stops"))
        deadline = None if seconds is None else time.monotonic() + seconds
        while not stop.is_set() and not recorder.failed \
                and (deadline is None or time.monotonic() < deadline):
            try:
                verb, obj, received = recorder.changes.get(timeout=0.1)
            except queue.Empty:
                continue
            count += _write(stream, make_event(verb, obj, source, mode, at=received), count, say)
        recorder.stop()
        while True:  # what arrived before the stop is part of the recording
            try:
                verb, obj, received = recorder.changes.get_nowait()
            except queue.Empty:
                break
            count += _write(stream, make_event(verb, obj, source, mode, at=received), count, say)
    finally:
        recorder.stop()
        if stream is not sys.stdout:
            stream.close()
        api.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    say(f"recorded {count} event(s) to {out}")
    if recorder.failed:
        say(f"stopped: {recorder.failed}")
        return 1
    return 0
