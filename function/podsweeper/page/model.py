"""The replay page's model: what a timeline shows, as plain data, with nothing of how it is drawn.

`podsweeper.page.build` fills it from a replay; `podsweeper.page.render` draws it. Kept apart
so the tests can ask what the page says (which rows, which states, which marks on which row)
without reading SVG.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from podsweeper.model import ContainerView


@dataclass(frozen=True)
class Span:
    """A state held from `start` until `end` (None: until the end of the job's timeline)."""

    start: datetime
    end: datetime | None
    label: str
    # CSS class: pending, running, succeeded, failed, unknown, created, suspended, deleted, orphaned
    tone: str
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
    target: str  # "Pod ns/name", "JobSet ns/name", "PyTorchJob ns/name"
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
    """One object's lane: the job, a JobSet or batch Job of its chain, or a pod."""

    label: str
    title: str
    spans: list[Span] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    kind: str = "Pod"  # "Pod", a chain's "JobSet"/"Job", or the job's own kind
    depth: int = 0  # 0 the job; below it, one more than the row of the controller it came from


@dataclass
class JobView:
    title: str
    subtitle: str
    start: datetime
    end: datetime
    rows: list[Row]  # the job's row first, then each row after the row it hangs from
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
