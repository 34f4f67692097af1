"""A job's timeline as inline SVG: a time axis, one lane per row, bars for spans, marks on top.

Only geometry and markup: what the rows, spans and marks are is the model's
(`podsweeper.page.model`); their colours are the stylesheet's classes (`podsweeper.page.style`).
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from datetime import datetime, timedelta

from podsweeper.page.model import JobView, Mark, Row, Span

WIDTH = 1000
LABEL = 220  # the row labels' column
RIGHT = 24
ROW = 34
BAR = 16
AXIS = 28
INDENT = 10  # a row's label, per level below the job's
TICKS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)


def esc(text: object) -> str:
    """Text or an attribute value from the stream, safe in HTML and SVG."""
    return html.escape(str(text), quote=True)


def _clip(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def hms(moment: datetime) -> str:
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
    until = hms(span.end) if span.end else "end of replay"
    title = f"{span.label}: {hms(span.start)} – {until}" + (f"\n{span.note}" if span.note else "")
    parts = [
        f"<g><title>{esc(title)}</title>"
        f'<rect class="{esc(span.tone)}" x="{x0:.1f}" y="{y:.1f}" width="{width:.1f}" height="{BAR}" rx="3"/>'
    ]
    if span.crash_loop:
        parts.append(
            f'<rect class="crash" x="{x0:.1f}" y="{y:.1f}" width="{width:.1f}" height="{BAR}" rx="3"/>'
        )
    label = next((text for text in (span.label, span.short) if width > 7 * len(text) + 8), None)
    if label:
        dark = " dark" if span.tone in ("pending", "created") else ""
        parts.append(
            f'<text class="barlabel{dark}" x="{x0 + 5:.1f}" y="{y + BAR - 4:.1f}">{esc(label)}</text>'
        )
    parts.append("</g>")
    return "".join(parts)


def _svg_mark(axis: _Axis, mark: Mark, y: float) -> str:
    """A restart tick, an ignored event's ring, or the cross where a pod ended."""
    x = axis.x(mark.time)
    mid = y + BAR / 2
    title = f"<title>{esc(mark.title)}</title>"
    if mark.kind == "restart":
        return (
            f'<g>{title}<line class="restart" x1="{x:.1f}" y1="{y - 3:.1f}" '
            f'x2="{x:.1f}" y2="{y + BAR + 3:.1f}"/>'
            f'<text class="restarttext" x="{x + 3:.1f}" y="{y + BAR + 10:.1f}">↻{esc(mark.label)}</text></g>'
        )
    if mark.kind == "ignored":
        restarts = (
            f'<text class="ignoredtext" x="{x + 3:.1f}" y="{y + BAR + 10:.1f}">↻{esc(mark.label)}</text>'
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
        f'<g><title>{esc(row.title)}</title><text class="rowlabel" x="{4 + INDENT * row.depth}" '
        f'y="{y + BAR - 4:.1f}">{esc(_clip(row.label, 30 - INDENT * row.depth // 7))}</text></g>',
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
        f'<g class="{esc(mark.kind)}"><title>{esc(mark.title)}</title>'
        f'<rect x="{x - 0.75:.1f}" y="{tip:.1f}" width="1.5" height="{BAR + 2}"/>'
        f'<path class="marker" d="M{x:.1f} {tip:.1f} l-5.5 -8 h11 z"/></g>'
    )


def timeline(job: JobView) -> str:
    """The job's timeline: a time axis, the job's row, then its JobSets, Jobs and pods, each
    indented under the row of the controller it came from."""
    span = job.end - job.start
    pad = max(span * 0.03, timedelta(seconds=1))
    axis = _Axis(job.start - pad, job.end + pad)
    rows = job.rows
    height = AXIS + 14 + ROW * len(rows) + 6
    parts = [
        f'<svg class="timeline" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="timeline of {esc(job.title)}">'
    ]
    for moment in axis.ticks():
        x = axis.x(moment)
        parts.append(
            f'<line class="grid" x1="{x:.1f}" y1="{AXIS - 6}" x2="{x:.1f}" y2="{height}"/>'
            f'<text class="tick" x="{x:.1f}" y="{AXIS - 10}" text-anchor="middle">{hms(moment)}</text>'
        )
    for i, row in enumerate(rows):
        y = AXIS + 14 + ROW * i
        parts.append(_svg_row(axis, row, y, job.end + pad / 2))
    parts.append("</svg>")
    return "".join(parts)
