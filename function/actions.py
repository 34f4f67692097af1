"""Carrying out decisions: deletes (capped, dry-run aware) and the Events that record them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from function.cluster.base import Cluster, DeleteResult
from function.config import Settings
from function.decisions import Action, Decision
from function.errors import ApiUnavailable
from function.report import cleanup_event, warning_event

WARNED = "warned"


@dataclass(frozen=True)
class Applied:
    decision: Decision
    result: str | None  # a DeleteResult value, "warned", or None for a skip


def carry_out(
    decisions: Iterable[Decision],
    cluster: Cluster,
    settings: Settings,
    now: datetime,
    on_applied: Callable[[Applied], None],
) -> list[Applied]:
    """Act on decisions in order; each result is reported as soon as it is known.

    Deletes beyond PODSWEEPER_MAX_DELETES_PER_EVENT are DEFERRED (the next event or sweep
    decides them again from fresh state). Warnings are written even in dry-run: they
    change nothing but an Event.
    """
    budget = settings.max_deletes_per_event
    applied: list[Applied] = []
    deleted_by_job: dict[tuple, list[Decision]] = defaultdict(list)
    try:
        for decision in decisions:
            result: str | None = None
            if decision.action is Action.DELETE:
                if settings.dry_run:
                    result = DeleteResult.DRY_RUN.value
                elif budget <= 0:
                    result = DeleteResult.DEFERRED.value
                else:
                    budget -= 1
                    result = cluster.delete_pod(decision.namespace, decision.name, decision.uid,
                                                decision.resource_version).value
                    if result == DeleteResult.DELETED.value:
                        deleted_by_job[decision.job.key].append(decision)
            elif decision.action is Action.WARN:
                cluster.record_event(warning_event(decision, now))
                result = WARNED
            item = Applied(decision, result)
            applied.append(item)
            on_applied(item)
    except ApiUnavailable:
        # The retry will not see the pods deleted so far: keep their evidence now if the
        # API lets us, then let the original failure through (503, the source retries).
        _record_cleanups(deleted_by_job, cluster, now, best_effort=True)
        raise
    _record_cleanups(deleted_by_job, cluster, now)
    return applied


def _record_cleanups(deleted_by_job: dict[tuple, list[Decision]], cluster: Cluster, now: datetime,
                     best_effort: bool = False) -> None:
    for deleted in deleted_by_job.values():
        try:
            cluster.record_event(cleanup_event(deleted[0].job, deleted, now))
        except ApiUnavailable:
            if not best_effort:
                raise
