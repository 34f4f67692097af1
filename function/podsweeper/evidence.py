"""Evidence of failures that outlives the pod and the Event TTL: what is kept, and its bound.

Pure: the failures a pod shows, and how a job's store takes in new ones. One store per job
(a ConfigMap the job owns, so it goes with the job; see cluster/). Per container it keeps the
first failure and the most recent ones; beyond that a crash loop is written again only when
something changes (another exit code or reason, a stronger source) or its restart count has
doubled, so a loop does not write on every restart. Never environment values: only the
container status, the node, the GPUs and, if log text is allowed there, the container's
termination message and the last lines of its log.

A store is bounded in bytes too (STORE_BUDGET, `bounded`): whatever the logs hold, it stays
well below what the API server accepts in a ConfigMap, so a big failing job's store is never
refused for its size.

Each record says what happened to its pod, as known when it was written (its Source): a
record of podsweeper's own act is written after the act, from its Result, never before.

Over 300 lines, on purpose: the record, its sources' order and the store's bound are one
format; a split would put the bound apart from the records it bounds.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any

from podsweeper.decisions import Decision, Result
from podsweeper.model import ContainerView, Pod

RECENT_PER_CONTAINER = 3
MAX_CONTAINERS = 64  # containers (pod x container) one job's store keeps
MAX_MESSAGE = 1024
MAX_REASON = 256
MAX_LOG_BYTES = 2048
CONFIGMAP_DATA_LIMIT = 1024 * 1024  # what the API server accepts in a ConfigMap's data, keys included
# What evidence.json may hold, UTF-8 encoded. The API server refuses (422) a ConfigMap whose
# data passes 1 MiB (1,048,576 bytes, keys included); 900 KiB leaves 124 KiB below that for
# the key and any slack, and keeps the object (data plus a few KiB of metadata) far under
# etcd's 1.5 MiB request limit and the request body (each byte of the value at most two once
# JSON-escaped again by the client) under the API server's 3 MiB.
STORE_BUDGET = 900 * 1024


class Dropped(StrEnum):
    """Why one of podsweeper's records was not written: the reason of a NotKept (and of the
    podsweeper_records_dropped_total counter)."""

    FOREIGN = "foreign"  # a ConfigMap of that name that podsweeper did not make: left alone
    EARLIER = "earlier"  # a finish mark of an earlier job of that name, not collected yet
    REFUSED = "refused"  # the API refused it for good (413, 422: too large, invalid)
    UNSIGNED = "unsigned"  # a finish mark with no signing key to be had (the key's Secret unreadable)


class NotKept(Exception):
    """A store podsweeper may not, or cannot, write: kept nothing, and not worth retrying
    (never an ApiUnavailable: the event is not answered 503 for it)."""

    def __init__(self, reason: Dropped, detail: str):
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


class Source(StrEnum):
    """Why a record was kept: what happened to the pod, as known when it was written (see
    `meaning`). The values are what stores hold; the first three are those of the first
    release, so stores already written stay readable."""

    TERMINATED = "terminated"
    DELETED = "deleted"
    DELETED_BY_PODSWEEPER = "deleted by podsweeper"
    WOULD_BE_DELETED = "would be deleted (dry-run)"
    DEFERRED = "deferred to the next event"
    KEPT_AFTER_CONFLICT = "kept after a conflict"
    ALREADY_GONE = "already gone"

    @property
    def observed(self) -> bool:
        """Seen in a pod event, not learnt from podsweeper's own act."""
        return self in (Source.TERMINATED, Source.DELETED)

    @property
    def meaning(self) -> str:
        return _MEANING[self]


_MEANING: dict[Source, str] = {
    Source.TERMINATED: "the run was seen ended in a pod event; nothing more is known of the pod",
    Source.DELETED: "seen in the pod's delete event (the event does not say who deleted it)",
    Source.DELETED_BY_PODSWEEPER: "podsweeper deleted the pod (its delete succeeded)",
    Source.WOULD_BE_DELETED: "podsweeper decided to delete the pod; dry-run: it was not deleted",
    Source.DEFERRED: "over the event's delete bound: not deleted yet, the next event decides again",
    Source.KEPT_AFTER_CONFLICT: "409: the pod changed or was replaced before the delete; not deleted",
    Source.ALREADY_GONE: "404: the pod was already gone when podsweeper's delete came; not deleted by it",
}


# What a delete decision's Result says happened to its pod: the one place that says it.
SOURCE_OF_RESULT: dict[Result, Source] = {
    Result.DELETED: Source.DELETED_BY_PODSWEEPER,
    Result.DRY_RUN: Source.WOULD_BE_DELETED,
    Result.DEFERRED: Source.DEFERRED,
    Result.CONFLICT: Source.KEPT_AFTER_CONFLICT,
    Result.GONE: Source.ALREADY_GONE,
}

# How strong a source is: a record of a run is replaced only by a stronger outcome of
# podsweeper's own act, never by a weaker one. Tentative outcomes (the pod is still there)
# rank above a mere sighting and below any end of the pod.
_STRENGTH: dict[Source, int] = {
    Source.TERMINATED: 0,
    Source.WOULD_BE_DELETED: 1,
    Source.DEFERRED: 1,
    Source.KEPT_AFTER_CONFLICT: 1,
    Source.DELETED: 2,
    Source.ALREADY_GONE: 2,
    Source.DELETED_BY_PODSWEEPER: 3,
}


def source_of(result: Result | None) -> Source:
    """The source of a delete decision's record once its Result is known; no Result (the API
    failed before it was known): the run was merely seen terminated."""
    if result is None:
        return Source.TERMINATED
    return SOURCE_OF_RESULT.get(result, Source.TERMINATED)


def upgrades(new: Source, kept: str | None) -> bool:
    """Whether a record from `new` replaces the kept record of the same run (`kept`: its source).

    Only podsweeper's own outcomes replace, and only a weaker source: a sighting (a pod event,
    its delete event) never rewrites a run already kept, so it costs no write, and a source this
    version does not know is never replaced."""
    if new.observed or kept is None:
        return False
    try:
        old = Source(kept)
    except ValueError:
        return False
    return _STRENGTH[new] > _STRENGTH[old]


@dataclass(frozen=True)
class Failure:
    """One container run that ended in failure, as kept."""

    pod: str
    pod_uid: str
    container: str
    node: str | None
    exit_code: int | None
    signal: int | None
    reason: str | None
    message: str | None
    restart_count: int
    started_at: str | None
    finished_at: str | None
    gpus: int
    source: Source
    restarted: bool = False  # the run shown is the previous one (its log is the previous log)
    logs: str | None = None
    run_id: str | None = None  # the run's containerID, where the kubelet gave it

    @property
    def key(self) -> tuple[str, str, str]:
        """Identifies the run: the same termination seen again is not new."""
        return run_key(self.pod_uid, self.container, self.run_id, self.restart_count, self.finished_at)

    def with_logs(self, logs: str | None) -> Failure:
        return replace(self, logs=_tail_bytes(logs) if logs else None)

    def without_text(self) -> Failure:
        """The run without the text its container wrote: its log and its termination message
        (which is the log itself under terminationMessagePolicy FallbackToLogsOnError, and
        the pod's spec is not read to tell)."""
        return replace(self, message=None, logs=None)

    def kept_as(self, source: Source) -> Failure:
        """The same run, recorded with what is known now of its pod."""
        return replace(self, source=source)

    def as_dict(self) -> dict[str, Any]:
        record = {k: v for k, v in asdict(self).items() if v is not None and v is not False}
        record["source"] = self.source.value
        return record


def _tail_bytes(text: str) -> str:
    data = text.encode()[-MAX_LOG_BYTES:]
    return data.decode(errors="replace")


def failures_of(pod: Pod, gpus: int, source: Source) -> list[Failure]:
    """The failed runs the pod's container statuses show (now, or as the last run)."""
    return [_failure(pod, c, gpus, source) for c in pod.containers if c.failed]


def _failure(pod: Pod, c: ContainerView, gpus: int, source: Source) -> Failure:
    return Failure(
        pod=pod.name,
        pod_uid=pod.uid,
        container=c.name,
        node=pod.node,
        exit_code=c.exit_code,
        signal=c.signal,
        reason=(c.reason or "")[:MAX_REASON] or None,
        message=(c.message or "")[:MAX_MESSAGE] or None,
        restart_count=c.restart_count,
        started_at=c.started_at,
        finished_at=c.finished_at,
        gpus=gpus,
        source=source,
        restarted=c.restarted,
        run_id=c.run_id,
    )


def failures_of_decided(decision: Decision) -> list[Failure]:
    """The failed runs a pod a delete decision names shows (its evidence), read before the act:
    "terminated" until the act's Result says what became of the pod (Failure.kept_as)."""
    pod = Pod(decision.namespace, decision.name, decision.uid, "", node=decision.node)
    return [_failure(pod, c, decision.gpus, Source.TERMINATED) for c in decision.evidence if c.failed]


def store_name(job_name: str) -> str:
    """The job's store (a ConfigMap in the job's namespace)."""
    return f"podsweeper-evidence-{job_name}"[:253]


def _worth_keeping(new: Failure, kept: list[dict[str, Any]]) -> bool:
    """Within the bound always; beyond it only a change (another exit code or reason, or a
    stronger source: the loop's end by podsweeper's hand) or a doubled restart count."""
    if len(kept) < 1 + RECENT_PER_CONTAINER:
        return True
    latest = kept[-1]
    changed = (new.exit_code, new.reason) != (latest.get("exit_code"), latest.get("reason"))
    stronger = upgrades(new.source, latest.get("source"))
    return changed or stronger or new.restart_count >= 2 * max(1, int(latest.get("restart_count", 0)))


def _upgraded(record: dict[str, Any], new: Failure) -> dict[str, Any]:
    """The new record of a run already kept; the logs read earlier stay if none were read now."""
    upgraded = new.as_dict()
    if "logs" not in upgraded and record.get("logs"):
        upgraded["logs"] = record["logs"]
    return upgraded


def merge(records: list[dict[str, Any]], new: list[Failure]) -> list[dict[str, Any]] | None:
    """The store's records with the new failures taken in; None when nothing is to be written.

    A run already kept is replaced only by a stronger outcome (`upgrades`), in place."""
    by_container: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in records:
        by_container.setdefault((record.get("pod_uid", ""), record.get("container", "")), []).append(record)
    keys = {_key(r) for r in records}
    changed = False
    for failure in new:
        slot = (failure.pod_uid, failure.container)
        if failure.key in keys:
            runs = by_container[slot]
            at = next(i for i, r in enumerate(runs) if _key(r) == failure.key)
            if upgrades(failure.source, runs[at].get("source")):
                runs[at] = _upgraded(runs[at], failure)
                changed = True
            continue
        kept = by_container.get(slot)
        if kept is None and len(by_container) >= MAX_CONTAINERS:
            continue  # the job's store is full of other containers' first failures
        kept = by_container.setdefault(slot, [])
        if not _worth_keeping(failure, kept):
            continue
        kept.append(failure.as_dict())
        keys.add(failure.key)
        if len(kept) > 1 + RECENT_PER_CONTAINER:
            del kept[1]  # keep the first failure and the most recent ones
        changed = True
    if not changed:
        return None
    merged = [r for kept in by_container.values() for r in kept]
    firsts = {id(kept[0]) for kept in by_container.values() if kept}
    ordered = sorted(
        merged, key=lambda r: (r.get("finished_at") or "", r.get("pod", ""), r.get("container", ""))
    )
    return bounded(ordered, [id(r) in firsts for r in ordered], STORE_BUDGET)


def bounded(records: list[dict[str, Any]], first: list[bool], budget: int) -> list[dict[str, Any]]:
    """The records (oldest first), cut to what `encode` writes within `budget` bytes.

    What goes first: log text, the oldest records' first; then the oldest runs, never a
    container's first failure (`first`, one flag per record); then the first failures'
    messages. Records podsweeper makes end there (MAX_CONTAINERS first failures without logs
    take a fraction of the budget); only records it did not write could still pass it, and
    then the newest go."""
    sizes = [_size(r) for r in records]
    total = 2 + sum(sizes) + max(0, len(sizes) - 1)  # "[" + records joined by "," + "]"
    if total <= budget:
        return records
    kept = list(records)

    def without(i: int, field: str) -> int:
        trimmed = {k: v for k, v in kept[i].items() if k != field}
        size = _size(trimmed)
        freed, kept[i], sizes[i] = sizes[i] - size, trimmed, size
        return freed

    for i, record in enumerate(kept):
        if total <= budget:
            break
        if "logs" in record:
            total -= without(i, "logs")
    dropped: set[int] = set()
    for i in range(len(kept)):
        if total <= budget:
            break
        if not first[i]:
            dropped.add(i)
            total -= sizes[i] + 1
    for i in range(len(kept)):
        if total <= budget:
            break
        if i not in dropped and "message" in kept[i]:
            total -= without(i, "message")
    for i in reversed(range(len(kept))):
        if total <= budget:
            break
        if i not in dropped:
            dropped.add(i)
            total -= sizes[i] + 1
    return [r for i, r in enumerate(kept) if i not in dropped]


def _size(record: dict[str, Any]) -> int:
    return len(encode([record]).encode()) - 2


def run_key(
    pod_uid: str, container: str, run_id: str | None, restart_count: int, finished_at: str | None
) -> tuple[str, str, str]:
    """A run by its containerID where the kubelet gave one: the restart count shown with one
    run changes as the kubelet restarts it (n as `state`, n in CrashLoopBackOff, n + 1 once
    running again); else by its restart count and finish time."""
    return (pod_uid, container, f"id {run_id}" if run_id else f"{restart_count} {finished_at or ''}")


def _key(record: dict[str, Any]) -> tuple[str, str, str]:
    return run_key(
        record.get("pod_uid", ""),
        record.get("container", ""),
        record.get("run_id"),
        int(record.get("restart_count", 0)),
        record.get("finished_at"),
    )


def encode(records: list[dict[str, Any]]) -> str:
    """The store's text: UTF-8, not \\u escapes (a CJK character takes 3 bytes, not 6). A lone
    surrogate (from a store read back) has no UTF-8 form: it becomes "?"."""
    text = json.dumps(records, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    try:
        text.encode()
    except UnicodeEncodeError:
        text = text.encode(errors="replace").decode()
    return text


def decode(text: str | None) -> list[dict[str, Any]]:
    try:
        value = json.loads(text or "[]")
    except ValueError:
        return []
    return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []
