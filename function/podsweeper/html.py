"""`podsweeper replay --html`: one self-contained page with a timeline per training job.

`build(run)` turns a ReplayRun into a plain model (jobs, their states over time, each pod's
phases and restarts as spans, decisions as marks, the evidence of deleted pods); `render(page)`
writes it as HTML with inline CSS and inline SVG. No script, no external resource: the page's
Content-Security-Policy forbids any fetch, and every string from the stream goes through
`html.escape`. Pure: the caller writes the file.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from podsweeper.decisions import Action, Decision, Result
from podsweeper.model import ContainerView, Job, Pod, Verb, Workload
from podsweeper.replay import ReplayRun, ReplayStep
from podsweeper.triggers import Ignored, ObjectChange, SweepRequest

NO_JOB = ("", "", "")  # the group of pods that name no training job

# -- the model -------------------------------------------------------------------------


@dataclass(frozen=True)
class Span:
    """A state held from `start` until `end` (None: until the end of the job's timeline)."""

    start: datetime
    end: datetime | None
    label: str
    tone: str  # CSS class: pending, running, succeeded, failed, unknown, created, suspended, deleted
    crash_loop: bool = False
    note: str = ""
    short: str = ""  # the label when the bar is too narrow for `label`


@dataclass(frozen=True)
class Mark:
    """Something that happened at one instant on a row (hover text in `title`)."""

    time: datetime
    kind: str  # restart, ignored, ended, decision-<action>
    label: str
    title: str


@dataclass(frozen=True)
class DecisionView:
    time: datetime
    where: str  # file:line of the event that led to it
    trigger: str
    rule: str
    action: str
    result: str
    target: str  # "Pod ns/name" or "PyTorchJob ns/name"
    reason: str


@dataclass(frozen=True)
class EvidenceView:
    pod: str
    time: datetime
    rule: str
    result: str
    containers: tuple[ContainerView, ...]


@dataclass
class Row:
    label: str
    title: str
    spans: list[Span] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)


@dataclass
class JobView:
    title: str
    subtitle: str
    start: datetime
    end: datetime
    job_row: Row
    pod_rows: list[Row]
    decisions: list[DecisionView]
    evidence: list[EvidenceView]


@dataclass(frozen=True)
class Page:
    files: tuple[str, ...]
    events: int
    ignored_events: int
    counts: tuple[tuple[str, int], ...]
    pods_left: tuple[str, ...]
    jobs: tuple[JobView, ...]


# -- building the model from a ReplayRun -----------------------------------------------


@dataclass
class _Seen:
    """One observed state of a row, before it becomes a span."""

    time: datetime
    label: str
    tone: str
    crash_loop: bool = False
    note: str = ""
    restarts: int = 0
    short: str = ""


@dataclass
class _PodTrack:
    namespace: str
    name: str
    uid: str
    seen: list[_Seen] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    ended: datetime | None = None


@dataclass
class _JobTrack:
    kind: str
    namespace: str
    name: str
    uid: str = ""
    policy: str = ""
    seen: list[_Seen] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    pods: dict[str, _PodTrack] = field(default_factory=dict)
    decisions: list[DecisionView] = field(default_factory=list)
    evidence: list[EvidenceView] = field(default_factory=list)
    times: list[datetime] = field(default_factory=list)


def _restarts(pod: Pod) -> int:
    return max((c.restart_count for c in pod.containers), default=0)


def _pod_state(pod: Pod, at: datetime) -> _Seen:
    restarts = _restarts(pod)
    loops = pod.max_crash_loop_restarts()
    label = pod.phase + (" (terminating)" if pod.terminating else "")
    if loops:
        label += f", CrashLoopBackOff x{loops}"
    elif restarts:
        label += f", {restarts} restarts"
    tone = pod.phase.lower() if pod.phase in ("Pending", "Running", "Succeeded", "Failed") else "unknown"
    short = f"CrashLoop x{loops}" if loops else pod.phase
    return _Seen(at, label, tone, crash_loop=bool(loops), restarts=restarts, short=short)


def _job_state(job: Job, verb: Verb, at: datetime) -> _Seen:
    if verb is Verb.DELETE:
        return _Seen(at, "deleted", "deleted", note="the job was deleted (watch event)")
    if job.finished:
        since = f"; condition since {job.finished_at:%H:%M:%S}" if job.finished_at else ""
        return _Seen(at, f"finished: {job.finished}", job.finished.lower(), note=f"{job.finished}{since}")
    if job.suspended:
        return _Seen(at, "suspended", "suspended", note="spec.runPolicy.suspend is true")
    if verb is Verb.ADD:
        return _Seen(at, "created", "created", note="added, not finished")
    return _Seen(at, "running", "running", note="updated, no Succeeded/Failed condition")


def _trigger(step: ReplayStep) -> str:
    trigger = step.intake.trigger
    if isinstance(trigger, SweepRequest):
        return "backstop sweep (ping)"
    if isinstance(trigger, ObjectChange):
        obj = trigger.obj
        kind = (
            "pod" if isinstance(obj, Pod) else obj.link.kind if isinstance(obj, Workload) else obj.kind.kind
        )
        return f"{kind} {trigger.verb.value} {obj.namespace}/{obj.name}"
    if isinstance(trigger, Ignored):
        return f"ignored event: {trigger.reason}"
    return f"reference {trigger.verb.value} {trigger.namespace}/{trigger.name}"


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
            track.seen.append(_job_state(obj, verb, step.time))
            return
        track = self.job(obj.job.key if obj.job else NO_JOB)
        track.times.append(step.time)
        pod = self.pod(track, obj.namespace, obj.name, obj.uid)
        if step.observed or pod.ended is not None:
            why = f"event ignored, {step.observed}" if step.observed else "seen after it ended"
            restarts = str(_restarts(obj)) if _restarts(obj) else ""
            pod.marks.append(Mark(step.time, "ignored", restarts, f"{_state_text(obj)}: {why}"))
        elif verb is Verb.DELETE:
            pod.ended = step.time
            pod.marks.append(Mark(step.time, "ended", "", "deleted (watch event)"))
        else:
            seen = _pod_state(obj, step.time)
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
            f"rule: {decision.rule.value}\nreason: {decision.reason}\nevent: {_trigger(step)}"
        )
        mark = Mark(step.time, f"decision-{decision.action.value}", "", title)
        track.decisions.append(
            DecisionView(
                step.time,
                f"{step.path}:{step.line}",
                _trigger(step),
                decision.rule.value,
                decision.action.value,
                outcome,
                target,
                decision.reason,
            )
        )
        if decision.action is Action.SUSPEND and result is Result.SUSPENDED:  # the pod's job
            track.seen.append(_Seen(step.time, "suspended", "suspended", note="suspended by podsweeper"))
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


def _state_text(pod: Pod) -> str:
    return _pod_state(pod, datetime.min).label


def _spans(seen: list[_Seen], ended: datetime | None) -> list[Span]:
    """Consecutive observations as spans, repeats of the same state merged."""
    merged: list[_Seen] = []
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


# -- rendering -------------------------------------------------------------------------

WIDTH = 1000
LABEL = 220  # the row labels' column
RIGHT = 24
ROW = 34
BAR = 16
AXIS = 28
TICKS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)

CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;
  color:#1d2430;background:#fafbfc}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:0}
.sub{color:#5b6472;font-size:13px;margin:2px 0 10px}
section.job{background:#fff;border:1px solid #d8dde4;border-radius:6px;padding:14px 16px;margin:18px 0}
svg.timeline{width:100%;height:auto;display:block;margin:6px 0 10px}
svg text{font:12px system-ui,sans-serif;fill:#1d2430}
svg .tick{fill:#5b6472;font-size:11px}svg .grid{stroke:#e4e8ee}svg .lane{fill:#f3f5f8}
svg .barlabel{fill:#fff;font-size:11px;pointer-events:none}
svg .barlabel.dark{fill:#1d2430}
.pending{fill:#e6a817;background:#e6a817}.running{fill:#3b7dd8;background:#3b7dd8}
.succeeded{fill:#2e9d57;background:#2e9d57}.failed{fill:#d0433b;background:#d0433b}
.unknown{fill:#8a939f;background:#8a939f}.created{fill:#9fb7d6;background:#9fb7d6}
.suspended{fill:#8c5cc7;background:#8c5cc7}.deleted{fill:#6b7280;background:#6b7280}
.crash{fill:url(#crash)}
svg .restart{stroke:#7a1010;stroke-width:2}svg .restarttext{fill:#7a1010;font-size:10px;font-weight:600}
svg .ignored{fill:#fff;stroke:#8a939f;stroke-width:1.5}svg .ignoredtext{fill:#6b7280;font-size:10px}
svg .ended{stroke:#1d2430;stroke-width:2.5}
.decision-delete{fill:#b91c1c;background:#b91c1c}.decision-warn{fill:#f59e0b;background:#f59e0b}
.decision-suspend{fill:#7c3aed;background:#7c3aed}.decision-skip{fill:#9ca3af;background:#9ca3af}
svg .marker{stroke:#fff;stroke-width:1.2}
table{border-collapse:collapse;width:100%;margin:6px 0 10px;font-size:13px}
th,td{border-bottom:1px solid #e4e8ee;padding:4px 6px;text-align:left;vertical-align:top}
th{background:#f3f5f8;font-weight:600}
td.mono,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
.legend{display:flex;flex-wrap:wrap;gap:6px 16px;font-size:12px;margin:10px 0}
.legend span.sw{display:inline-block;width:14px;height:10px;border-radius:2px;margin-right:5px;
  vertical-align:-1px}
.pill{display:inline-block;padding:0 6px;border-radius:8px;color:#fff;font-size:12px}
h3{font-size:14px;margin:12px 0 2px}
.none{color:#5b6472;font-style:italic}
"""

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _clip(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def _hms(moment: datetime) -> str:
    return f"{moment:%H:%M:%S}"


class _Axis:
    def __init__(self, start: datetime, end: datetime) -> None:
        self.start, self.seconds = start, (end - start).total_seconds()
        self.left, self.width = LABEL + 8, WIDTH - LABEL - 8 - RIGHT

    def x(self, moment: datetime) -> float:
        return self.left + self.width * (moment - self.start).total_seconds() / self.seconds

    def ticks(self) -> Iterable[datetime]:
        step = next((s for s in TICKS if self.seconds / s <= 8), TICKS[-1])
        first = self.start.replace(microsecond=0)
        offset = (-(first.hour * 3600 + first.minute * 60 + first.second)) % step
        moment = first + timedelta(seconds=offset)
        end = self.start + timedelta(seconds=self.seconds)
        while moment <= end:
            if moment >= self.start:
                yield moment
            moment += timedelta(seconds=step)


def _svg_span(axis: _Axis, span: Span, y: float, end: datetime) -> str:
    x0 = axis.x(span.start)
    x1 = axis.x(span.end or end)
    width = max(x1 - x0, 3.0)
    until = _hms(span.end) if span.end else "end of replay"
    title = f"{span.label}: {_hms(span.start)} – {until}" + (f"\n{span.note}" if span.note else "")
    parts = [
        f"<g><title>{_e(title)}</title>"
        f'<rect class="{_e(span.tone)}" x="{x0:.1f}" y="{y:.1f}" width="{width:.1f}" height="{BAR}" rx="3"/>'
    ]
    if span.crash_loop:
        parts.append(
            f'<rect class="crash" x="{x0:.1f}" y="{y:.1f}" width="{width:.1f}" height="{BAR}" rx="3"/>'
        )
    label = next((text for text in (span.label, span.short) if width > 7 * len(text) + 8), None)
    if label:
        dark = " dark" if span.tone in ("pending", "created") else ""
        parts.append(
            f'<text class="barlabel{dark}" x="{x0 + 5:.1f}" y="{y + BAR - 4:.1f}">{_e(label)}</text>'
        )
    parts.append("</g>")
    return "".join(parts)


def _svg_mark(axis: _Axis, mark: Mark, y: float) -> str:
    """A restart tick, an ignored event's ring, or the cross where a pod ended."""
    x = axis.x(mark.time)
    mid = y + BAR / 2
    title = f"<title>{_e(mark.title)}</title>"
    if mark.kind == "restart":
        return (
            f'<g>{title}<line class="restart" x1="{x:.1f}" y1="{y - 3:.1f}" '
            f'x2="{x:.1f}" y2="{y + BAR + 3:.1f}"/>'
            f'<text class="restarttext" x="{x + 3:.1f}" y="{y + BAR + 10:.1f}">↻{_e(mark.label)}</text></g>'
        )
    if mark.kind == "ignored":
        restarts = (
            f'<text class="ignoredtext" x="{x + 3:.1f}" y="{y + BAR + 10:.1f}">↻{_e(mark.label)}</text>'
        )
        return (
            f'<g>{title}<circle class="ignored" cx="{x:.1f}" cy="{mid:.1f}" r="4"/>'
            f"{restarts if mark.label else ''}</g>"
        )
    return (
        f'<g>{title}<line class="ended" x1="{x - 5:.1f}" y1="{mid - 5:.1f}" '
        f'x2="{x + 5:.1f}" y2="{mid + 5:.1f}"/>'
        f'<line class="ended" x1="{x - 5:.1f}" y1="{mid + 5:.1f}" x2="{x + 5:.1f}" y2="{mid - 5:.1f}"/></g>'
    )


def _svg_row(axis: _Axis, row: Row, y: float, end: datetime) -> str:
    parts = [
        f'<rect class="lane" x="{axis.left:.1f}" y="{y - 3:.1f}" '
        f'width="{axis.width:.1f}" height="{BAR + 6}"/>',
        f'<g><title>{_e(row.title)}</title><text class="rowlabel" x="4" y="{y + BAR - 4:.1f}">'
        f"{_e(_clip(row.label, 30))}</text></g>",
    ]
    if not row.spans:
        parts.append(f'<text class="tick" x="{axis.left + 6:.1f}" y="{y + BAR - 4:.1f}">not seen</text>')
    parts += [_svg_span(axis, span, y, end) for span in row.spans]
    seen: dict[datetime, int] = {}
    for mark in sorted(row.marks, key=lambda m: m.kind.startswith("decision")):  # decisions on top
        if mark.kind.startswith("decision"):
            offset = seen.get(mark.time, 0)  # several decisions at one instant: side by side
            seen[mark.time] = offset + 1
            parts.append(_decision_marker(axis, mark, y, offset))
        else:
            parts.append(_svg_mark(axis, mark, y))
    return "".join(parts)


def _decision_marker(axis: _Axis, mark: Mark, y: float, offset: int) -> str:
    x = axis.x(mark.time) + offset * 9
    tip = y - 1
    return (
        f'<g class="{_e(mark.kind)}"><title>{_e(mark.title)}</title>'
        f'<rect x="{x - 0.75:.1f}" y="{tip:.1f}" width="1.5" height="{BAR + 2}"/>'
        f'<path class="marker" d="M{x:.1f} {tip:.1f} l-5.5 -8 h11 z"/></g>'
    )


def _svg(job: JobView) -> str:
    span = job.end - job.start
    pad = max(span * 0.03, timedelta(seconds=1))
    axis = _Axis(job.start - pad, job.end + pad)
    rows = [job.job_row, *job.pod_rows]
    height = AXIS + 14 + ROW * len(rows) + 6
    parts = [
        f'<svg class="timeline" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="timeline of {_e(job.title)}">'
    ]
    for moment in axis.ticks():
        x = axis.x(moment)
        parts.append(
            f'<line class="grid" x1="{x:.1f}" y1="{AXIS - 6}" x2="{x:.1f}" y2="{height}"/>'
            f'<text class="tick" x="{x:.1f}" y="{AXIS - 10}" text-anchor="middle">{_hms(moment)}</text>'
        )
    for i, row in enumerate(rows):
        y = AXIS + 14 + ROW * i
        parts.append(_svg_row(axis, row, y, job.end + pad / 2))
    parts.append("</svg>")
    return "".join(parts)


def _decisions_table(job: JobView) -> str:
    if not job.decisions:
        return '<p class="none">No decisions.</p>'
    rows = "".join(
        f'<tr><td class="mono">{_hms(d.time)}</td>'
        f'<td><span class="pill decision-{_e(d.action)}">{_e(d.action)}</span></td>'
        f'<td class="mono">{_e(d.rule)}</td><td>{_e(d.target)}</td><td>{_e(d.result)}</td>'
        f'<td>{_e(d.reason)}</td><td class="mono" title="{_e(d.trigger)}">{_e(d.where)}</td></tr>'
        for d in job.decisions
    )
    return (
        '<table class="decisions"><thead><tr><th>time</th><th>action</th><th>rule</th><th>target</th>'
        f"<th>result</th><th>reason</th><th>event</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def _optional(value: object) -> str:
    return "–" if value is None else _e(value)


def _evidence_table(job: JobView) -> str:
    if not job.evidence:
        return ""
    rows = []
    for item in job.evidence:
        containers = item.containers or (None,)
        for c in containers:
            cells = (
                f"<td>{_e(c.name)}</td><td>{c.restart_count}</td><td>{_optional(c.exit_code)}</td>"
                f"<td>{_optional(c.reason)}</td><td>{_optional(c.waiting_reason)}</td>"
                f"<td>{_optional(c.message)}</td>"
                if c is not None
                else '<td colspan="6" class="none">no container evidence</td>'
            )
            rows.append(
                f"<tr><td>{_e(item.pod)}</td><td class='mono'>{_hms(item.time)}</td>"
                f"<td>{_e(item.result)}</td>"
                f"<td class='mono'>{_e(item.rule)}</td>{cells}</tr>"
            )
    return (
        "<h3>Evidence of deleted pods</h3><table class='evidence'><thead><tr><th>pod</th><th>time</th>"
        "<th>result</th><th>rule</th><th>container</th><th>restarts</th><th>exit code</th><th>reason</th>"
        f"<th>waiting</th><th>message</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _legend() -> str:
    items = [
        ("pending", "Pending"),
        ("running", "Running"),
        ("succeeded", "Succeeded"),
        ("failed", "Failed"),
        ("unknown", "Unknown"),
        ("created", "job created"),
        ("suspended", "job suspended"),
        ("deleted", "job deleted"),
        ("decision-delete", "▼ delete"),
        ("decision-warn", "▼ warn"),
        ("decision-suspend", "▼ suspend"),
        ("decision-skip", "▼ skip"),
    ]
    swatches = "".join(f'<span><span class="sw {cls}"></span>{_e(text)}</span>' for cls, text in items)
    return (
        f'<div class="legend">{swatches}<span>hatched: CrashLoopBackOff</span>'
        "<span>↻N: restart count went up</span><span>✕: pod deleted</span>"
        "<span>○ ↻N: recorded event after the pod was gone (ignored), its restart count</span>"
        "<span>hover a bar or mark for details</span></div>"
    )


def _range(job: JobView) -> str:
    zone = f" {job.start.tzname()}" if job.start.tzname() else ""
    return f"{job.start:%Y-%m-%d %H:%M:%S} – {_hms(job.end)}{zone}"


def render(page: Page) -> str:
    counts = ", ".join(f"{count} × {key}" for key, count in page.counts) or "none"
    sections = "".join(
        f'<section class="job"><h2>{_e(job.title)}</h2><div class="sub">{_e(job.subtitle)} · '
        f"{_e(_range(job))}</div>{_svg(job)}"
        f"<h3>Decisions</h3>{_decisions_table(job)}{_evidence_table(job)}</section>"
        for job in page.jobs
    )
    defs = (
        '<svg width="0" height="0" style="position:absolute" aria-hidden="true"><defs>'
        '<pattern id="crash" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)">'
        '<rect width="3" height="6" fill="#7a1010" fill-opacity="0.55"/></pattern></defs></svg>'
    )
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_e(CSP)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>podsweeper replay: {_e(', '.join(page.files))}</title><style>{CSS}</style></head>"
        f"<body>{defs}<h1>podsweeper replay</h1>"
        f'<div class="sub">{_e(", ".join(page.files) or "no events")} · {page.events} events '
        f"({page.ignored_events} ignored) · simulated cluster, nothing real was touched</div>"
        f"<div>decisions: {_e(counts)}</div>"
        f"<div>pods left in the simulated cluster: {_e(', '.join(page.pods_left) or 'none')}</div>"
        f"{_legend()}{sections or '<p class=none>No training jobs or pods in these events.</p>'}"
        "</body></html>\n"
    )


def page(run: ReplayRun) -> str:
    """The whole HTML page for a replay."""
    return render(build(run))
