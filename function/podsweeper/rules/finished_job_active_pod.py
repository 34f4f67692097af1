"""Rule finished-job-active-pod: a finished v1 job's pod still Pending or Running."""

from __future__ import annotations

from podsweeper.decisions import Action, Rule
from podsweeper.model import Job, Pod
from podsweeper.operator import operator_grace_left
from podsweeper.rules.base import Context, Finding, RuleSpec


def check(pod: Pod, job: Job | None, ctx: Context) -> Finding | None:
    if job is None or not job.finished or not pod.active or not ctx.settings.sweep_active_pods:
        return None
    if operator_grace_left(pod, job, ctx.now, ctx.settings) is not None:
        return None  # the operator's own cleanup comes first
    looping = pod.max_crash_loop_restarts()
    detail = f", crash-looping with {looping} restarts" if looping else ""
    return Finding(
        pod,
        Action.DELETE,
        f"job {job.finished}; pod still {pod.phase}{detail} (cleanPodPolicy {job.clean_pod_policy})",
        wasted_since=job.finished_at,
    )


SPEC = RuleSpec(
    Rule.FINISHED_JOB_ACTIVE_POD,
    'job finished (`Succeeded` or `Failed` condition `"True"`); pod `Pending` or `Running` (crash-looping '
    "pods are `Running`)",
    "delete, under every cleanPodPolicy; under `Running`/`All` only after the operator's own cleanup had "
    "`PODSWEEPER_OPERATOR_GRACE_SECONDS` (30)",
    frozenset({Action.DELETE}),
    wasted="since the job finished",
    settings=("PODSWEEPER_SWEEP_ACTIVE_PODS", "PODSWEEPER_OPERATOR_GRACE_SECONDS"),
    on_pod=check,
)
