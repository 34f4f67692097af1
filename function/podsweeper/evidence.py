"""Evidence of failures that outlives the pod and the Event TTL: what is kept, and its bound.

Pure: the failures a pod shows, and how a job's store takes in new ones. One store per job
(a ConfigMap the job owns, so it goes with the job; see cluster/). Per container it keeps the
first failure and the most recent ones; beyond that a crash loop is written again only when
something changes (another exit code or reason) or its restart count has doubled, so a loop
does not write on every restart. Never environment values: only the container status, the
node, the GPUs and, if enabled, the last lines of the container's log.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from podsweeper.decisions import Decision
from podsweeper.model import ContainerView, Pod

RECENT_PER_CONTAINER = 3
MAX_CONTAINERS = 64  # containers (pod x container) one job's store keeps
MAX_MESSAGE = 1024
MAX_LOG_BYTES = 2048
# Sources of a record.
TERMINATED = "terminated"  # seen in a pod event
DELETED_BY_PODSWEEPER = "deleted by podsweeper"
DELETED = "deleted"  # seen in the pod's delete event (someone else deleted it)


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
    source: str
    restarted: bool = False  # the run shown is the previous one (its log is the previous log)
    logs: str | None = None

    @property
    def key(self) -> tuple[str, str, int, str]:
        """Identifies the run: the same termination seen again is not new."""
        return (self.pod_uid, self.container, self.restart_count, self.finished_at or "")

    def with_logs(self, logs: str | None) -> Failure:
        return Failure(**{**asdict(self), "logs": _tail_bytes(logs) if logs else None})

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None and v is not False}


def _iso(at: datetime | None) -> str | None:
    return at.isoformat().replace("+00:00", "Z") if at else None


def _tail_bytes(text: str) -> str:
    data = text.encode()[-MAX_LOG_BYTES:]
    return data.decode(errors="replace")


def failures_of(pod: Pod, gpus: int, source: str) -> list[Failure]:
    """The failed runs the pod's container statuses show (now, or as the last run)."""
    return [_failure(pod, c, gpus, source) for c in pod.containers if c.failed]


def _failure(pod: Pod, c: ContainerView, gpus: int, source: str) -> Failure:
    return Failure(
        pod=pod.name,
        pod_uid=pod.uid,
        container=c.name,
        node=pod.node,
        exit_code=c.exit_code,
        signal=c.signal,
        reason=c.reason,
        message=(c.message or "")[:MAX_MESSAGE] or None,
        restart_count=c.restart_count,
        started_at=c.started_at,
        finished_at=c.finished_at,
        gpus=gpus,
        source=source,
        restarted=c.restarted,
    )


def failures_of_deleted(decision: Decision) -> list[Failure]:
    """What a pod podsweeper is about to delete shows of its failed runs (decision evidence)."""
    pod = Pod(decision.namespace, decision.name, decision.uid, "", node=decision.node)
    return [_failure(pod, c, decision.gpus, DELETED_BY_PODSWEEPER) for c in decision.evidence if c.failed]


def store_name(job_name: str) -> str:
    """The job's store (a ConfigMap in the job's namespace)."""
    return f"podsweeper-evidence-{job_name}"[:253]


def _worth_keeping(new: Failure, kept: list[dict[str, Any]]) -> bool:
    """Within the bound always; beyond it only a change or a doubled restart count."""
    if len(kept) < 1 + RECENT_PER_CONTAINER:
        return True
    latest = kept[-1]
    changed = (new.exit_code, new.reason) != (latest.get("exit_code"), latest.get("reason"))
    return changed or new.restart_count >= 2 * max(1, int(latest.get("restart_count", 0)))


def merge(records: list[dict[str, Any]], new: list[Failure]) -> list[dict[str, Any]] | None:
    """The store's records with the new failures taken in; None when nothing is to be written."""
    by_container: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in records:
        by_container.setdefault((record.get("pod_uid", ""), record.get("container", "")), []).append(record)
    keys = {_key(r) for r in records}
    changed = False
    for failure in new:
        if failure.key in keys:
            continue
        slot = (failure.pod_uid, failure.container)
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
    return sorted(
        merged, key=lambda r: (r.get("finished_at") or "", r.get("pod", ""), r.get("container", ""))
    )


def _key(record: dict[str, Any]) -> tuple[str, str, int, str]:
    return (
        record.get("pod_uid", ""),
        record.get("container", ""),
        int(record.get("restart_count", 0)),
        record.get("finished_at") or "",
    )


def encode(records: list[dict[str, Any]]) -> str:
    return json.dumps(records, separators=(",", ":"), sort_keys=True)


def decode(text: str | None) -> list[dict[str, Any]]:
    try:
        value = json.loads(text or "[]")
    except ValueError:
        return []
    return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []
