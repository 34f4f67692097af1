"""Rule finished-trainjob-podgroup: a finished TrainJob's Volcano PodGroup, which nobody deletes.

Trainer v2.3.0's volcano plugin (runtime `podGroupPolicy.volcano`) makes one PodGroup per
TrainJob, under the job's name and controlled by it, and builds it only while the job has not
finished: once the job is Complete or Failed nothing touches it again, and it goes only with
the TrainJob. Volcano's queue meanwhile keeps reserving its `minResources`, so the next gang
of that queue waits for capacity nothing uses (kubeflow/trainer#4033; the v1 training operator
deletes a finished job's PodGroup itself). The operator grace comes first: a Trainer that
cleans it up (kubeflow/trainer#4059, a draft) does so at once. A suspended job is left alone:
Trainer builds its PodGroup again on its next reconcile, and Kueue decides when it runs.
"""

from __future__ import annotations

from podsweeper.decisions import Action, Rule
from podsweeper.lineage import Lineage
from podsweeper.rules.base import Context, Finding, Listed, RuleSpec


def finished_owner(listed: Listed, ctx: Context) -> bool:
    """A PodGroup, as listed, that a finished TrainJob controls: its pass reads it again."""
    job, link = listed.job, listed.link
    return (
        job is not None
        and link is not None
        and listed.owned
        and job.kind.chain is not None
        and link.link in job.kind.chain.companions
        and job.finished is not None
    )


def check(lineage: Lineage, ctx: Context) -> list[Finding]:
    job = lineage.job
    if job is None or job.finished is None or job.finished_at is None:
        return []
    waited = (ctx.now - job.finished_at).total_seconds()
    if waited < ctx.settings.operator_grace_seconds:
        return []  # a Trainer that deletes it itself does so at the finish
    return [
        Finding(
            group,
            Action.DELETE,
            f"TrainJob {job.finished} {waited:.0f}s ago and its {group.link.kind} {group.name} is still "
            f"there: Trainer never deletes it (kubeflow/trainer#4033) and Volcano's queue keeps "
            "reserving its minResources for a job that will run no pod again",
            wasted_since=job.finished_at,
        )
        for group in lineage.own_companions
    ]


SPEC = RuleSpec(
    Rule.FINISHED_TRAINJOB_PODGROUP,
    "a TrainJob `Complete` or `Failed` for `PODSWEEPER_OPERATOR_GRACE_SECONDS` whose Volcano PodGroup "
    "(its name, controlled by it) is still there: Trainer v2.3.0 never deletes it, and Volcano's queue "
    "keeps reserving its minResources (kubeflow/trainer#4033)",
    "delete that PodGroup (uid precondition); never a running or suspended job's, another controller's, "
    "or a plain Volcano Job's",
    frozenset({Action.DELETE}),
    wasted="since the finish (the queue's reserved capacity; no pod of it runs)",
    settings=("PODSWEEPER_OPERATOR_GRACE_SECONDS",),
    for_kinds="Trainer v2 with Volcano",
    on_chain=check,
    nominates=finished_owner,
)
