"""Carrying out decisions: deletes (bounded, concurrent, dry-run aware) and the Events that
record them. The acting handle (podsweeper.actor) calls this and reports what it returns."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from datetime import datetime

from podsweeper.cluster.base import Cluster
from podsweeper.config import Settings
from podsweeper.decisions import Action, Decision, Result, Target
from podsweeper.errors import ApiUnavailable
from podsweeper.report import cleanup_event, job_delete_event, suspend_event, warning_event


@dataclass(frozen=True)
class Applied:
    decision: Decision
    result: Result | None  # None for a skip


@dataclass(frozen=True)
class Acted:
    """What one carry_out cost against a delete bound. A bound counts every DELETE request
    sent, whatever it answered (`deleted`, `gone`, `conflict`) or if it failed: counting only
    those that deleted would let a pass whose pods answer 404 or 409 send past its bound. A
    dry run's or a deferred decision sends nothing and counts toward none."""

    sent: int = 0
    deleted: int = 0


@dataclass
class Carried:
    """What carry_out did: each decision's Applied in the decisions' order (those decided
    before an API failure), the bound's count, and the failure that stopped it, if any: the
    caller reports what was done, then lets the failure go on (503: the source retries)."""

    applied: list[Applied] = field(default_factory=list)
    acted: Acted = field(default_factory=Acted)
    failure: ApiUnavailable | None = None


def dry_run(decision: Decision, settings: Settings) -> bool:
    """Whether a decision must change nothing: its namespace's policy says dry-run (or off), or,
    with no policy stamped, the global setting does. A global dry-run holds whatever a policy
    says unless the platform let namespaces lift it (PODSWEEPER_NAMESPACE_LIVE_ALLOWED): a
    second gate behind podsweeper.policy.resolve, the one place that lift is decided."""
    if settings.dry_run and not settings.namespace_live_allowed:
        return True
    return settings.dry_run if decision.policy is None else decision.policy.dry_run


def carry_out(
    decisions: Iterable[Decision],
    cluster: Cluster,
    settings: Settings,
    now: datetime,
    budget: int,
    executor: Executor | None = None,
) -> Carried:
    """Act on decisions; each result comes back in the decisions' order.

    At most `budget` DELETE requests are sent (each counts, whatever it answers); the rest are DEFERRED (the next event or sweep decides
    them again from fresh state). With an executor the deletes run concurrently (its worker
    count bounds how many are in flight). Warnings are written even in dry-run: they change
    nothing but an Event. If the API fails, every delete already made is still returned and
    recorded (best effort), with the failure (503: the source retries the event).
    """
    carried = Carried()
    pending: list[tuple[Decision, Result | None | Future[Result]]] = []
    failure: ApiUnavailable | None = None
    suspended: dict[tuple[str, str, str], Result] = {}  # one suspend per job, whatever its pods
    sent = 0
    for decision in decisions:
        outcome: Result | None | Future[Result] = None
        try:
            if decision.action in (Action.DELETE, Action.FORCE_DELETE):
                if dry_run(decision, settings):
                    outcome = Result.DRY_RUN
                elif budget <= 0:
                    outcome = Result.DEFERRED
                else:
                    budget -= 1
                    sent += 1  # counted before it is sent: one that fails counts too
                    if decision.target is Target.JOB:  # its Event first: the job's last word
                        cluster.record_event(job_delete_event(decision, now))
                    outcome = _delete(cluster, decision, executor)
            elif decision.action is Action.WARN:
                written = cluster.record_event(warning_event(decision, now))
                outcome = Result.WARNED if written else Result.ALREADY_WARNED
            elif decision.action is Action.SUSPEND:
                outcome = Result.DRY_RUN if dry_run(decision, settings) else suspended.get(decision.job.key)
                if outcome is None:
                    outcome = suspended[decision.job.key] = cluster.suspend_job(decision.job)
                    if outcome is Result.SUSPENDED:
                        cluster.record_event(suspend_event(decision, now))
        except ApiUnavailable as error:
            failure = error
            break
        pending.append((decision, outcome))
    deleted_by_job: dict[tuple[str, str, str], list[Decision]] = defaultdict(list)
    for decision, outcome in pending:
        if isinstance(outcome, Future):
            try:
                outcome = outcome.result()
            except ApiUnavailable as error:
                failure = failure or error
                continue  # the others still finish: their deletes must be reported
        if outcome is Result.DELETED and decision.target is not Target.JOB:  # its Event was before
            deleted_by_job[decision.job.key].append(decision)
        carried.applied.append(Applied(decision, outcome))
    carried.acted = Acted(sent, sum(len(deleted) for deleted in deleted_by_job.values()))
    carried.failure = failure
    # The retry will not see the pods deleted so far: record them even when the API failed
    # (then as best it can; the original failure is what goes on).
    try:
        _record_cleanups(deleted_by_job, cluster, now, best_effort=failure is not None)
    except ApiUnavailable as error:
        carried.failure = error
    return carried


def _delete(cluster: Cluster, decision: Decision, executor: Executor | None) -> Result | Future[Result]:
    """The delete itself (preconditions uid + resourceVersion), now or in the executor.

    A chain's JobSet or batch Job is deleted with its uid as precondition only: its status
    (and so its resourceVersion) changes with every pod, and the uid is what says "the one
    decided on"."""
    if decision.target is Target.INTERMEDIATE:
        assert decision.link is not None, "a decision about a JobSet or batch Job names its link"
        return cluster.delete_intermediate(decision.link, decision.namespace, decision.name, decision.uid)
    if decision.target is Target.JOB:
        # Only a rule whose entry names the Event of it (job_delete_event asked that already,
        # and the door refuses a job delete from any other), never forced, the uid the one
        # decided on; its chain goes by the garbage collector's hand.
        if decision.action is not Action.DELETE:
            raise ValueError(f"rule {decision.rule} would force-delete a {decision.kind}: no rule may")
        return cluster.delete_job(decision.job, decision.uid, decision.resource_version)
    if decision.target is not Target.POD:
        raise ValueError(f"rule {decision.rule} would delete a {decision.kind}: no rule may")
    args = (decision.namespace, decision.name, decision.uid, decision.resource_version)
    force = decision.action is Action.FORCE_DELETE
    if executor is None:
        return cluster.delete_pod(*args, force=force)
    return executor.submit(cluster.delete_pod, *args, force=force)


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
