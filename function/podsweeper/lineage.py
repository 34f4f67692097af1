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

from podsweeper.config import Settings
from podsweeper.decisions import Action, Decision, Rule
from podsweeper.kinds import Chain
from podsweeper.model import Job, JobRef, Pod, Workload


@dataclass(frozen=True)
class Lineage:
    """One chained job as a fresh read found it; `job` None: it does not exist."""

    ref: JobRef
    job: Job | None
    top: Workload | None  # the JobSet named like the job
    middles: tuple[Workload, ...] = ()  # the batch Jobs labelled with the job's name
    pods: tuple[Pod, ...] = ()

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
    if opted and action is not Action.WARN:
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


def _finished_active(lineage: Lineage, now: datetime, settings: Settings) -> Decision | None:
    """finished-trainjob-active-jobset: a finished TrainJob whose JobSet still runs pods."""
    job, top = lineage.job, lineage.live_top
    if job is None or top is None or not job.finished or not settings.sweep_active_pods:
        return None
    active = lineage.active_pods(top)
    if not active:
        return None
    since = job.finished_at
    recreated = since is not None and top.created is not None and top.created > since
    if not recreated:
        # The JobSet deletes its active Jobs itself when it finishes: that comes first.
        if since is None:
            return None
        waited = (now - since).total_seconds()
        if waited < settings.operator_grace_seconds:
            return None
    how = (
        "was created again after the TrainJob finished"
        if recreated
        else f"still runs {settings.operator_grace_seconds}s after the TrainJob finished"
    )
    reason = (
        f"TrainJob {job.finished}; its JobSet {how}: {len(active)} active pod(s); "
        "deleting the JobSet (background) removes its Jobs and pods"
    )
    return _decision(
        Rule.FINISHED_TRAINJOB_ACTIVE_JOBSET, Action.DELETE, top, reason, lineage, active, settings, since
    )


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
    decision = _decision(Rule.UNBOUNDED_JOBSET_RESTARTS, Action.WARN, top, reason, lineage, (), settings)
    # A warning is about the TrainJob (the Event goes on it), like no-backoff-limit.
    return Decision(
        decision.rule,
        Action.SKIP if job.opted_out else Action.WARN,
        job.kind.kind,
        job.namespace,
        job.name,
        job.uid,
        reason if not job.opted_out else f"opted out by job annotation podsweeper.dev/skip; {reason}",
        job.ref,
    )


def decide_lineage(
    lineage: Lineage, now: datetime, settings: Settings, check_new: bool = False
) -> list[Decision]:
    """Decisions for one chained job; `check_new` also decides the warning for a new JobSet.

    The caller has passed the job's namespace through the namespace gate (triage.in_scope).
    """
    assert settings.namespace_allowed(lineage.ref.namespace), f"namespace {lineage.ref.namespace!r} not gated"
    decisions: list[Decision] = []
    if check_new and (warning := _unbounded_restarts(lineage, settings)) is not None:
        decisions.append(warning)
    if (finished := _finished_active(lineage, now, settings)) is not None:
        decisions.append(finished)
    decisions += _orphans(lineage, now, settings)
    return decisions
