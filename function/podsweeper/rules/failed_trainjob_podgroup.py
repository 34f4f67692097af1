"""Rule failed-trainjob-podgroup: a Failed TrainJob whose Volcano PodGroup its queue goes on reserving.

Trainer v2.3.0's volcano plugin (runtime `podGroupPolicy.volcano`) makes one PodGroup per
TrainJob, named like it and controlled by it. Once the TrainJob is Failed its pods are gone,
and Volcano moves the PodGroup back to Inqueue, where its queue reserves its `minResources`:
the next gang of the queue that needs them stays Pending (kubeflow/trainer#4033). Deleting the
PodGroup does not last: Trainer drops a Failed condition at the start of every reconcile and
builds the job's objects again, so the PodGroup is back within milliseconds (measured, 3-91 ms).
A Complete TrainJob's PodGroup is `Completed` and reserves nothing. What frees the capacity is
deleting the TrainJob (its PodGroup goes with it), which only its owner decides: this rule says
so, on the TrainJob, after the operator grace.
"""

from __future__ import annotations

from podsweeper.decisions import Action, Rule
from podsweeper.lineage import Lineage
from podsweeper.rules.base import Context, Finding, Listed, RuleSpec

RESERVING = "Inqueue"  # the PodGroup phase whose minResources Volcano's enqueue counts as taken


def failed_owner(listed: Listed, ctx: Context) -> bool:
    """A PodGroup, as listed, Inqueue and controlled by a Failed TrainJob: its pass reads both."""
    job, link = listed.job, listed.link
    return (
        job is not None
        and link is not None
        and listed.owned
        and job.kind.chain is not None
        and link.link in job.kind.chain.companions
        and link.phase == RESERVING
        and job.finished == job.kind.finished_conditions[-1]
    )


def check(lineage: Lineage, ctx: Context) -> list[Finding]:
    job = lineage.job
    if job is None or job.finished != job.kind.finished_conditions[-1] or job.finished_at is None:
        return []
    if job.suspended:
        return []  # held on purpose (Kueue, a person): its place in the queue is theirs to keep
    waited = (ctx.now - job.finished_at).total_seconds()
    if waited < ctx.settings.operator_grace_seconds:
        return []  # a Trainer that cleans it up itself (kubeflow/trainer#4059) does so at the finish
    findings = []
    for group in lineage.own_companions:
        if group.phase != RESERVING:
            continue
        reserved = ", ".join(f"{name} {quantity}" for name, quantity in group.reserves) or "its minMember"
        queue = group.queue or "default"
        reason = (
            f"TrainJob Failed {waited:.0f}s ago, yet its {group.link.kind} {group.name} is {RESERVING}: "
            f"Volcano queue {queue} reserves {reserved} for it, and the next gang that needs them waits "
            "(kubeflow/trainer#4033). Trainer makes the PodGroup again if it is deleted; deleting the "
            "TrainJob frees it"
        )
        # A warning is about the TrainJob (the Event goes on it), like no-backoff-limit.
        findings.append(Finding(job, Action.WARN, reason, wasted_since=job.finished_at))
    return findings[:1]


SPEC = RuleSpec(
    Rule.FAILED_TRAINJOB_PODGROUP,
    "a TrainJob `Failed` for `PODSWEEPER_OPERATOR_GRACE_SECONDS`, not suspended, whose Volcano PodGroup "
    "(its name, controlled by it) is `Inqueue`: its queue reserves the PodGroup's minResources for a job "
    "that runs no pod (kubeflow/trainer#4033), and Trainer makes the PodGroup again if it is deleted",
    "Warning Event on the TrainJob, naming the queue and what it reserves; nothing is deleted",
    frozenset({Action.WARN}),
    wasted="since the failure (the queue's reserved capacity; no pod of it runs)",
    settings=("PODSWEEPER_OPERATOR_GRACE_SECONDS",),
    warning_reason="FailedTrainJobPodGroupReserving",
    for_kinds="Trainer v2 with Volcano",
    on_chain=check,
    nominates=failed_owner,
)
