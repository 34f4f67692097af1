"""The decision engine: pure functions, objects in, decisions out.

No I/O and no clock: the caller passes fresh state and `now`. The live function, the
sweep and the replay all decide through `decide_pods` and `decide_new_job`. Rules are
table entries; the first pod rule that names a pod decides for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from podsweeper.config import CrashLoopAction, Settings
from podsweeper.decisions import Action, Decision, Rule
from podsweeper.model import (
    TERMINATED_PHASES,
    CleanPodPolicy,
    Job,
    JobRef,
    Node,
    NodeReady,
    Owner,
    Pod,
    Workload,
)

# restartPolicy values under which a failed replica is restarted in place.
RESTARTING_POLICIES = frozenset({"OnFailure", "Always", "ExitCode"})


@dataclass(frozen=True)
class Verdict:
    action: Action
    reason: str


@dataclass(frozen=True)
class Context:
    now: datetime
    settings: Settings


# A pod rule sees the pod and its job as it is now; job is None when the job is gone.
PodRuleFn = Callable[[Pod, Job | None, Context], Verdict | None]


def _age_seconds(pod: Pod, now: datetime) -> float | None:
    if pod.created is None:
        return None
    return (now - pod.created).total_seconds()


def orphan(pod: Pod, job: Job | None, ctx: Context) -> Verdict | None:
    if job is not None or pod.job is None:
        return None
    age = _age_seconds(pod, ctx.now)
    grace = ctx.settings.orphan_grace_seconds
    if age is None or age < grace:
        return None  # too young (or age unknown): the job may just be being re-created
    return Verdict(
        Action.DELETE,
        f"job {pod.job.kind.kind}/{pod.job.name} no longer exists; pod is {age:.0f}s old (grace {grace}s)",
    )


def operator_deletes(pod: Pod, job: Job) -> bool:
    """Whether the job's operator deletes this pod itself now that the job has finished."""
    if pod.via is not None:
        return False  # a launcher: the mpi-operator's cleanup deletes workers only (#643)
    policy = job.clean_pod_policy
    return policy is CleanPodPolicy.ALL or (policy is CleanPodPolicy.RUNNING and pod.active)


def operator_grace_left(pod: Pod, job: Job, now: datetime, settings: Settings) -> float | None:
    """Seconds the operator still has to delete this pod itself; None when it is not waited for.

    Deleting such a pod at once races the operator (measured with training-operator v1.9.4: it
    deletes a pod's headless Service only after the pod, and gives up on the Service when the
    pod is already gone). A job whose finishing time is not recorded cannot be waited for.
    """
    if not job.finished or job.finished_at is None or not operator_deletes(pod, job):
        return None
    left = settings.operator_grace_seconds - (now - job.finished_at).total_seconds()
    return left if left > 0 else None


# Pods a finished job may have beyond what it declares: leftovers of restarts and re-creations.
STRAGGLER_MARGIN = 0.1
MIN_STRAGGLERS = 2


def delete_bound(job: Job | None, settings: Settings) -> int:
    """How many pods one pass may delete.

    A job that still exists says how many pods it runs: its own event may clean all of them,
    plus a margin for stragglers (a 1,024-worker job is cleaned at once). What has no declared
    size (the orphans of a gone job) gets the fixed PODSWEEPER_MAX_DELETES_PER_EVENT.
    """
    if job is None:
        return settings.max_deletes_per_event
    declared = job.declared_replicas
    return declared + max(MIN_STRAGGLERS, int(declared * STRAGGLER_MARGIN))


def left_to_operator(job: Job | None, pods: Iterable[Pod], now: datetime, settings: Settings) -> str | None:
    """Says which pods are left to the operator's own cleanup for now, if any (for the log)."""
    if job is None:
        return None
    waits = [left for pod in pods if (left := operator_grace_left(pod, job, now, settings)) is not None]
    if not waits:
        return None
    return (
        f"cleanPodPolicy {job.clean_pod_policy.value}: the operator has {max(waits):.0f}s left to delete "
        f"{len(waits)} pod(s) itself (PODSWEEPER_OPERATOR_GRACE_SECONDS); podsweeper is the backstop after that"
    )


def finished_job_active_pod(pod: Pod, job: Job | None, ctx: Context) -> Verdict | None:
    if job is None or not job.finished or not pod.active or not ctx.settings.sweep_active_pods:
        return None
    if operator_grace_left(pod, job, ctx.now, ctx.settings) is not None:
        return None  # the operator's own cleanup comes first
    looping = pod.max_crash_loop_restarts()
    detail = f", crash-looping with {looping} restarts" if looping else ""
    return Verdict(
        Action.DELETE,
        f"job {job.finished}; pod still {pod.phase}{detail} (cleanPodPolicy {job.clean_pod_policy})",
    )


def clean_pod_policy_all(pod: Pod, job: Job | None, ctx: Context) -> Verdict | None:
    if job is None or not job.finished or job.clean_pod_policy is not CleanPodPolicy.ALL:
        return None
    if pod.phase not in TERMINATED_PHASES:
        return None
    if operator_grace_left(pod, job, ctx.now, ctx.settings) is not None:
        return None  # the operator's own cleanup comes first
    return Verdict(Action.DELETE, f"job {job.finished} with cleanPodPolicy All; pod {pod.phase}")


def crash_loop(pod: Pod, job: Job | None, ctx: Context) -> Verdict | None:
    if job is None or job.finished or not job.restarts_unbounded:
        return None
    restarts = pod.max_crash_loop_restarts()
    if restarts < ctx.settings.crashloop_restarts:
        return None
    reason = (
        f"CrashLoopBackOff with {restarts} restarts and the job has neither "
        "backoffLimit nor activeDeadlineSeconds: it would restart forever"
    )
    chosen = ctx.settings.crashloop_action
    if chosen is CrashLoopAction.SUSPEND:
        if job.suspend_blocked:
            return Verdict(Action.WARN, f"{reason}; not suspended: {job.suspend_blocked}")
        return Verdict(Action.SUSPEND, f"{reason}; suspending the job stops it for good")
    return Verdict(Action.DELETE if chosen is CrashLoopAction.DELETE else Action.WARN, reason)


POD_RULES: tuple[tuple[Rule, PodRuleFn], ...] = (
    (Rule.ORPHAN, orphan),
    (Rule.FINISHED_JOB_ACTIVE_POD, finished_job_active_pod),
    (Rule.CLEAN_POD_POLICY_ALL, clean_pod_policy_all),
    (Rule.CRASH_LOOP, crash_loop),
)


def _owning_job(pod: Pod, job: Job | None) -> Job | None:
    """The job if it is the one the pod belongs to; None if that job is gone."""
    if job is None:
        return None
    if pod.job is not None and pod.job.uid and pod.job.uid != job.uid:
        return None  # same name, another job: the pod's own job was deleted
    return job


def _opt_out(pod: Pod, job: Job | None) -> str | None:
    if job is not None and job.opted_out:
        return "job"
    if pod.opted_out:
        return "pod"
    return None


def launcher_links(pods: Iterable[Pod]) -> list[Owner]:
    """The batch Jobs a pass must read to tell whether these launcher pods are the job's."""
    return list(
        dict.fromkeys(
            p.via for p in pods if p.via is not None and p.job is not None and p.job.kind.launcher is not None
        )
    )


def proven_launchers(job: Job | None, links: Iterable[Workload]) -> frozenset[str]:
    """The uids of the batch Jobs, read now, that are this job's finished launcher Jobs: the
    job controls them (its uid), and they finished (the Job controller makes no new pod then).
    A launcher pod of an active Job is left alone: deleting it only makes the Job re-create it."""
    if job is None or job.kind.launches(job.ref.version) is None:
        return frozenset()
    return frozenset(
        link.uid
        for link in links
        if link.controller is not None
        and link.controller.uid == job.uid
        and link.controller.kind == job.kind.kind
        and link.finished is not None
        and not link.terminating
    )


def pod_is_candidate(pod: Pod, ref: JobRef, launchers: frozenset[str] | None = frozenset()) -> bool:
    """Safety gate: only a live pod of exactly this job (and so in the job's namespace), which
    the job controls itself (a chain's pods are decided at its JobSet, podsweeper.lineage), or a
    launcher pod whose batch Job was proven the job's (`launchers`; None: the sweep's listed
    state, where its pass proves it before anything is done)."""
    return (
        pod.job is not None
        and (pod.via is None or launchers is None or pod.via.uid in launchers)
        and ref.kind.chain is None
        and not pod.foreign_controller
        and not pod.terminating
        and pod.job.key == ref.key
    )


def in_namespaces(namespace: str, settings: Settings) -> bool:
    """The engine's own namespace gate, behind the caller's (triage.in_scope).

    A plain check, not an assert (`python -O` strips those). Out of scope decides nothing
    rather than raising: a raise would end a whole sweep, leaving every allowed namespace
    uncleaned for one object that slipped past the caller's gate."""
    return settings.namespace_allowed(namespace)


def decide_pods(
    ref: JobRef,
    job: Job | None,
    pods: Iterable[Pod],
    now: datetime,
    settings: Settings,
    launchers: frozenset[str] | None = frozenset(),
) -> list[Decision]:
    """Decisions for the pods of one job; `job` None means the job is known to be gone.

    `launchers`: the batch Jobs proven to be the job's launchers (proven_launchers); a launcher
    pod of any other Job is never decided. The caller has passed the job's namespace through
    the namespace gate (triage.in_scope); a pod outside the namespaces is never decided.
    """
    ctx = Context(now, settings)
    decisions = []
    for pod in pods:
        if not in_namespaces(pod.namespace, settings):
            continue  # each pod on its own: what the job ref says does not widen the gate
        if not pod_is_candidate(pod, ref, launchers):
            continue
        owner = _owning_job(pod, job)
        if owner is not None and owner.suspended:
            continue  # the operator removes a suspended job's pods itself
        # (a pod of an earlier job of the same name is an orphan, whatever the new job's state)
        for rule, applies in POD_RULES:
            verdict = applies(pod, owner, ctx)
            if verdict is None:
                continue
            decisions.append(_pod_decision(rule, verdict, pod, owner, ctx))
            break
    return decisions


def wasted_since(rule: Rule, pod: Pod, owner: Job | None) -> datetime | None:
    """Since when the pod's GPUs are held for nothing, for the reclaimed GPU-seconds."""
    if rule in (Rule.FINISHED_JOB_ACTIVE_POD, Rule.CLEAN_POD_POLICY_ALL) and owner is not None:
        return owner.finished_at
    if rule is Rule.CRASH_LOOP:
        return pod.started  # an upper bound: when the first crash came is not recorded
    return None  # an orphan: when its job vanished is not recorded anywhere we read


def _pod_decision(rule: Rule, verdict: Verdict, pod: Pod, owner: Job | None, ctx: Context) -> Decision:
    action, reason = verdict.action, verdict.reason
    opted = _opt_out(pod, owner)
    if opted:
        action, reason = (
            Action.SKIP,
            f"opted out by {opted} annotation podsweeper.dev/skip; "
            f"would {verdict.action.value}: {verdict.reason}",
        )
    job_ref = owner.ref if owner is not None else pod.job
    assert job_ref is not None, "a candidate pod always names its job"
    return Decision(
        rule,
        action,
        "Pod",
        pod.namespace,
        pod.name,
        pod.uid,
        reason,
        job_ref,
        evidence=tuple(c for c in pod.containers if c.has_evidence),
        resource_version=pod.resource_version,
        gpus=pod.gpus(ctx.settings.gpu_resource_names),
        node=pod.node,
        wasted_since=wasted_since(rule, pod, owner),
    )


def failed_mpijob_running(job: Job, now: datetime, settings: Settings) -> Decision | None:
    """Rule failed-mpijob-running: an MPIJob (v2beta1) Failed without completionTime, which its
    operator goes on running: a worker evicted marks it Failed, but the launcher Job is still
    active, cleanPodPolicy is not applied, and deleted workers or launcher Jobs are re-created
    at once (mpi-operator#647, measured with v0.8.0). Only suspend stops it: the operator then
    deletes the workers and suspends the launcher Job. The operator's grace comes first (its
    launcher may still fail and settle the job, and then its cleanPodPolicy applies)."""
    since = job.failed_unsettled_at
    if since is None or job.suspended:
        return None
    if not in_namespaces(job.namespace, settings):
        return None
    if (now - since).total_seconds() < settings.operator_grace_seconds:
        return None
    switch = ".".join(("spec", *job.kind.suspend_path))
    reason = (
        f"{job.kind.kind} Failed ({job.failed_reason or 'no reason given'}) but without completionTime: "
        "its operator keeps running its launcher and re-creates any worker deleted (mpi-operator#647)"
    )
    action = Action.SUSPEND
    if job.suspend_blocked:
        action, reason = Action.WARN, f"{reason}; not suspended: {job.suspend_blocked}"
    else:
        reason = f"{reason}; suspending the job ({switch}) stops it for good"
    if job.opted_out:
        action, reason = (
            Action.SKIP,
            f"opted out by job annotation podsweeper.dev/skip; would {action.value}: {reason}",
        )
    return Decision(
        Rule.FAILED_MPIJOB_RUNNING, action, job.kind.kind, job.namespace, job.name, job.uid, reason, job.ref
    )


def unbounded_restart_replicas(job: Job) -> tuple[str, ...]:
    """Replica types whose failed pods restart in place with no backoffLimit to stop them."""
    if job.backoff_limit is not None:
        return ()
    return tuple(sorted(r for r, policy in job.restart_policies if policy in RESTARTING_POLICIES))


def decide_new_job(job: Job, settings: Settings) -> list[Decision]:
    """Rule no-backoff-limit: warn when failed replicas of a new job would restart forever."""
    if not in_namespaces(job.namespace, settings):
        return []
    restarting = unbounded_restart_replicas(job)
    if not restarting:
        return []
    reason = (
        f"replicas {', '.join(restarting)} restart on failure and no backoffLimit is set: "
        "failed workers would restart forever (backoffLimit: 0 recommended)"
    )
    action = Action.WARN
    if job.opted_out:
        action, reason = Action.SKIP, f"opted out by job annotation podsweeper.dev/skip; {reason}"
    return [
        Decision(
            Rule.NO_BACKOFF_LIMIT, action, job.kind.kind, job.namespace, job.name, job.uid, reason, job.ref
        )
    ]


def stuck_terminating(
    pod: Pod, node: Node | None, job: Job | None, now: datetime, settings: Settings
) -> Decision | None:
    """Rule stuck-terminating (opt-in): a training pod terminating long past its grace period
    on a node that is NotReady, Unknown or gone, where no kubelet will ever confirm the delete.

    Never on a Ready node (its kubelet is there to finish the delete). `node` None: the node
    object no longer exists. The caller has read the pod, its node and its job fresh.
    """
    limit = settings.stuck_terminating_seconds
    if limit is None or pod.job is None or pod.foreign_controller or not pod.terminating:
        return None
    if not in_namespaces(pod.namespace, settings):
        return None
    if pod.via is not None and pod.job.kind.chain is None:
        return None  # a launcher pod (MPIJob v2beta1): its batch Job is not proven the job's here
    if pod.deletion_due is None or pod.node is None:
        return None  # never scheduled: the API server itself removes such a pod
    overdue = (now - pod.deletion_due).total_seconds()
    if overdue < limit:
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
            since = (now - node.since).total_seconds()
            state += f" since {since:.0f}s"
            detail += f" for {since:.0f}s"
    reason = (
        f"terminating {overdue:.0f}s past its grace period (PODSWEEPER_STUCK_TERMINATING_SECONDS {limit}) "
        f"on node {pod.node}, which {state}: force delete (grace period 0)"
    )
    action = Action.FORCE_DELETE
    opted = "job" if job is not None and job.opted_out else "pod" if pod.opted_out else None
    if opted:
        action, reason = (
            Action.SKIP,
            f"opted out by {opted} annotation podsweeper.dev/skip; would force delete: {reason}",
        )
    return Decision(
        Rule.STUCK_TERMINATING,
        action,
        "Pod",
        pod.namespace,
        pod.name,
        pod.uid,
        reason,
        job.ref if job is not None else pod.job,
        evidence=tuple(c for c in pod.containers if c.has_evidence),
        resource_version=pod.resource_version,
        gpus=pod.gpus(settings.gpu_resource_names),
        node=pod.node,
        detail=f"force-deleted {overdue:.0f}s past its grace period; node {pod.node} {detail}",
        wasted_since=pod.deletion_due,  # the scheduler counts its GPUs until the pod object goes
    )
