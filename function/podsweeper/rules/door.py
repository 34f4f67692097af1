"""The one door every finding goes through on its way to a Decision.

Whatever the rule, the same safety is applied here, once: the engine's namespace gate (behind
the caller's, triage.in_scope), opt-out (the job's or the object's podsweeper.dev/skip), and
suspend-or-warn (a job Kueue or another managedBy controller owns is warned about, never
suspended). Dry-run, the delete bound, preconditions and evidence are the acting side's
(podsweeper.actions, podsweeper.keeper), also once for every decision.
"""

from __future__ import annotations

from podsweeper.config import Settings
from podsweeper.decisions import Action, Decision, Target
from podsweeper.model import Intermediate, Job, JobRef, Pod
from podsweeper.rules.base import Finding, RuleSpec

OPT_OUT_ANNOTATION = "podsweeper.dev/skip"


def _opted_out_by(about: Pod | Job | Intermediate, job: Job | None) -> str | None:
    """Who opted out: the job, or the object itself (a pod, a JobSet, a batch Job)."""
    if job is not None and job.opted_out:
        return "job"
    if isinstance(about, Pod) and about.opted_out:
        return "pod"
    if isinstance(about, Intermediate) and about.opted_out:
        return about.link.kind
    return None


def _suspend_or_warn(action: Action, reason: str, job: Job | None) -> tuple[Action, str]:
    """A suspend is only made where nobody else owns the switch (Kueue, managedBy)."""
    if action is not Action.SUSPEND:
        return action, reason
    if job is None:
        return Action.WARN, f"{reason}; not suspended: the job was not read"
    if job.suspend_blocked:
        return Action.WARN, f"{reason}; not suspended: {job.suspend_blocked}"
    switch = job.kind.suspend_field
    return action, f"{reason}; suspending the {job.kind.kind} ({switch}) stops it for good"


def decide(
    spec: RuleSpec, finding: Finding, job_ref: JobRef, job: Job | None, settings: Settings
) -> Decision | None:
    """The Decision for a finding; None outside the namespaces (a plain check: `python -O`
    strips asserts, and a raise would end a whole sweep for one object that slipped by).

    `job`: the training job as read now (None when gone), whose opt-out and suspend switch
    count; `job_ref`: the job the decision is filed under (its Events, its evidence).
    """
    about = finding.about
    if not settings.namespace_allowed(about.namespace):
        return None
    if finding.action not in spec.actions:
        raise ValueError(f"rule {spec.rule} found {finding.action}, which its entry does not name")
    if finding.action.deletes and isinstance(about, Job) and spec.job_delete_reason is None:
        raise ValueError(f"rule {spec.rule} would delete a training job, which its entry does not name")
    action, reason = _suspend_or_warn(finding.action, finding.reason, job)
    opted = _opted_out_by(about, job)
    if opted:
        action, reason = (
            Action.SKIP,
            f"opted out by {opted} annotation {OPT_OUT_ANNOTATION}; would {action.value}: {reason}",
        )
    gpu_names = settings.gpu_resource_names
    owner = tuple(sorted(job.labels.items())) if job is not None else ()
    if isinstance(about, Pod):
        return Decision(
            spec.rule,
            action,
            Target.POD,
            about.namespace,
            about.name,
            about.uid,
            reason,
            job_ref,
            evidence=tuple(c for c in about.containers if c.has_evidence),
            resource_version=about.resource_version,
            gpus=about.gpus(gpu_names),
            node=about.node,
            detail=finding.detail,
            wasted_since=finding.wasted_since,
            owner=owner,
        )
    held = finding.pods
    return Decision(
        spec.rule,
        action,
        Target.INTERMEDIATE if isinstance(about, Intermediate) else Target.JOB,
        about.namespace,
        about.name,
        about.uid,
        reason,
        job_ref,
        evidence=tuple(c for p in held for c in p.containers if c.has_evidence),
        gpus=sum(p.gpus(gpu_names) for p in held if p.active),
        # A job deleted itself (expired-trainjob) only as read: an opt-out added since is a 409.
        resource_version=about.resource_version if isinstance(about, Job) else "",
        detail=finding.detail,
        wasted_since=finding.wasted_since,
        link=about.link if isinstance(about, Intermediate) else None,
        owner=owner,
    )
