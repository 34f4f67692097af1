"""Rule crash-loop: a pod crash-looping in a job nothing will ever stop."""

from __future__ import annotations

from podsweeper.config import CrashLoopAction
from podsweeper.decisions import Action, Rule
from podsweeper.model import Job, Pod
from podsweeper.rules.base import Context, Finding, RuleSpec

CHOSEN = {
    CrashLoopAction.WARN: Action.WARN,
    CrashLoopAction.SUSPEND: Action.SUSPEND,
    CrashLoopAction.DELETE: Action.DELETE,
}


def check(pod: Pod, job: Job | None, ctx: Context) -> Finding | None:
    if job is None or job.finished or not job.restarts_unbounded:
        return None
    restarts = pod.max_crash_loop_restarts()
    if restarts < ctx.settings.crashloop_restarts:
        return None
    reason = (
        f"CrashLoopBackOff with {restarts} restarts and the job has neither "
        "backoffLimit nor activeDeadlineSeconds: it would restart forever"
    )
    # An upper bound on the waste: when the first crash came is not recorded.
    return Finding(pod, CHOSEN[ctx.settings.crashloop_action], reason, wasted_since=pod.started)


SPEC = RuleSpec(
    Rule.CRASH_LOOP,
    "job not finished; a container in `CrashLoopBackOff` with `restartCount >= PODSWEEPER_CRASHLOOP_RESTARTS` "
    "(5); no `backoffLimit`, no `activeDeadlineSeconds`",
    "Warning Event on the job, again only when restarts grew (default); or suspend the job (opt-in: the "
    "operator then removes its pods); or delete the pod",
    frozenset({Action.WARN, Action.SUSPEND, Action.DELETE}),
    wasted="since the pod started (an upper bound)",
    settings=("PODSWEEPER_CRASHLOOP_RESTARTS", "PODSWEEPER_CRASHLOOP_ACTION"),
    warning_reason="CrashLoopWithoutLimit",
    suspend_reason="CrashLoopSuspended",
    on_pod=check,
)
