"""Rules for chained kinds (Trainer v2: TrainJob -> JobSet -> batch Job -> Pod): pure.

A pod of an active batch Job that is deleted is only re-created by the Job controller, so
these rules act on the level that stops the waste for good: the JobSet, or a batch Job left
without one. What the chain's objects are is read fresh by the pass (the TrainJob, its
JobSet, the Jobs and pods labelled with its name) and passed in here as a Lineage.

An object is ours only when its controller chain reaches a TrainJob, or, once orphaned, when it
carries the mark Trainer's runtimes put on every replicated Job
(`trainer.kubeflow.org/trainjob-ancestor-step`): a plain JobSet or batch Job is never named.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from podsweeper.config import Settings
from podsweeper.decisions import Action, Decision, Rule
from podsweeper.kinds import Chain
from podsweeper.model import FinishMark, Job, JobRef, Pod, Workload


@dataclass(frozen=True)
class Lineage:
    """One chained job as a fresh read found it; `job` None: it does not exist."""

    ref: JobRef
    job: Job | None
    top: Workload | None  # the JobSet named like the job
    middles: tuple[Workload, ...] = ()  # the batch Jobs labelled with the job's name
    pods: tuple[Pod, ...] = ()
    finish_mark: FinishMark | None = None  # podsweeper's record of the job's last finish

    @property
    def chain(self) -> Chain:
        chain = self.ref.kind.chain
        assert chain is not None, "a Lineage is only built for a chained kind"
        return chain

    def owns(self, workload: Workload, parent_kind: str, parent_uid: str | None) -> bool:
        controller = workload.controller
        return (
            controller is not None
            and parent_uid is not None
            and controller.kind == parent_kind
            and controller.uid == parent_uid
        )

    @property
    def live_top(self) -> Workload | None:
        """The JobSet the existing TrainJob controls, if any."""
        top, job = self.top, self.job
        if top is None or job is None or top.terminating:
            return None
        return top if self.owns(top, self.ref.kind.kind, job.uid) else None

    def active_pods(self, top: Workload) -> list[Pod]:
        """Pending/Running pods the JobSet made (its uid on them), under a batch Job."""
        uid_label = self.chain.uid_label
        return [
            p
            for p in self.pods
            if p.active and not p.terminating and p.via is not None and p.labels.get(uid_label) == top.uid
        ]


def _age(workload: Workload, now: datetime) -> float | None:
    return None if workload.created is None else (now - workload.created).total_seconds()


def _job_ref(lineage: Lineage) -> JobRef:
    job = lineage.job
    if job is not None:
        return job.ref
    return JobRef(lineage.ref.kind, lineage.ref.namespace, lineage.ref.name)


def _decision(
    rule: Rule,
    action: Action,
    workload: Workload,
    reason: str,
    lineage: Lineage,
    pods: Iterable[Pod],
    settings: Settings,
    wasted_since: datetime | None = None,
) -> Decision:
    job = lineage.job
    held = list(pods)
    opted = "job" if job is not None and job.opted_out else workload.link.kind if workload.opted_out else None
    if opted:
        action, reason = (
            Action.SKIP,
            f"opted out by {opted} annotation podsweeper.dev/skip; would {action.value}: {reason}",
        )
    return Decision(
        rule,
        action,
        workload.link.kind,
        workload.namespace,
        workload.name,
        workload.uid,
        reason,
        _job_ref(lineage),
        evidence=tuple(c for p in held for c in p.containers if c.has_evidence),
        gpus=sum(p.gpus(settings.gpu_resource_names) for p in held if p.active),
        wasted_since=wasted_since,
    )


def _restarted_after_finish(lineage: Lineage, settings: Settings) -> Decision | None:
    """finished-trainjob-restarted: a TrainJob that had finished runs a JobSet made after.

    Trainer v2.3.0 makes a new JobSet for a Failed TrainJob whose JobSet went (its TTL, or any
    delete) and removes the Failed condition, forever (kubeflow/trainer#3779, #3737; before
    v2.2.0 a Complete one too, #2981). Deleting that JobSet only gets it made again within
    ~20 ms, suspending the JobSet is undone by Trainer within ~0.1 s: only the TrainJob's own
    spec.suspend stops it (measured). What says it had finished is its condition if still
    there, else podsweeper's own record of the finish (FinishMark). A JobSet suspended and
    resumed since is one a person chose to run again (spec.suspend false on the TrainJob).
    """
    job, top = lineage.job, lineage.live_top
    if job is None or top is None or job.suspended or top.suspended:
        return None
    if top.resumed:
        return None  # suspended, then resumed by a person (spec.suspend false): let it run
    mark = lineage.finish_mark
    if mark is not None:
        restarted = top.uid != mark.top_uid if mark.top_uid else _after(top, mark.at)
        finished, since = mark.condition, mark.at
    elif job.finished is not None:
        restarted, finished, since = (
            _after(top, job.finished_at, strictly=True),
            job.finished,
            job.finished_at,
        )
    else:
        return None
    if not restarted:
        return None
    when = f" at {since.isoformat()}" if since else ""
    reason = (
        f"TrainJob finished ({finished}{when}) and then got a new JobSet {top.name} (uid {top.uid}): "
        "training started again for a finished job"
    )
    active = lineage.active_pods(top)
    if job.suspend_blocked:
        action, reason = Action.WARN, f"{reason}; not suspended: {job.suspend_blocked}"
    else:
        action, reason = Action.SUSPEND, f"{reason}; suspending the TrainJob (spec.suspend) stops it for good"
    held = tuple(c for p in active for c in p.containers if c.has_evidence)
    return _about_job(
        Rule.FINISHED_TRAINJOB_RESTARTED,
        action,
        job,
        reason,
        evidence=held,
        gpus=sum(p.gpus(settings.gpu_resource_names) for p in active),
        wasted_since=top.created,
    )


def _after(top: Workload, since: datetime | None, strictly: bool = False) -> bool:
    if since is None or top.created is None:
        return False
    return top.created > since if strictly else top.created >= since


def _orphaned(workload: Workload, parent_kind: str, parent_uid: str | None, lineage: Lineage) -> bool:
    """Not controlled by the existing parent, yet provably made for a TrainJob: controlled by
    a TrainJob that is gone, or carrying Trainer's mark (the only proof once orphaned)."""
    if workload.terminating or lineage.owns(workload, parent_kind, parent_uid):
        return False
    controller = workload.controller
    if controller is not None and controller.kind != parent_kind:
        return False  # another controller's: never ours
    by_trainjob = controller is not None and controller.kind == lineage.ref.kind.kind
    return by_trainjob or workload.marked(lineage.chain.marker_label)


def _orphans(lineage: Lineage, now: datetime, settings: Settings) -> list[Decision]:
    """orphan: a JobSet whose TrainJob is gone, or batch Jobs whose JobSet is gone."""
    decisions = []
    grace = settings.orphan_grace_seconds
    job, top = lineage.job, lineage.top
    top_link, middle_link = lineage.chain.links[0], lineage.chain.links[-1]
    top_orphaned = top is not None and _orphaned(
        top, lineage.ref.kind.kind, job.uid if job else None, lineage
    )
    if top is not None and top_orphaned:
        age = _age(top, now)
        if age is not None and age >= grace:
            pods = [p for p in lineage.pods if p.labels.get(lineage.chain.uid_label) == top.uid]
            gone = "no longer exists" if job is None else f"(uid {job.uid}) does not control it"
            reason = (
                f"{top_link.kind} {top.name} was made for TrainJob {lineage.ref.name}, which {gone}; "
                f"{top_link.kind} is {age:.0f}s old (grace {grace}s); deleting it (background) removes "
                "its Jobs and pods"
            )
            decisions.append(_decision(Rule.ORPHAN, Action.DELETE, top, reason, lineage, pods, settings))
    parent_uid = None if top is None or top.terminating else top.uid
    for middle in lineage.middles:
        if middle.labels.get(lineage.chain.name_label) != lineage.ref.name:
            continue
        if top is not None and top_orphaned and lineage.owns(middle, top_link.kind, top.uid):
            continue  # goes with its orphaned JobSet
        if not _orphaned(middle, top_link.kind, parent_uid, lineage):
            continue
        age = _age(middle, now)
        if age is None or age < grace:
            continue
        pods = [p for p in lineage.pods if p.via is not None and p.via.uid == middle.uid]
        reason = (
            f"{middle_link.kind} {middle.name} was made by {top_link.kind} {lineage.ref.name} for a TrainJob, "
            f"and no such {top_link.kind} controls it now; {age:.0f}s old (grace {grace}s); deleting it "
            "(background) removes its pods"
        )
        decisions.append(_decision(Rule.ORPHAN, Action.DELETE, middle, reason, lineage, pods, settings))
    return decisions


def _unbounded_restarts(lineage: Lineage, settings: Settings) -> Decision | None:
    """unbounded-jobset-restarts: the JobSet restarts on some failures without any limit."""
    job, top = lineage.job, lineage.live_top
    if job is None or top is None or job.finished or not top.unbounded_restart_actions:
        return None
    if job.active_deadline_seconds is not None:
        return None  # the deadline ends it
    reason = (
        f"its JobSet's failurePolicy uses {', '.join(top.unbounded_restart_actions)}: the failures "
        "those rules match restart the job without counting against maxRestarts, forever"
    )
    # A warning is about the TrainJob (the Event goes on it), like no-backoff-limit.
    return _about_job(Rule.UNBOUNDED_JOBSET_RESTARTS, Action.WARN, job, reason)


def _about_job(rule: Rule, action: Action, job: Job, reason: str, **facts: Any) -> Decision:
    """A decision about the TrainJob itself; the job's opt-out makes it a skip."""
    if job.opted_out:
        action, reason = Action.SKIP, f"opted out by job annotation podsweeper.dev/skip; {reason}"
    return Decision(rule, action, job.kind.kind, job.namespace, job.name, job.uid, reason, job.ref, **facts)


def decide_lineage(
    lineage: Lineage, now: datetime, settings: Settings, check_new: bool = False
) -> list[Decision]:
    """Decisions for one chained job; `check_new` also decides the warning for a new JobSet.

    The caller has passed the job's namespace through the namespace gate (triage.in_scope);
    outside the namespaces nothing is decided (a plain check: `python -O` strips asserts).
    """
    if not settings.namespace_allowed(lineage.ref.namespace):
        return []
    decisions: list[Decision] = []
    if check_new and (warning := _unbounded_restarts(lineage, settings)) is not None:
        decisions.append(warning)
    if (restarted := _restarted_after_finish(lineage, settings)) is not None:
        decisions.append(restarted)
    decisions += _orphans(lineage, now, settings)
    return decisions
