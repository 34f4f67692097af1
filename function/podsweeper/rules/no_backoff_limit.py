"""Rule no-backoff-limit: a new job whose failed replicas would restart forever."""

from __future__ import annotations

from podsweeper.decisions import Action, Rule
from podsweeper.model import Job
from podsweeper.rules.base import Context, Finding, RuleSpec

# restartPolicy values under which a failed replica is restarted in place.
RESTARTING_POLICIES = frozenset({"OnFailure", "Always", "ExitCode"})


def unbounded_restart_replicas(job: Job) -> tuple[str, ...]:
    """Replica types whose failed pods restart in place with no backoffLimit to stop them."""
    if job.backoff_limit is not None:
        return ()
    return tuple(sorted(r for r, policy in job.restart_policies if policy in RESTARTING_POLICIES))


def check(job: Job, ctx: Context) -> Finding | None:
    restarting = unbounded_restart_replicas(job)
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
