"""The replay page's model from a ReplayRun: one JobView per training job, from the steps alone.

Each job event, pod event and decision is filed under its training job; a pod's observations
become spans (repeats merged), its restarts, ignored events and end become marks, and every
decision a mark on the row of the object it is about. Pure: nothing is read but the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from podsweeper.decisions import Action, Decision, Result
from podsweeper.intake import Ignored, ObjectChange
from podsweeper.model import Job, Pod, Verb, Workload
from podsweeper.page.model import DecisionView, EvidenceView, JobView, Mark, Page, Row, Span
from podsweeper.page.states import Seen, job_state, pod_state, pod_text, restarts, trigger_text
from podsweeper.replay import ReplayRun, ReplayStep

NO_JOB = ("", "", "")  # the group of pods that name no training job


@dataclass
class _PodTrack:
    namespace: str
    name: str
    uid: str
    seen: list[Seen] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    ended: datetime | None = None


@dataclass
class _JobTrack:
    kind: str
    namespace: str
    name: str
    uid: str = ""
    policy: str = ""
    seen: list[Seen] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    pods: dict[str, _PodTrack] = field(default_factory=dict)
    decisions: list[DecisionView] = field(default_factory=list)
    evidence: list[EvidenceView] = field(default_factory=list)
    times: list[datetime] = field(default_factory=list)


class _Builder:
    def __init__(self) -> None:
        self.jobs: dict[tuple[str, str, str], _JobTrack] = {}

    def job(self, key: tuple[str, str, str]) -> _JobTrack:
        if key not in self.jobs:
            self.jobs[key] = _JobTrack(*key)
        return self.jobs[key]

    def pod(self, job: _JobTrack, namespace: str, name: str, uid: str) -> _PodTrack:
        key = uid or f"{namespace}/{name}"
        if key not in job.pods:
            job.pods[key] = _PodTrack(namespace, name, uid)
        return job.pods[key]

    def object_change(self, step: ReplayStep, verb: Verb, obj: Pod | Job) -> None:
        if isinstance(obj, Job):
            track = self.job(obj.ref.key)
            track.uid, track.policy = obj.uid, obj.clean_pod_policy.value
            track.times.append(step.time)
            track.seen.append(job_state(obj, verb, step.time))
            return
        track = self.job(obj.job.key if obj.job else NO_JOB)
        track.times.append(step.time)
        pod = self.pod(track, obj.namespace, obj.name, obj.uid)
        if step.observed or pod.ended is not None:
            why = f"event ignored, {step.observed}" if step.observed else "seen after it ended"
            count = str(restarts(obj)) if restarts(obj) else ""
            pod.marks.append(Mark(step.time, "ignored", count, f"{pod_text(obj)}: {why}"))
        elif verb is Verb.DELETE:
            pod.ended = step.time
            pod.marks.append(Mark(step.time, "ended", "", "deleted (watch event)"))
        else:
            seen = pod_state(obj, step.time)
            before = pod.seen[-1].restarts if pod.seen else 0
            if seen.restarts > before:
                pod.marks.append(Mark(step.time, "restart", f"{seen.restarts}", f"restarts: {seen.restarts}"))
            pod.seen.append(seen)

    def decision(self, step: ReplayStep, decision: Decision, result: Result | None) -> None:
        track = self.job(decision.job.key)
        track.times.append(step.time)
        outcome = result.value if result else "none"
        target = f"{decision.kind} {decision.namespace}/{decision.name}"
        title = (
            f"{step.time:%H:%M:%S} {decision.action.value.upper()} {target} -> {outcome}\n"
            f"rule: {decision.rule.value}\nreason: {decision.reason}\nevent: {trigger_text(step)}"
        )
        mark = Mark(step.time, f"decision-{decision.action.value}", "", title)
        track.decisions.append(
            DecisionView(
                step.time,
                f"{step.path}:{step.line}",
                trigger_text(step),
                decision.rule.value,
                decision.action.value,
                outcome,
                target,
                decision.reason,
            )
        )
        if decision.action is Action.SUSPEND and result is Result.SUSPENDED:  # the pod's job
            track.seen.append(Seen(step.time, "suspended", "suspended", note="suspended by podsweeper"))
        if decision.kind != "Pod":
            track.marks.append(mark)
            return
        pod = self.pod(track, decision.namespace, decision.name, decision.uid)
        pod.marks.append(mark)
        if decision.action.deletes:
            track.evidence.append(
                EvidenceView(
                    f"{decision.namespace}/{decision.name}",
                    step.time,
                    decision.rule.value,
                    outcome,
                    decision.evidence,
                )
            )
            if result is Result.DELETED and pod.ended is None:
                pod.ended = step.time
                pod.marks.append(Mark(step.time, "ended", "", "deleted by podsweeper"))


def _spans(seen: list[Seen], ended: datetime | None) -> list[Span]:
    """Consecutive observations as spans, repeats of the same state merged."""
    merged: list[Seen] = []
    for item in seen:
        if merged and (merged[-1].label, merged[-1].tone) == (item.label, item.tone):
            continue
        merged.append(item)
    spans = []
    for i, item in enumerate(merged):
        end = merged[i + 1].time if i + 1 < len(merged) else ended
        spans.append(Span(item.time, end, item.label, item.tone, item.crash_loop, item.note, item.short))
    return spans


def _job_view(track: _JobTrack) -> JobView:
    times = track.times or [datetime.fromtimestamp(0, UTC)]  # never empty: a track starts with a time
    start, end = min(times), max(times)
    if end - start < timedelta(seconds=1):
        end = start + timedelta(seconds=1)
    if track.name:
        title = f"{track.kind} {track.namespace}/{track.name}"
        policy = f"cleanPodPolicy {track.policy}" if track.policy else "never seen in the stream"
        subtitle = f"uid {track.uid or 'unknown'} · {policy}"
    else:
        title, subtitle = "Pods without a training job", "no job label or owner"
    job_row = Row(track.kind or "job", title, _spans(track.seen, None), list(track.marks))
    names = [p.name for p in track.pods.values()]
    rows = []
    for pod in sorted(track.pods.values(), key=lambda p: (p.name, p.seen[0].time if p.seen else start)):
        label = pod.name if names.count(pod.name) == 1 else f"{pod.name} ({pod.uid[:8]})"
        rows.append(
            Row(
                label, f"Pod {pod.namespace}/{pod.name} uid {pod.uid}", _spans(pod.seen, pod.ended), pod.marks
            )
        )
    return JobView(title, subtitle, start, end, job_row, rows, track.decisions, track.evidence)


def build(run: ReplayRun) -> Page:
    """The page's model, from the replay alone."""
    builder = _Builder()
    counts: dict[str, int] = {}
    ignored = 0
    for step in run.steps:
        trigger = step.intake.trigger
        if isinstance(trigger, ObjectChange) and not isinstance(trigger.obj, Workload):
            builder.object_change(step, trigger.verb, trigger.obj)
        if step.observed or isinstance(trigger, Ignored):
            ignored += 1
        for item in step.outcome.applied:
            builder.decision(step, item.decision, item.result)
            key = f"{item.decision.action.value} ({item.decision.rule.value})"
            counts[key] = counts.get(key, 0) + 1
    files = tuple(dict.fromkeys(step.path for step in run.steps))
    left = tuple(sorted(f"{p.namespace}/{p.name} ({p.phase})" for p in run.cluster.pods.values()))
    jobs = tuple(_job_view(track) for key, track in builder.jobs.items() if key != NO_JOB)
    if NO_JOB in builder.jobs:
        jobs += (_job_view(builder.jobs[NO_JOB]),)
    return Page(files, len(run.steps), ignored, tuple(sorted(counts.items())), left, jobs)
