"""Rule expired-trainjob (opt-in): a finished TrainJob kept past its retention.

Trainer v2.3.0 has no ttlSecondsAfterFinished (kubeflow/trainer#4052 plans one): a finished
TrainJob keeps its JobSet and Jobs, a Complete one its pods too, until someone deletes it
(measured; tests/support/world/README.md). This rule deletes the TrainJob itself, background
propagation with its uid as precondition: the garbage collector then takes the chain (measured
~0.1 s), and nothing re-creates it. Its evidence is first copied apart from it (the job's own
store goes with it): `podsweeper evidence` still reads it.

Off unless the platform sets PODSWEEPER_TRAINJOB_TTL_SECONDS. The TTL counts from the finish
condition's lastTransitionTime. A namespace may set its own (podsweeper.policy), a job may only
shorten it, never below PODSWEEPER_TRAINJOB_TTL_MIN_SECONDS, or opt out. Never deleted: a job
not finished, suspended, managed by another controller (spec.managedBy: MultiKueue), owned by
another object (an OptimizationJob's trial), one that sets Trainer's own
ttlSecondsAfterFinished (a Trainer that serves the field decides), one running a JobSet made
after its finish (restarted: finished-trainjob-restarted's to stop), or with a pod still
running.
"""

from __future__ import annotations

from datetime import datetime

from podsweeper.config import Settings
from podsweeper.decisions import Action, Rule
from podsweeper.lineage import Lineage
from podsweeper.model import TTL_ANNOTATION, Job
from podsweeper.rules.base import Context, Finding, Listed, RuleSpec

OFF = "off"
_MAX_DIGITS = 9


def ttl_of(job: Job, settings: Settings) -> tuple[int | None, str]:
    """The retention in force for this job, in seconds (None: none), and where it came from.

    `settings` are its namespace's (a namespace's podsweeper.dev/trainjob-ttl-seconds is in
    them). The job's annotation may only shorten it, down to the floor (and never to 0), or turn
    it off. An annotation not understood keeps the job (its owner asked for something: a guess
    that deletes is the one that cannot be taken back)."""
    ttl = settings.trainjob_ttl_seconds
    if ttl <= 0:
        return None, "off"
    asked = (job.ttl_asked or "").strip()
    if not asked:
        return ttl, "PODSWEEPER_TRAINJOB_TTL_SECONDS or its namespace's"
    if asked.lower() == OFF:
        return None, f"opted out by annotation {TTL_ANNOTATION}"
    if not asked.isascii() or not asked.isdigit() or len(asked) > _MAX_DIGITS:
        return None, f"annotation {TTL_ANNOTATION} {asked[:32]!r} is not off or seconds: kept"
    floor = max(settings.trainjob_ttl_min_seconds, 1)
    seconds = max(int(asked), floor)
    if seconds >= ttl:
        return ttl, f"annotation {TTL_ANNOTATION} may only shorten it"
    return seconds, f"annotation {TTL_ANNOTATION} (not below {floor}s)"


def _decided_by_others(job: Job) -> str | None:
    """Why this job's life is not podsweeper's to end, if so."""
    if job.suspended:
        return "suspended"
    if job.managed_by not in (None, "", job.kind.managed_by):
        return f"spec.managedBy is {job.managed_by!r}"
    if job.owned_by is not None:
        return f"owned by {job.owned_by}"
    if job.sets_own_ttl:
        return "it sets Trainer's own ttlSecondsAfterFinished"
    return None


def _expired(job: Job, ctx: Context) -> tuple[int, float, str] | None:
    """(TTL, seconds since the finish, where the TTL came from) of a finished job past it."""
    if job.finished is None or job.finished_at is None:
        return None
    ttl, source = ttl_of(job, ctx.settings)
    if ttl is None or _decided_by_others(job) is not None:
        return None
    waited = (ctx.now - job.finished_at).total_seconds()
    return (ttl, waited, source) if waited >= ttl else None


def listed_expired(listed: Listed, ctx: Context) -> bool:
    """A TrainJob, as listed, finished longer ago than the shortest TTL anything may set: its
    pass reads the chain (and its namespace's TTL) before anything is decided."""
    job = listed.job
    if job is None or listed.link is not None or listed.pod is not None:
        return False
    if ctx.settings.trainjob_ttl_seconds <= 0 or job.finished is None or job.finished_at is None:
        return False
    shortest = min(ctx.settings.trainjob_ttl_seconds, max(ctx.settings.trainjob_ttl_min_seconds, 1))
    return (ctx.now - job.finished_at).total_seconds() >= shortest and _decided_by_others(job) is None


def _made_after(created: datetime | None, finished_at: datetime) -> bool:
    return created is not None and created > finished_at


def check(lineage: Lineage, ctx: Context) -> list[Finding]:
    job = lineage.job
    if job is None:
        return []
    expired = _expired(job, ctx)
    if expired is None:
        return []
    assert job.finished_at is not None
    jobset = lineage.live_jobset
    if jobset is not None and _made_after(jobset.created, job.finished_at):
        return []  # a JobSet made after the finish: restarted, not retained (the restart rule's)
    mark = lineage.finish_mark
    if jobset is not None and mark is not None and mark.top_uid and mark.top_uid != jobset.uid:
        return []  # not the JobSet it finished with
    if any(p.active and not p.terminating for p in lineage.pods):
        return []  # something of it still runs: never ended by a retention
    ttl, waited, source = expired
    reason = (
        f"TrainJob {job.finished} at {job.finished_at.isoformat()}, {waited:.0f}s ago: past its retention "
        f"of {ttl}s ({source}); its JobSet, Jobs and pods go with it"
    )
    return [Finding(job, Action.DELETE, reason)]


SPEC = RuleSpec(
    Rule.EXPIRED_TRAINJOB,
    "a TrainJob finished (`Complete` or `Failed`) longer ago than `PODSWEEPER_TRAINJOB_TTL_SECONDS` (its "
    "namespace's `podsweeper.dev/trainjob-ttl-seconds`, shortened by its own "
    "`podsweeper.dev/ttl-seconds-after-finished`); never one suspended, managed by another controller, "
    "owned by another object, setting Trainer's own `ttlSecondsAfterFinished`, restarted after the finish, "
    "or with a pod running",
    "delete the TrainJob (background propagation, uid precondition; its JobSet, Jobs and pods go with it), "
    "after copying its evidence apart; a `TrainJobExpired` Event first",
    frozenset({Action.DELETE}),
    wasted="nothing (a finished job holds no GPU; what it keeps is API objects)",
    settings=("PODSWEEPER_TRAINJOB_TTL_SECONDS", "PODSWEEPER_TRAINJOB_TTL_MIN_SECONDS"),
    opt_in=True,
    for_kinds="Trainer v2",
    job_delete_reason="TrainJobExpired",
    on_chain=check,
    nominates=listed_expired,
)
