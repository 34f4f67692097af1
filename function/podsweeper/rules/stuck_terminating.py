"""Rule stuck-terminating (opt-in): a training pod terminating long past its grace period on
a node that is NotReady, Unknown or gone, where no kubelet will ever confirm the delete.

Never on a Ready node (its kubelet is there to finish the delete). `node` None: the node
object no longer exists. The sweep has read the pod, its node and its job fresh.

The pod's owner has the last word (Kueue's `safe-to-forcefully-delete`): "false", never; "true",
not before Kueue's own failure recovery had its turn and the operator grace after it, so the
two never race for one pod.
"""

from __future__ import annotations

from podsweeper.decisions import Action, Rule
from podsweeper.kinds import KUEUE_FORCEFUL_TERMINATION_SECONDS
from podsweeper.model import Job, Node, NodeReady, Pod
from podsweeper.rules.base import Context, Finding, Listed, RuleSpec


def limit_for(pod: Pod, ctx: Context) -> int | None:
    """The seconds past its grace the pod must wait, or None: never (the rule off, or its
    owner said a force delete is not safe)."""
    limit = ctx.settings.stuck_terminating_seconds
    if limit is None or pod.safe_to_force_delete is False:
        return None
    if pod.safe_to_force_delete:
        return max(limit, KUEUE_FORCEFUL_TERMINATION_SECONDS + ctx.settings.operator_grace_seconds)
    return limit


def overdue(pod: Pod, ctx: Context) -> float | None:
    """Seconds the pod has been terminating past its grace period, once that is at least its
    limit (limit_for); None before (or never). The one home of the limit: the sweep's
    nomination and the check both read it here."""
    limit, due = limit_for(pod, ctx), pod.deletion_due
    if limit is None or due is None:
        return None
    seconds = (ctx.now - due).total_seconds()
    return seconds if seconds >= limit else None


def looks_stuck(listed: Listed, ctx: Context) -> bool:
    """A listed pod terminating the limit past its grace: its stuck pass reads it, its node and
    its job again."""
    return listed.pod is not None and overdue(listed.pod, ctx) is not None


def check(pod: Pod, node: Node | None, job: Job | None, ctx: Context) -> Finding | None:
    limit = ctx.settings.stuck_terminating_seconds
    if limit is None or pod.job is None or pod.foreign_controller or not pod.terminating:
        return None
    if pod.batch_job is not None and pod.job.kind.chain is None:
        return None  # a launcher pod (MPIJob v2beta1): its batch Job is not proven the job's here
    if pod.node is None:
        return None  # never scheduled: the API server itself removes such a pod
    late = overdue(pod, ctx)
    if late is None:
        return None
    if node is not None and node.ready is NodeReady.TRUE:
        return None
    if node is None:
        state = detail = "no longer exists"
    else:
        not_ready = node.ready is NodeReady.FALSE
        detail = "NotReady" if not_ready else "Unknown"
        state = f"is {detail}" + ("" if not_ready else " (its kubelet stopped reporting)")
        if node.since is not None:
            since = (ctx.now - node.since).total_seconds()
            state += f" since {since:.0f}s"
            detail += f" for {since:.0f}s"
    waited = f"PODSWEEPER_STUCK_TERMINATING_SECONDS {limit}"
    if pod.safe_to_force_delete:
        waited += (
            f"; safe-to-forcefully-delete, so Kueue's {KUEUE_FORCEFUL_TERMINATION_SECONDS}s "
            f"and the operator grace {ctx.settings.operator_grace_seconds}s first"
        )
    reason = (
        f"terminating {late:.0f}s past its grace period ({waited}) "
        f"on node {pod.node}, which {state}: force delete (grace period 0)"
    )
    return Finding(
        pod,
        Action.FORCE_DELETE,
        reason,
        detail=f"force-deleted {late:.0f}s past its grace period; node {pod.node} {detail}",
        wasted_since=pod.deletion_due,  # the scheduler counts its GPUs until the pod object goes
    )


SPEC = RuleSpec(
    Rule.STUCK_TERMINATING,
    "a training pod terminating `PODSWEEPER_STUCK_TERMINATING_SECONDS` past its grace on a node that is "
    'NotReady, Unknown or gone (never a Ready one); Kueue\'s `safe-to-forcefully-delete`: `"false"` never, '
    '`"true"` not before Kueue\'s 60 s and the operator grace',
    "force delete (grace 0), by the sweep; `get` on nodes from `knative/overlays/stuck-terminating`",
    frozenset({Action.FORCE_DELETE}),
    wasted="since its grace period ended",
    settings=("PODSWEEPER_STUCK_TERMINATING_SECONDS", "PODSWEEPER_OPERATOR_GRACE_SECONDS"),
    opt_in=True,
    for_kinds="v1 and v2",
    on_stuck=check,
    nominates=looks_stuck,
)
