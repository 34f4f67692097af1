"""Rule clean-pod-policy-all: what cleanPodPolicy All promised, when the operator did not."""

from __future__ import annotations

from podsweeper.decisions import Action, Rule
from podsweeper.model import TERMINATED_PHASES, CleanPodPolicy, Job, Pod
from podsweeper.operator import operator_grace_left
from podsweeper.rules.base import Context, Finding, RuleSpec


def check(pod: Pod, job: Job | None, ctx: Context) -> Finding | None:
    if job is None or not job.finished or job.clean_pod_policy is not CleanPodPolicy.ALL:
        return None
    if pod.phase not in TERMINATED_PHASES:
        return None
    if operator_grace_left(pod, job, ctx.now, ctx.settings) is not None:
        return None  # the operator's own cleanup comes first
    return Finding(
        pod,
        Action.DELETE,
        f"job {job.finished} with cleanPodPolicy All; pod {pod.phase}",
        wasted_since=job.finished_at,
    )


SPEC = RuleSpec(
    Rule.CLEAN_POD_POLICY_ALL,
    "job finished; cleanPodPolicy `All`; pod `Succeeded`, `Failed` or `Unknown`",
    "delete, after the operator grace; the mpi-operator's launcher pod (through its finished batch Job) at "
    "once, since that operator never deletes it (kubeflow/mpi-operator#643)",
    frozenset({Action.DELETE}),
    wasted="since the job finished",
    settings=("PODSWEEPER_OPERATOR_GRACE_SECONDS",),
    on_pod=check,
)
