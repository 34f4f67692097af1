"""Rule finished-trainjob-restarted: a TrainJob that had finished runs a JobSet made after.

Trainer v2.3.0 makes a new JobSet for a Failed TrainJob whose JobSet went (its TTL, or any
delete) and removes the Failed condition, forever (kubeflow/trainer#3779, #3737; before v2.2.0
a Complete one too, #2981). Deleting that JobSet only gets it made again within ~20 ms,
suspending the JobSet is undone by Trainer within ~0.1 s: only the TrainJob's own spec.suspend
stops it (measured). What says it had finished is its condition if still there, else
podsweeper's own record of the finish (FinishMark). A JobSet suspended and resumed since is one
a person chose to run again (spec.suspend false on the TrainJob).
"""

from __future__ import annotations

from datetime import datetime

from podsweeper.decisions import Action, Rule
from podsweeper.lineage import Lineage, made_again
from podsweeper.model import Intermediate
from podsweeper.rules.base import Context, Finding, Listed, RuleSpec


def _after(jobset: Intermediate, since: datetime | None, strictly: bool = False) -> bool:
    if since is None or jobset.created is None:
        return False
    return jobset.created > since if strictly else jobset.created >= since


def listed_again(listed: Listed, ctx: Context) -> bool:
    """A TrainJob's own JobSet, as listed, made after its first: its pass reads the chain."""
    return listed.job is not None and listed.jobset is not None and made_again(listed.job, listed.jobset)


def check(lineage: Lineage, ctx: Context) -> list[Finding]:
    job, jobset = lineage.job, lineage.live_jobset
    if job is None or jobset is None or job.suspended or jobset.suspended:
        return []
    if jobset.resumed:
        return []  # suspended, then resumed by a person (spec.suspend false): let it run
    mark = lineage.finish_mark
    if mark is not None:
        # A record of the finish the job still shows is read as that finish is: a JobSet made
        # after it, strictly (one made in the same second may be the one it finished with). A
        # record of an erased finish names the moment from which a JobSet is a new one.
        shown = job.finished is not None and mark.at == job.finished_at
        restarted = jobset.uid != mark.top_uid if mark.top_uid else _after(jobset, mark.at, strictly=shown)
        # The record is a ConfigMap: whoever may create one in the namespace could plant it. A
        # restart is believed only of a JobSet made again (the job's first never was one).
        restarted = restarted and made_again(job, jobset)
        finished, since = mark.condition, mark.at
    elif job.finished is not None:
        restarted, finished, since = (
            _after(jobset, job.finished_at, strictly=True),
            job.finished,
            job.finished_at,
        )
    else:
        return []
    if not restarted:
        return []
    when = f" at {since.isoformat()}" if since else ""
    reason = (
        f"TrainJob finished ({finished}{when}) and then got a new JobSet {jobset.name} (uid {jobset.uid}): "
        "training started again for a finished job"
    )
    return [
        Finding(job, Action.SUSPEND, reason, tuple(lineage.active_pods(jobset)), wasted_since=jobset.created)
    ]


SPEC = RuleSpec(
    Rule.FINISHED_TRAINJOB_RESTARTED,
    "a TrainJob that had finished runs a JobSet made after the finish (Trainer v2.3.0 restarts a Failed "
    "TrainJob whose JobSet went)",
    "suspend the TrainJob (`spec.suspend`); a warning for Kueue-queued jobs",
    frozenset({Action.SUSPEND}),
    wasted="since the new JobSet was made",
    warning_reason="TrainJobRestartedAfterFinish",
    suspend_reason="RestartedTrainJobSuspended",
    for_kinds="Trainer v2",
    on_chain=check,
    nominates=listed_again,
)
