"""Rule failed-mpijob-running: an MPIJob its operator marked Failed yet goes on running."""

from __future__ import annotations

from podsweeper.decisions import Action, Rule
from podsweeper.model import Job
from podsweeper.rules.base import Context, Finding, Listed, RuleSpec


def unsettled(listed: Listed, ctx: Context) -> bool:
    """A listed pod's job Failed without completionTime: its pass decides (the pods alone
    name nothing for a pod rule)."""
    return listed.pod is not None and listed.job is not None and listed.job.failed_unsettled_at is not None


def check(job: Job, ctx: Context) -> Finding | None:
    """An MPIJob (v2beta1) Failed without completionTime, which its operator goes on running:
    a worker evicted marks it Failed, but the launcher Job is still active, cleanPodPolicy is
    not applied, and deleted workers or launcher Jobs are re-created at once (mpi-operator#647,
    measured with v0.8.0). Only suspend stops it: the operator then deletes the workers and
    suspends the launcher Job. The operator's grace comes first (its launcher may still fail
    and settle the job, and then its cleanPodPolicy applies)."""
    since = job.failed_unsettled_at
    if since is None or job.suspended:
        return None
    if (ctx.now - since).total_seconds() < ctx.settings.operator_grace_seconds:
        return None
    reason = (
        f"{job.kind.kind} Failed ({job.failed_reason or 'no reason given'}) but without completionTime: "
        "its operator keeps running its launcher and re-creates any worker deleted (mpi-operator#647)"
    )
    return Finding(job, Action.SUSPEND, reason)


SPEC = RuleSpec(
    Rule.FAILED_MPIJOB_RUNNING,
    "an MPIJob `v2beta1` `Failed` without completionTime (a worker evicted: the operator keeps running it and "
    "re-creates whatever is deleted, kubeflow/mpi-operator#647) for `PODSWEEPER_OPERATOR_GRACE_SECONDS`",
    "suspend the MPIJob (`spec.runPolicy.suspend`); a warning for Kueue-queued jobs",
    frozenset({Action.SUSPEND}),
    wasted="not counted (the job's pods are decided by its operator once suspended)",
    settings=("PODSWEEPER_OPERATOR_GRACE_SECONDS",),
    warning_reason="FailedMPIJobStillRunning",
    suspend_reason="FailedMPIJobSuspended",
    for_kinds="mpi-operator",
    on_job=check,
    nominates=unsettled,
)
