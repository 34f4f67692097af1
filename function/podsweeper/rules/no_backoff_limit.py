"""Rule no-backoff-limit: a new job whose failed replicas would restart forever."""

from __future__ import annotations

from podsweeper.decisions import Action, Rule
from podsweeper.model import Job
from podsweeper.rules.base import Context, Finding, RuleSpec


def check(job: Job, ctx: Context) -> Finding | None:
    restarting = job.replicas_restarting_forever
    if not restarting:
        return None
    reason = (
        f"replicas {', '.join(restarting)} restart on failure and no backoffLimit is set: "
        "failed workers would restart forever (backoffLimit: 0 recommended)"
    )
    return Finding(job, Action.WARN, reason)


SPEC = RuleSpec(
    Rule.NO_BACKOFF_LIMIT,
    "a job is added with a replica restarting `OnFailure`, `Always` or `ExitCode` and no `backoffLimit`",
    "Warning Event on the job; never a delete",
    frozenset({Action.WARN}),
    wasted="nothing held yet (a warning on a new job)",
    warning_reason="NoBackoffLimit",
    new_jobs_only=True,
    on_job=check,
)
