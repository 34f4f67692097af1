"""What an event asks podsweeper to do, as plain data: the triggers intake makes of events.

Pure, so the core (triage) and the reports (timeline, html) read triggers without the
pydantic edge that parses them (intake).
"""

from __future__ import annotations

from dataclasses import dataclass

from podsweeper import kinds
from podsweeper.model import Job, Pod, Verb, Workload


@dataclass(frozen=True)
class ObjectChange:
    """Resource mode: the object itself, as watched."""

    verb: Verb
    obj: Pod | Job | Workload


@dataclass(frozen=True)
class ReferenceChange:
    """Reference mode: only a name; the object must be read from the API."""

    verb: Verb
    kind: kinds.TrainingKind | None  # None means a Pod (or a chain's `link`)
    api_version: str
    namespace: str
    name: str
    link: kinds.Link | None = None  # a chain's JobSet or batch Job


@dataclass(frozen=True)
class SweepRequest:
    """PingSource tick: sweep every allowed namespace."""


@dataclass(frozen=True)
class Ignored:
    """Nothing to do, and why: the one "not relevant" answer (2xx, no API request)."""

    reason: str


Trigger = ObjectChange | ReferenceChange | SweepRequest | Ignored
