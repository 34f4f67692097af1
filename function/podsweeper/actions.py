"""Carrying out decisions: deletes (capped, dry-run aware) and the Events that record them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from podsweeper.cluster.base import Cluster
from podsweeper.config import Settings
from podsweeper.decisions import Action, Decision, Result
from podsweeper.errors import ApiUnavailable
from podsweeper.report import cleanup_event, warning_event


@dataclass(frozen=True)
class Applied:
    decision: Decision
    result: Result | None  # None for a skip


def carry_out(
    decisions: Iterable[Decision],
    cluster: Cluster,
    settings: Settings,
    now: datetime,
    on_applied: Callable[[Applied], None],
) -> None:
    """Act on decisions in order; each result is reported as soon as it is known.

    Deletes beyond PODSWEEPER_MAX_DELETES_PER_EVENT are DEFERRED (the next event or sweep
    decides them again from fresh state). Warnings are written even in dry-run: they
    change nothing but an Event.
    """
    budget = settings.max_deletes_per_event
    deleted_by_job: dict[tuple[str, str, str], list[Decision]] = defaultdict(list)
    try:
        for decision in decisions:
            result: Result | None = None
            if decision.action is Action.DELETE:
                if settings.dry_run:
                    result = Result.DRY_RUN
                elif budget <= 0:
                    result = Result.DEFERRED
                else:
                    budget -= 1
                    result = cluster.delete_pod(
                        decision.namespace, decision.name, decision.uid, decision.resource_version
                    )
                    if result is Result.DELETED:
                        deleted_by_job[decision.job.key].append(decision)
            elif decision.action is Action.WARN:
                written = cluster.record_event(warning_event(decision, now))
                result = Result.WARNED if written else Result.ALREADY_WARNED
            on_applied(Applied(decision, result))
    except ApiUnavailable:
        # The retry will not see the pods deleted so far: keep their evidence now if the
        # API lets us, then let the original failure through (503, the source retries).
        _record_cleanups(deleted_by_job, cluster, now, best_effort=True)
        raise
    _record_cleanups(deleted_by_job, cluster, now)


def _record_cleanups(
    deleted_by_job: dict[tuple[str, str, str], list[Decision]],
    cluster: Cluster,
    now: datetime,
    best_effort: bool = False,
) -> None:
    for deleted in deleted_by_job.values():
        try:
            cluster.record_event(cleanup_event(deleted[0].job, deleted, now))
        except ApiUnavailable:
            if not best_effort:
                raise
