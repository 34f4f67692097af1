"""The decision engine: pure functions, objects in, decisions out.

No I/O and no clock: the caller passes fresh state and `now`. Each pass shape has one entry
point here (decide_pods, decide_job, decide_chain, decide_stuck), which walks the rules
registered for it (podsweeper.rules) and sends each finding through the one door
(podsweeper.rules.door) that applies the namespaces, opt-out and suspend-or-warn.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from podsweeper.config import Settings
from podsweeper.decisions import Decision
from podsweeper.lineage import Lineage
from podsweeper.model import Intermediate, Job, JobRef, Node, Owner, Pod
from podsweeper.ownership import controlled_by
from podsweeper.rules import (
    CHAIN_CHECKS,
    JOB_CHECKS,
    POD_CHECKS,
    STUCK_CHECKS,
    Context,
    Listed,
    Looks,
    nominating,
)
from podsweeper.rules.door import decide

# Pods a finished job may have beyond what it declares: leftovers of restarts and re-creations.
STRAGGLER_MARGIN = 0.1
MIN_STRAGGLERS = 2


def delete_bound(job: Job | None, settings: Settings) -> int:
    """How many pods one pass may delete.

    A job that still exists says how many pods it runs: its own event may clean all of them,
    plus a margin for stragglers (a 1,024-worker job is cleaned at once). What has no declared
    size (the orphans of a gone job) gets the fixed PODSWEEPER_MAX_DELETES_PER_EVENT.
    """
    if job is None:
        return settings.max_deletes_per_event
    declared = job.declared_replicas
    return declared + max(MIN_STRAGGLERS, int(declared * STRAGGLER_MARGIN))


def _owning_job(pod: Pod, job: Job | None) -> Job | None:
    """The job if it is the one the pod belongs to; None if that job is gone."""
    if job is None:
        return None
    if pod.job is not None and pod.job.uid and pod.job.uid != job.uid:
        return None  # same name, another job: the pod's own job was deleted
    return job


def launcher_links(pods: Iterable[Pod]) -> list[Owner]:
    """The batch Jobs a pass must read to tell whether these launcher pods are the job's."""
    return list(
        dict.fromkeys(
            p.batch_job
            for p in pods
            if p.batch_job is not None and p.job is not None and p.job.kind.launcher is not None
        )
    )


def proven_launchers(job: Job | None, links: Iterable[Intermediate]) -> frozenset[str]:
    """The uids of the batch Jobs, read now, that are this job's finished launcher Jobs: the
    job controls them (its uid), and they finished (the Job controller makes no new pod then).
    A launcher pod of an active Job is left alone: deleting it only makes the Job re-create it."""
    if job is None or job.kind.launches(job.ref.version) is None:
        return frozenset()
    return frozenset(
        link.uid
        for link in links
        if controlled_by(link.controller, job.kind.kind, job.uid)
        and link.finished is not None
        and not link.terminating
    )


def pod_is_candidate(pod: Pod, ref: JobRef, launchers: frozenset[str] | None = frozenset()) -> bool:
    """Safety gate: only a live pod of exactly this job (and so in the job's namespace), which
    the job controls itself (a chain's pods are decided at its JobSet, decide_chain), or a
    launcher pod whose batch Job was proven the job's (`launchers`; None: the sweep's listed
    state, where its pass proves it before anything is done)."""
    return (
        pod.job is not None
        and (pod.batch_job is None or launchers is None or pod.batch_job.uid in launchers)
        and ref.kind.chain is None
        and not pod.foreign_controller
        and not pod.terminating
        and pod.job.key == ref.key
    )


def decide_pods(
    ref: JobRef,
    job: Job | None,
    pods: Iterable[Pod],
    now: datetime,
    settings: Settings,
    launchers: frozenset[str] | None = frozenset(),
) -> list[Decision]:
    """Decisions for the pods of one job; `job` None means the job is known to be gone.

    `launchers`: the batch Jobs proven to be the job's launchers (proven_launchers); a launcher
    pod of any other Job is never decided. The first pod rule that names a pod decides for it.
    """
    ctx = Context(now, settings)
    decisions = []
    for pod in pods:
        if not pod_is_candidate(pod, ref, launchers):
            continue
        owner = _owning_job(pod, job)
        if owner is not None and owner.suspended:
            continue  # the operator removes a suspended job's pods itself
        # (a pod of an earlier job of the same name is an orphan, whatever the new job's state)
        for spec, check in POD_CHECKS:
            finding = check(pod, owner, ctx)
            if finding is None:
                continue
            job_ref = owner.ref if owner is not None else pod.job
            assert job_ref is not None, "a candidate pod always names its job"
            if (decision := decide(spec, finding, job_ref, owner, settings)) is not None:
                decisions.append(decision)
            break
    return decisions


def decide_job(
    job: Job, now: datetime, settings: Settings, new: bool = False, replaced: bool = False
) -> list[Decision]:
    """Decisions about a v1 job itself, read fresh; `new`: its pass is a new job's (the
    warnings only a new job gets); `replaced`: the job read is a same-named new one, not the
    one the pass is about, so only the new-job warnings are decided on it."""
    ctx = Context(now, settings)
    decisions = []
    for spec, check in JOB_CHECKS:
        if (spec.new_jobs_only and not new) or (replaced and not spec.new_jobs_only):
            continue
        finding = check(job, ctx)
        if finding is not None and (decision := decide(spec, finding, job.ref, job, settings)) is not None:
            decisions.append(decision)
    return decisions


def decide_chain(lineage: Lineage, now: datetime, settings: Settings, new: bool = False) -> list[Decision]:
    """Decisions for one chained job (TrainJob -> JobSet -> batch Job -> Pod), read fresh;
    `new`: the pass of a new JobSet (the warnings only a new one gets)."""
    ctx = Context(now, settings)
    decisions = []
    for spec, check in CHAIN_CHECKS:
        if spec.new_jobs_only and not new:
            continue
        for finding in check(lineage, ctx):
            decision = decide(spec, finding, lineage.filed_under, lineage.job, settings)
            if decision is not None:
                decisions.append(decision)
    return decisions


def decide_stuck(
    pod: Pod, node: Node | None, job: Job | None, now: datetime, settings: Settings
) -> list[Decision]:
    """Decisions for a pod stuck terminating, its node and its job read fresh by the sweep."""
    ctx = Context(now, settings)
    decisions = []
    job_ref = job.ref if job is not None else pod.job
    for spec, check in STUCK_CHECKS:
        finding = check(pod, node, job, ctx)
        decision = decide(spec, finding, job_ref, job, settings) if finding and job_ref else None
        if decision is not None:
            decisions.append(decision)
    return decisions


def nominated(looks: Looks, listed: Listed, now: datetime, settings: Settings) -> bool:
    """Whether a rule of this pass shape, from what the sweep listed, calls for the pass."""
    ctx = Context(now, settings)
    return any(hook(listed, ctx) for _spec, hook in nominating(looks))
