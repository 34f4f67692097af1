"""Decisions out as CloudEvents, to the sink Knative names in K_SINK (a SinkBinding's).

Two halves. `notices` (pure): the CloudEvents one pass's acted decisions make, one per job,
type, rule and action, each carrying the objects with their evidence summary, the job's owner
labels and the settings the decisions were made under. `Notifier` (the shell): a bounded
queue and one sender thread that POSTs each event (binary mode) with retries and backoff.
`_act` only puts events on the queue (put_nowait): a slow or failing sink never delays a
delete; a full queue drops the event, and every drop, send and failure is counted
(podsweeper_notifications_total). In dry-run only `dev.podsweeper.decision.dryrun` is made.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cloudevents.conversion import to_binary
from cloudevents.http import CloudEvent

from podsweeper import metrics
from podsweeper.actions import Applied
from podsweeper.config import Settings
from podsweeper.decisions import Decision, Result
from podsweeper.report import applied_settings

if TYPE_CHECKING:
    import urllib3

log = logging.getLogger("podsweeper.notify")

CLEANED = "dev.podsweeper.pods.cleaned"
SUSPENDED = "dev.podsweeper.job.suspended"
WARNED = "dev.podsweeper.job.warned"
DRY_RUN = "dev.podsweeper.decision.dryrun"
TYPES = (CLEANED, SUSPENDED, WARNED, DRY_RUN)
# What a live decision's result makes; any other result (gone, conflict, deferred, already
# warned, a skip) changed nothing and would change nothing: no event.
LIVE_TYPES = {Result.DELETED: CLEANED, Result.SUSPENDED: SUSPENDED, Result.WARNED: WARNED}
# Results a dry-run decision is told for: what it would have done, and the warnings written.
DRY_RUN_RESULTS = frozenset({Result.DRY_RUN, Result.WARNED})
BACKOFF_SECONDS = 0.2  # before the second try; doubled each time, at most MAX_BACKOFF_SECONDS
MAX_BACKOFF_SECONDS = 5.0
FLUSH_SECONDS = 5.0  # how long a shutdown waits for the queue to drain


@dataclass(frozen=True)
class Notice:
    """One CloudEvent: its context attributes (extensions included) and its JSON data."""

    attributes: dict[str, str]
    data: dict[str, Any]


def event_type(item: Applied, dry_run: bool) -> str | None:
    """The type a decision's outcome is told as; None when it changed, and would change, nothing.
    A dry-run decision is only ever told as a dry-run one."""
    result = item.result
    if dry_run:
        return DRY_RUN if result in DRY_RUN_RESULTS else None
    return LIVE_TYPES.get(result) if result is not None else None


def _object(decision: Decision, result: Result | None, now: datetime) -> dict[str, Any]:
    return {
        "kind": decision.kind,
        "name": decision.name,
        "uid": decision.uid,
        "result": result.value if result else None,
        "reason": decision.reason,
        "node": decision.node,
        "gpus": decision.gpus,
        "gpuSeconds": round(decision.gpu_seconds(now), 1),
        "containers": [
            {
                "name": c.name,
                "exitCode": c.exit_code,
                "reason": c.reason,
                "restarts": c.restart_count,
                "crashLooping": c.crash_looping,
            }
            for c in decision.evidence
        ],
    }


def notices(
    items: Iterable[Applied], dry_run: Callable[[Decision], bool], event_id: str, now: datetime, source: str
) -> list[Notice]:
    """The CloudEvents for one pass's acted decisions: one per (job, type, rule, action)."""
    groups: dict[tuple[Any, ...], list[Applied]] = defaultdict(list)
    for item in items:
        dry = dry_run(item.decision)
        kind = event_type(item, dry)
        if kind is not None:
            d = item.decision
            groups[(d.job.key, kind, d.rule, d.action, dry)].append(item)
    return [
        _notice(group, kind, dry, event_id, now, source) for (_, kind, _, _, dry), group in groups.items()
    ]


def _notice(group: list[Applied], kind: str, dry: bool, event_id: str, now: datetime, source: str) -> Notice:
    first = group[0].decision
    job = first.job
    mode = "dry-run" if dry else (first.policy.mode.value if first.policy else "live")
    objects = [_object(item.decision, item.result, now) for item in group]
    digest = hashlib.sha256(
        "|".join((event_id, kind, first.rule.value, *(o["uid"] for o in objects))).encode()
    ).hexdigest()[:32]
    attributes = {
        "specversion": "1.0",
        "id": digest,
        "source": source,
        "type": kind,
        "subject": f"{job.namespace}/{job.name}",
        "time": now.isoformat().replace("+00:00", "Z"),
        "datacontenttype": "application/json",
        # Extensions, for a Trigger's filter (lower-case letters and digits only).
        "namespace": job.namespace,
        "rule": first.rule.value,
        "action": first.action.value,
        "jobkind": job.kind.kind.lower(),
        "mode": mode,
    }
    data = {
        "namespace": job.namespace,
        "job": {
            "kind": job.kind.kind,
            "name": job.name,
            "uid": job.uid or "",
            "apiVersion": job.api_version or job.kind.api_version(job.version),
        },
        "owner": dict(first.owner),
        "rule": first.rule.value,
        "action": first.action.value,
        "mode": mode,
        "settings": applied_settings(first),
        "eventId": event_id,
        "objects": objects,
        "gpus": sum(o["gpus"] for o in objects),
        "gpuSeconds": round(sum(o["gpuSeconds"] for o in objects), 1),
    }
    return Notice(attributes, data)


def overrides(raw: str | None) -> dict[str, str]:
    """K_CE_OVERRIDES (a SinkBinding's spec.ceOverrides): extensions added to every event."""
    if not raw:
        return {}
    try:
        extensions = json.loads(raw).get("extensions") or {}
    except (ValueError, AttributeError):
        log.warning("K_CE_OVERRIDES is not JSON with extensions: ignored")
        return {}
    return {str(k): str(v) for k, v in extensions.items()} if isinstance(extensions, dict) else {}


class Notifier:
    """A bounded queue and one sender thread to one sink (K_SINK), per process, started on
    first use: functions-framework builds the app (and so this) before gunicorn forks its
    workers, and a thread does not survive a fork; a sender started at construction would
    leave every worker queueing to no one. A connection pool is not shared across a fork either."""

    def __init__(
        self,
        sink: str,
        settings: Settings,
        extensions: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.sink = sink
        self.source = settings.notify_source
        self._attempts = settings.notify_attempts
        self._extensions = dict(extensions or {})
        self._sleep = sleep
        self._queue_size = settings.notify_queue
        self._timeout = settings.notify_timeout_seconds
        self._start_lock = threading.Lock()
        self._pid: int | None = None  # the process the queue, pool and sender below belong to
        self._queue: queue.Queue[Notice | None] = queue.Queue(maxsize=self._queue_size)
        self._http = self._pool()
        self._thread: threading.Thread | None = None

    def _started(self) -> queue.Queue[Notice | None]:
        if self._pid != os.getpid():
            with self._start_lock:
                if self._pid != os.getpid():
                    self._queue = queue.Queue(maxsize=self._queue_size)
                    self._http = self._pool()
                    self._thread = threading.Thread(target=self._run, name="podsweeper-notify", daemon=True)
                    self._thread.start()
                    self._pid = os.getpid()
        return self._queue

    def _pool(self) -> urllib3.PoolManager:
        # Imported here: only a function with a sink sends, and the import was a tenth of the
        # cold start of one without.
        import urllib3

        return urllib3.PoolManager(num_pools=1, maxsize=1, timeout=urllib3.Timeout(total=self._timeout))

    def submit(self, batch: Iterable[Notice]) -> None:
        """Queue each event, never waiting: a full queue drops it (counted)."""
        pending = self._started()
        for notice in batch:
            try:
                pending.put_nowait(notice)
            except queue.Full:
                metrics.notifications("dropped").inc()

    def close(self, timeout: float = FLUSH_SECONDS) -> bool:
        """Send what is queued, for at most `timeout` seconds; True when all went."""
        if self._pid != os.getpid() or self._thread is None:
            return True  # nothing was queued in this process
        deadline = time.monotonic() + timeout
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return False
        self._thread.join(max(0.0, deadline - time.monotonic()))
        return not self._thread.is_alive()

    def _run(self) -> None:
        while (notice := self._queue.get()) is not None:
            outcome = "sent" if self._send(notice) else "failed"
            metrics.notifications(outcome).inc()

    def _send(self, notice: Notice) -> bool:
        from urllib3.exceptions import HTTPError  # loaded with the pool (_pool)

        event = CloudEvent({**notice.attributes, **self._extensions}, notice.data)
        headers, body = to_binary(event)
        for attempt in range(self._attempts):
            if attempt:
                self._sleep(min(MAX_BACKOFF_SECONDS, BACKOFF_SECONDS * 2 ** (attempt - 1)))
            try:
                answer = self._http.request("POST", self.sink, body=body, headers=headers, retries=False)
            except (HTTPError, OSError) as error:
                log.info("sink %s: %s (try %d)", self.sink, type(error).__name__, attempt + 1)
                continue
            if answer.status < 300:
                return True
            if answer.status < 500 and answer.status not in (408, 429):
                break  # the sink refuses this event: another try would get the same
        log.warning(
            "CloudEvent %s (%s) not delivered to %s",
            notice.attributes["id"],
            notice.attributes["type"],
            self.sink,
        )
        return False
