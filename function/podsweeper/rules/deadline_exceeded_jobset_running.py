"""Rule deadline-exceeded-jobset-running: a TrainJob Failed at its deadline whose JobSet runs on.

Trainer v2.3.0 marks a TrainJob whose activeDeadlineSeconds expired Failed (DeadlineExceeded)
and deletes its JobSet once: if that DELETE fails, it only logs it, and never tries again (the
job is finished for every later reconcile), so the JobSet and its GPU pods run on
(kubeflow/trainer#3833, reproduced against the real controllers). Deleting the JobSet is what
Trainer meant to do, and it sticks: DeadlineExceeded is the one Failed reason Trainer keeps, so
unlike a TrainJob failed at its backoffLimit (kubeflow/trainer#3891) no JobSet is made again;
suspending the TrainJob does not stop it (measured). Trainer's own delete comes first: the
rule waits PODSWEEPER_OPERATOR_GRACE_SECONDS after the deadline.
"""

from __future__ import annotations

from podsweeper.decisions import Action, Rule
from podsweeper.lineage import Lineage
from podsweeper.rules.base import Context, Finding, Listed, RuleSpec

# The Failed reason Trainer writes at the deadline, and keeps.
DEADLINE_EXCEEDED = "DeadlineExceeded"


def runs_on(listed: Listed, ctx: Context) -> bool:
    """A finished TrainJob whose own JobSet, as listed, has not ended (nor is being stopped):
    its pass reads the pods (Trainer may have failed to delete it)."""
    job, jobset = listed.job, listed.jobset
    if job is None or jobset is None:
        return False
    return (
        job.finished is not None
        and jobset.finished is None
        and not jobset.suspended
        and not jobset.terminating
    )


def check(lineage: Lineage, ctx: Context) -> list[Finding]:
    job, jobset = lineage.job, lineage.live_jobset
    if job is None or jobset is None or job.failed_reason != DEADLINE_EXCEEDED:
        return []
    if job.finished != job.kind.finished_conditions[-1] or job.finished_at is None:
        return []
    if jobset.finished or jobset.suspended:
        return []  # it ended (or is being stopped) on its own
    if jobset.created is None or jobset.created > job.finished_at:
        return []  # made after the finish: finished-trainjob-restarted's, not Trainer's leftover
    waited = (ctx.now - job.finished_at).total_seconds()
    if waited < ctx.settings.operator_grace_seconds:
        return []  # Trainer deletes it itself within milliseconds, when its delete goes through
    active = lineage.active_pods(jobset)
    if not active:
        return []
    reason = (
        f"TrainJob Failed ({DEADLINE_EXCEEDED}) {waited:.0f}s ago, yet its JobSet {jobset.name} runs "
        f"{len(active)} pod(s): Trainer deletes it once at the deadline and never again "
        "(kubeflow/trainer#3833); deleting it (background) removes its Jobs and pods"
    )
    pods = tuple(p for p in lineage.pods if p.labels.get(lineage.chain.uid_label) == jobset.uid)
    return [Finding(jobset, Action.DELETE, reason, pods, wasted_since=job.finished_at)]


SPEC = RuleSpec(
    Rule.DEADLINE_EXCEEDED_JOBSET_RUNNING,
    "a TrainJob `Failed` with reason `DeadlineExceeded` for `PODSWEEPER_OPERATOR_GRACE_SECONDS` whose own "
    "JobSet (made before the deadline, not ended, not suspended) still runs pods under its own Jobs "
    "(Trainer's one delete "
    "failed, kubeflow/trainer#3833)",
    "delete that JobSet (background, uid precondition), and with it its Jobs and pods, as Trainer meant to",
    frozenset({Action.DELETE}),
    wasted="since the deadline",
    settings=("PODSWEEPER_OPERATOR_GRACE_SECONDS",),
    for_kinds="Trainer v2",
    on_chain=check,
    nominates=runs_on,
)
