"""`podsweeper record`: a namespace's watch, written as Knative's ApiServerSource would send it.

Each ADDED / MODIFIED / DELETED of a pod or a training job in the namespace becomes one
CloudEvent (structured JSON, one per line) with exactly the attributes the receive adapter
sets (read from knative.dev/eventing v0.49.2
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
from datetime import UTC, datetime
from typing import Any, TextIO

from podsweeper.model import Verb
from podsweeper.triggers import RESOURCE_PREFIX, event_type

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


def reference(obj: dict[str, Any]) -> dict[str, Any]:
    """corev1.ObjectReference as the adapter marshals it (empty fields omitted, Go field order)."""
    meta = obj.get("metadata") or {}
    fields = (
        ("kind", obj.get("kind")),
        ("namespace", meta.get("namespace")),
        ("name", meta.get("name")),
        ("apiVersion", obj.get("apiVersion")),
    )
    return {key: value for key, value in fields if value}


def rfc3339(at: datetime) -> str:
    """Go's time.RFC3339Nano in UTC, as the CloudEvents SDK writes `time`."""
    text = at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0").rstrip(".")
    return text + "Z"


def make_event(
    verb: Verb | str,
    obj: dict[str, Any],
    source: str,
    mode: str = "Resource",
    *,
    at: datetime | None = None,
    event_id: str | None = None,
) -> dict[str, Any]:
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
        "type": event_type(Verb(verb), reference=ref),
        "subject": subject_for(api_version, kind, namespace, name),
        "time": rfc3339(at or datetime.now(UTC)),
        "datacontenttype": "application/json",
        "kind": kind,
        "apiversion": api_version,
        "name": name,
        "namespace": namespace,
        "data": reference(obj) if ref else obj,
    }


# -- the command ---------------------------------------------------------------------------


def _describe(event: dict[str, Any]) -> str:
    data = event["data"] if event["type"].startswith(RESOURCE_PREFIX) else {}
    status = (data or {}).get("status") or {}
    detail = status.get("phase") or ",".join(
        c.get("type", "?") for c in status.get("conditions") or [] if c.get("status") == "True"
    )
    verb = event["type"].rsplit(".", 1)[1]
    return f"{verb:6} {event['kind']}/{event['name']}" + (f" ({detail})" if detail else "")


def _write(stream: TextIO, event: dict[str, Any], count: int, say: Callable[[str], None]) -> int:
    stream.write(json.dumps(event, separators=(",", ":"), ensure_ascii=False) + "\n")
    stream.flush()
    say(f"{count + 1:5} {_describe(event)}")
    return 1


def record(
    kubeconfig: str | None,
    namespace: str,
    out: str,
    seconds: float | None,
    mode: str = "Resource",
    *,
    pod_selector: str | None = None,
    log: TextIO | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Record the namespace's changes to `out` ("-" = stdout) until SIGINT/SIGTERM or `seconds`."""
    from podsweeper.cluster.kube import load_api_client
    from podsweeper.cluster.watch import NamespaceWatch

    log = log or sys.stderr

    def say(message: str) -> None:
        print(f"podsweeper record: {message}", file=log, flush=True)

    stop = stop or threading.Event()
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())

    api = load_api_client(kubeconfig)
    source = api.configuration.host
    recorder = NamespaceWatch(api, namespace, pod_selector=pod_selector, log=say)
    count = 0
    stream = sys.stdout if out == "-" else open(out, "w", encoding="utf-8")  # noqa: SIM115
    try:
        recorder.start()
        say(
            f"watching {', '.join(r.label for r in recorder.resources)} in namespace {namespace} "
            f"({mode} mode, source {source}) -> {out}"
            + (f" for {seconds:g}s" if seconds else "; Ctrl-C stops")
        )
        deadline = None if seconds is None else time.monotonic() + seconds
        while not stop.is_set() and not recorder.failed and (deadline is None or time.monotonic() < deadline):
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
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    say(f"recorded {count} event(s) to {out}")
    if recorder.failed:
        say(f"stopped: {recorder.failed}")
        return 1
    return 0
