"""Rule orphan: what a gone job left behind.

v1: a pod whose job no longer exists (or is a new job of the same name), past the grace.
Trainer v2: a JobSet whose TrainJob is gone, or batch Jobs whose JobSet is gone: an object is
ours only when its controller chain reaches a TrainJob, or, once orphaned, when it carries the
mark Trainer's runtimes put on every replicated Job: a plain JobSet or batch Job is never named.
"""

from __future__ import annotations

from datetime import datetime

from podsweeper.decisions import Action, Rule
from podsweeper.lineage import Lineage
from podsweeper.model import Intermediate, Job, Pod
from podsweeper.rules.base import Context, Finding, Listed, RuleSpec


def _age_seconds(created: datetime | None, now: datetime) -> float | None:
    return None if created is None else (now - created).total_seconds()


def check_pod(pod: Pod, job: Job | None, ctx: Context) -> Finding | None:
    if job is not None or pod.job is None:
        return None
    age = _age_seconds(pod.created, ctx.now)
    grace = ctx.settings.orphan_grace_seconds
    if age is None or age < grace:
        return None  # too young (or age unknown): the job may just be being re-created
    return Finding(
        pod,
        Action.DELETE,
        f"job {pod.job.kind.kind}/{pod.job.name} no longer exists; pod is {age:.0f}s old (grace {grace}s)",
    )


def _orphaned(intermediate: Intermediate, parent_kind: str, parent_uid: str | None, lineage: Lineage) -> bool:
    """Not controlled by the existing parent, yet provably made for a TrainJob: controlled by
    a TrainJob that is gone, or carrying Trainer's mark (the only proof once orphaned)."""
    if intermediate.terminating or lineage.owns(intermediate, parent_kind, parent_uid):
        return False
    controller = intermediate.controller
    if controller is not None and controller.kind != parent_kind:
        return False  # another controller's: never ours
    by_trainjob = controller is not None and controller.kind == lineage.ref.kind.kind
    return by_trainjob or intermediate.marked(lineage.chain.marker_label)


def check_chain(lineage: Lineage, ctx: Context) -> list[Finding]:
    """A JobSet whose TrainJob is gone, or batch Jobs whose JobSet is gone, past the grace."""
    findings = []
    grace = ctx.settings.orphan_grace_seconds
    job, jobset = lineage.job, lineage.jobset
    jobset_kind, batch_job_kind = lineage.chain.links[0], lineage.chain.links[-1]
    jobset_orphaned = jobset is not None and _orphaned(
        jobset, lineage.ref.kind.kind, job.uid if job else None, lineage
    )
    if jobset is not None and jobset_orphaned:
        age = _age_seconds(jobset.created, ctx.now)
        if age is not None and age >= grace:
            pods = tuple(p for p in lineage.pods if p.labels.get(lineage.chain.uid_label) == jobset.uid)
            gone = "no longer exists" if job is None else f"(uid {job.uid}) does not control it"
            reason = (
                f"{jobset_kind.kind} {jobset.name} was made for TrainJob {lineage.ref.name}, which {gone}; "
                f"{jobset_kind.kind} is {age:.0f}s old (grace {grace}s); deleting it (background) removes "
                "its Jobs and pods"
            )
            findings.append(Finding(jobset, Action.DELETE, reason, pods))
    parent_uid = None if jobset is None or jobset.terminating else jobset.uid
    for batch_job in lineage.batch_jobs:
        if batch_job.labels.get(lineage.chain.name_label) != lineage.ref.name:
            continue
        if jobset is not None and jobset_orphaned and lineage.owns(batch_job, jobset_kind.kind, jobset.uid):
            continue  # goes with its orphaned JobSet
        if not _orphaned(batch_job, jobset_kind.kind, parent_uid, lineage):
            continue
        age = _age_seconds(batch_job.created, ctx.now)
        if age is None or age < grace:
            continue
        pods = tuple(p for p in lineage.pods if p.batch_job is not None and p.batch_job.uid == batch_job.uid)
        reason = (
            f"{batch_job_kind.kind} {batch_job.name} was made by {jobset_kind.kind} {lineage.ref.name} for a TrainJob, "
            f"and no such {jobset_kind.kind} controls it now; {age:.0f}s old (grace {grace}s); deleting it "
            "(background) removes its pods"
        )
        findings.append(Finding(batch_job, Action.DELETE, reason, pods))
    return findings


def unowned(listed: Listed, ctx: Context) -> bool:
    """A chain's JobSet or batch Job, as listed, that its parent does not control: its job's
    pass reads whether it is orphaned (a v1 pod is nominated by check_pod itself)."""
    return listed.link is not None and not listed.owned


SPEC = RuleSpec(
    Rule.ORPHAN,
    "the pod's job is gone (404, or re-created with another uid); the pod is at least "
    "`PODSWEEPER_ORPHAN_GRACE_SECONDS` (30) old. Trainer v2: a JobSet whose TrainJob is gone, or batch Jobs "
    "whose JobSet is gone, made for a TrainJob (Trainer's mark), older than the orphan grace",
    "delete the pod; Trainer v2: delete that JobSet / Job (background), and with it its pods; a plain "
    "JobSet or Job is never touched",
    frozenset({Action.DELETE}),
    wasted="unknown (when the job vanished is recorded nowhere): no GPU-seconds counted",
    settings=("PODSWEEPER_ORPHAN_GRACE_SECONDS",),
    for_kinds="v1 and Trainer v2",
    on_pod=check_pod,
    on_chain=check_chain,
    nominates=unowned,
)
