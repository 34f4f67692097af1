"""Prometheus metrics, served on /metrics of the function's own server."""

import functools
import json
import logging
from collections.abc import Mapping

from prometheus_client import Counter, Gauge, Histogram

EVENTS = Counter("podsweeper_events_total", "CloudEvents received", ["type", "outcome"])
DECISIONS = Counter("podsweeper_decisions_total", "Decisions made", ["rule", "action"])
DELETES = Counter("podsweeper_deletes_total", "Pod deletes by rule and result", ["rule", "result"])
HANDLING = Histogram(
    "podsweeper_event_handling_seconds",
    "Time to handle one event",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
IN_FLIGHT = Gauge(
    "podsweeper_events_in_flight",
    "CloudEvents being handled right now: near the server's threads, events wait for one",
)
RECLAIMED_GPU_SECONDS = Counter(
    "podsweeper_reclaimed_gpu_seconds_total",
    "GPU-seconds held by each pod podsweeper deleted (or whose job it suspended), from its job "
    "finishing (or its crash loop starting) to the delete",
    ["namespace", "rule"],
)
LEFTOVER_GPUS = Gauge(
    "podsweeper_leftover_gpus",
    "GPUs requested now by pods the rules name (delete, warn or suspend), as the last sweep found "
    "them less what it removed; in dry-run, what podsweeper would reclaim",
    ["namespace", "rule"],
)


NOTIFICATIONS = Counter(
    "podsweeper_notifications_total",
    "CloudEvents about decisions (K_SINK): sent, dropped (the queue was full: PODSWEEPER_NOTIFY_QUEUE) "
    "or failed (not delivered after PODSWEEPER_NOTIFY_ATTEMPTS tries, or refused by the sink)",
    ["outcome"],
)


RECORDS_DROPPED = Counter(
    "podsweeper_records_dropped_total",
    "podsweeper's own records (record: evidence, finish-mark) not written: reason foreign (a ConfigMap "
    "of that name podsweeper did not make, left as it is), earlier (an earlier job's finish mark, not "
    "collected yet) or refused (the API refused the store for good: too large, invalid)",
    ["record", "reason"],
)
_records_log = logging.getLogger("podsweeper.records")


def record_dropped(record: str, reason: str, namespace: str, job: str, detail: str) -> None:
    """Count a record not written, and say so in one JSON log line (it is not retried at once:
    nothing else would tell)."""
    RECORDS_DROPPED.labels(record, reason).inc()
    line = {
        "msg": "record not kept",
        "record": record,
        "reason": reason,
        "namespace": namespace,
        "job": job,
        "detail": detail[:500],
    }
    _records_log.warning(json.dumps(line))


@functools.cache  # bounded: sent, dropped, failed
def notifications(outcome: str) -> Counter:
    return NOTIFICATIONS.labels(outcome)


@functools.cache  # bounded: the accepted types (and "other") times the outcomes
def event_counter(event_type: str, outcome: str) -> Counter:
    """The events counter's child for one label set, looked up once: every event counts."""
    return EVENTS.labels(event_type, outcome)


def publish_leftover(gpus: Mapping[tuple[str, str], int]) -> None:
    """Replace the leftover gauge with a sweep's count (label sets no longer named go away)."""
    LEFTOVER_GPUS.clear()
    for (namespace, rule), amount in gpus.items():
        LEFTOVER_GPUS.labels(namespace, rule).set(amount)


AUTH_REFUSALS = Counter(
    "podsweeper_auth_refusals_total",
    "Requests answered 401 (PODSWEEPER_AUTH=oidc), by why: missing, malformed, audience, subject, "
    "expired, unknown_key, signature, issuer",
    ["reason"],
)
SWEEPS_SKIPPED = Counter(
    "podsweeper_sweeps_skipped_total",
    "Sweep requests answered without a sweep: one was running, or the last started less than "
    "PODSWEEPER_SWEEP_MIN_INTERVAL_SECONDS ago",
)


@functools.cache  # bounded: podsweeper.auth.Refused's values
def auth_refusals(reason: str) -> Counter:
    return AUTH_REFUSALS.labels(reason)
