"""Rule unbounded-jobset-restarts: a new TrainJob whose JobSet restarts without any limit."""

from __future__ import annotations

from podsweeper.decisions import Action, Rule
from podsweeper.lineage import Lineage
from podsweeper.rules.base import Context, Finding, RuleSpec


def check(lineage: Lineage, ctx: Context) -> list[Finding]:
    job, jobset = lineage.job, lineage.live_jobset
    if job is None or jobset is None or job.finished or not jobset.unbounded_restart_actions:
        return []
    if job.active_deadline_seconds is not None:
        return []  # the deadline ends it
    reason = (
        f"its JobSet's failurePolicy uses {', '.join(jobset.unbounded_restart_actions)}: the failures "
        "those rules match restart the job without counting against maxRestarts, forever"
    )
    # A warning is about the TrainJob (the Event goes on it), like no-backoff-limit.
    return [Finding(job, Action.WARN, reason)]


SPEC = RuleSpec(
    Rule.UNBOUNDED_JOBSET_RESTARTS,
    "a new JobSet of a TrainJob restarts on some failures without a limit (`...AndIgnoreMaxRestarts`)",
    "Warning Event on the TrainJob",
    frozenset({Action.WARN}),
    wasted="nothing held yet (a warning on a new JobSet)",
    warning_reason="UnboundedJobSetRestarts",
    new_jobs_only=True,
    for_kinds="Trainer v2",
    on_chain=check,
)
