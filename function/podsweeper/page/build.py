"""The replay page's model from a ReplayRun: one JobView per training job, from the steps alone.

Each event is filed under its training job: the job's own, and those of the objects between
the job and its pods (a TrainJob's JobSets and batch Jobs, an MPIJob's launcher Job) and of
the pods. Each object gets a row under the row of the controller it came from; its
observations become spans (repeats merged), its restarts, ignored events and end become
marks, and each decision a mark on the row of the object it is about. Pure: nothing is read
but the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from podsweeper import kinds
from podsweeper.decisions import Action, Decision, Result
from podsweeper.kinds import TrainingKind
from podsweeper.model import Intermediate, Job, JobRef, Pod, Verb
from podsweeper.ownership import intermediate_job
from podsweeper.page.model import DecisionView, EvidenceView, JobView, Mark, Page, Row, Span
from podsweeper.page.states import Seen, intermediate_state, job_facts, job_state, pod_state, trigger_text
from podsweeper.replay import ReplayRun, ReplayStep
from podsweeper.triggers import Ignored, ObjectChange

NO_JOB = ("", "", "")  # the group of pods that name no training job


@dataclass
class _Track:
    """One pod, JobSet or batch Job of a job, as the stream showed it."""

    kind: str  # "Pod", or a chain link's kind
    namespace: str
    name: str
    uid: str
    seen: list[Seen] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    ended: datetime | None = None
    parent: str = ""  # uid of the controller it came from ("" or unknown: under the job's row)
    owners: frozenset[str] = frozenset()  # uids whose background delete takes it along


@dataclass
class _JobTrack:
    kind: str
    namespace: str
    name: str
    training: TrainingKind | None = None
    job: Job | None = None  # as last seen
    seen: list[Seen] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    members: dict[tuple[str, str], _Track] = field(default_factory=dict)
    decisions: list[DecisionView] = field(default_factory=list)
    evidence: list[EvidenceView] = field(default_factory=list)
    times: list[datetime] = field(default_factory=list)


def _job_of(intermediate: Intermediate) -> JobRef | None:
    """The training job a JobSet or batch Job is drawn under: its controller if that is a
    training job (a TrainJob's JobSet, an MPIJob's launcher), else the chained job its name or
    labels name, once it carries the mark of that job's controller; None for a plain one."""
    owner = intermediate.controller
    kind = kinds.lookup(owner.api_version, owner.kind) if owner else None
    if owner is not None and kind is not None:
        return JobRef(kind, intermediate.namespace, owner.name)
    ref = intermediate_job(intermediate)
    if ref is not None and ref.kind.chain is not None and intermediate.marked(ref.kind.chain.marker_label):
        return ref
    return None


class _Builder:
    def __init__(self) -> None:
        self.jobs: dict[tuple[str, str, str], _JobTrack] = {}

    def job(self, ref: JobRef | None, at: datetime) -> _JobTrack:
        key = ref.key if ref else NO_JOB
        if key not in self.jobs:
            self.jobs[key] = _JobTrack(*key, training=ref.kind if ref else None)
        self.jobs[key].times.append(at)
        return self.jobs[key]

    @staticmethod
    def member(job: _JobTrack, kind: str, namespace: str, name: str, uid: str) -> _Track:
        key = (kind, uid or f"{namespace}/{name}")
        if key not in job.members:
            job.members[key] = _Track(kind, namespace, name, uid)
        return job.members[key]

    def object_change(self, step: ReplayStep, verb: Verb, obj: Pod | Job | Intermediate) -> None:
        if isinstance(obj, Job):
            track = self.job(obj.ref, step.time)
            track.job = obj
            track.seen.append(job_state(obj, verb, step.time))
            return
        if isinstance(obj, Pod):
            track = self.job(obj.job, step.time)
            member = self.member(track, "Pod", obj.namespace, obj.name, obj.uid)
            chain = obj.job.kind.chain if obj.job else None
            top = obj.labels.get(chain.uid_label, "") if chain else ""
            via = obj.batch_job.uid if obj.batch_job else ""
            member.parent = member.parent or via
            member.owners = frozenset(uid for uid in (via, top) if uid)
            self._observe(step, verb, member, pod_state(obj, step.time))
            return
        ref = _job_of(obj)
        if ref is None:
            return  # a JobSet or Job of no training job: not drawn
        track = self.job(ref, step.time)
        member = self.member(track, obj.link.kind, obj.namespace, obj.name, obj.uid)
        came_from = obj.controller.uid if obj.controller else ""
        if ref.kind.chain is not None and obj.link != ref.kind.chain.links[0]:
            came_from = came_from or obj.labels.get(ref.kind.chain.uid_label, "")
        member.parent = member.parent or came_from
        member.owners = frozenset({obj.controller.uid} if obj.controller else ())
        self._observe(step, verb, member, intermediate_state(obj, verb, step.time))

    @staticmethod
    def _observe(step: ReplayStep, verb: Verb, member: _Track, seen: Seen) -> None:
        if step.observed or member.ended is not None:
            why = f"event ignored, {step.observed}" if step.observed else "seen after it ended"
            label = str(seen.restarts) if seen.restarts else ""
            member.marks.append(Mark(step.time, "ignored", label, f"{seen.label}: {why}"))
        elif verb is Verb.DELETE:
            member.ended = step.time
            member.marks.append(Mark(step.time, "ended", "", "deleted (watch event)"))
        else:
            before = member.seen[-1].restarts if member.seen else 0
            if seen.restarts > before:
                title = f"restarts: {seen.restarts}"
                member.marks.append(Mark(step.time, "restart", f"{seen.restarts}", title))
            member.seen.append(seen)

    def decision(self, step: ReplayStep, decision: Decision, result: Result | None) -> None:
        track = self.job(decision.job, step.time)
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
        if decision.action is Action.SUSPEND and result is Result.SUSPENDED:  # the pod's job, or the job
            track.seen.append(Seen(step.time, "suspended", "suspended", note="suspended by podsweeper"))
        if decision.kind == decision.job.kind.kind:
            track.marks.append(mark)  # about the job itself
            return
        member = self.member(track, decision.kind, decision.namespace, decision.name, decision.uid)
        member.marks.append(mark)
        if not decision.action.deletes:
            return
        if decision.kind == "Pod":
            where = f"{decision.namespace}/{decision.name}"
            track.evidence.append(
                EvidenceView(where, step.time, decision.rule.value, outcome, decision.evidence)
            )
        if result is Result.DELETED and member.ended is None:
            member.ended = step.time
            member.marks.append(Mark(step.time, "ended", "", "deleted by podsweeper"))
            if member.uid and decision.kind != "Pod":
                self._gone_with(track, member.uid, step.time, f"{target} (deleted by podsweeper)")

    def _gone_with(self, track: _JobTrack, uid: str, at: datetime, what: str) -> None:
        """What a background delete takes along, as the garbage collector (and the simulated
        cluster) does: the objects it controls, and theirs."""
        for member in track.members.values():
            if member.ended is None and uid in member.owners:
                member.ended = at
                member.marks.append(Mark(at, "ended", "", f"deleted with {what}"))
                if member.uid:
                    self._gone_with(track, member.uid, at, what)


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


def _tree(members: list[_Track], start: datetime) -> list[tuple[_Track, int]]:
    """Members depth-first, each under the member it came from (the job's row when that is
    not drawn); siblings: controllers before pods, then by name and first sight."""
    uids = {m.uid for m in members if m.uid}
    children: dict[str, list[_Track]] = {}
    for m in members:
        parent = m.parent if m.parent in uids and m.parent != m.uid else ""
        children.setdefault(parent, []).append(m)
    for siblings in children.values():
        siblings.sort(key=lambda m: (m.kind == "Pod", m.name, m.seen[0].time if m.seen else start))
    order: list[tuple[_Track, int]] = []
    placed: set[int] = set()

    def place(parent: str, depth: int) -> None:
        for m in children.get(parent, ()):
            if id(m) not in placed:
                placed.add(id(m))
                order.append((m, depth))
                if m.uid:
                    place(m.uid, depth + 1)

    place("", 1)
    order += [(m, 1) for m in members if id(m) not in placed]  # a cycle of parents: flat
    return order


def _row(member: _Track, depth: int, same_name: int) -> Row:
    name = member.name if member.kind == "Pod" else f"{member.kind} {member.name}"
    label = name if same_name == 1 else f"{name} ({member.uid[:8]})"
    title = f"{member.kind} {member.namespace}/{member.name} uid {member.uid}"
    return Row(label, title, _spans(member.seen, member.ended), member.marks, member.kind, depth)


def _job_view(track: _JobTrack) -> JobView:
    times = track.times or [datetime.fromtimestamp(0, UTC)]  # never empty: a track starts with a time
    start, end = min(times), max(times)
    if end - start < timedelta(seconds=1):
        end = start + timedelta(seconds=1)
    if track.name:
        title = f"{track.kind} {track.namespace}/{track.name}"
        job, kind = track.job, track.training
        facts = job_facts(kind, job) if job and kind else "never seen in the stream"
        subtitle = f"uid {job.uid if job and job.uid else 'unknown'} · {facts}"
    else:
        title, subtitle = "Pods without a training job", "no job label or owner"
    rows = [Row(track.kind or "job", title, _spans(track.seen, None), list(track.marks), track.kind)]
    members = list(track.members.values())
    names = [(m.kind, m.name) for m in members]
    for member, depth in _tree(members, start):
        rows.append(_row(member, depth, names.count((member.kind, member.name))))
    return JobView(title, subtitle, start, end, rows, track.decisions, track.evidence)


def build(run: ReplayRun) -> Page:
    """The page's model, from the replay alone."""
    builder = _Builder()
    counts: dict[str, int] = {}
    ignored = 0
    for step in run.steps:
        trigger = step.intake.trigger
        if isinstance(trigger, ObjectChange):
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
