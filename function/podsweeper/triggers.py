"""What an event asks podsweeper to do, as plain data: the CloudEvent types it accepts and
the triggers intake makes of them.

Pure, so the core (triage) and the reports (timeline, html) read triggers without the
pydantic edge that parses them (intake), and the tools that write events (record, the CLI's
sweep) name their types from the one table intake accepts.
"""

from __future__ import annotations

from dataclasses import dataclass

from podsweeper import kinds
from podsweeper.model import Intermediate, Job, Pod, Verb

# Knative's ApiServerSource (`<prefix><verb>`, Resource and Reference mode) and PingSource.
RESOURCE_PREFIX = "dev.knative.apiserver.resource."
REFERENCE_PREFIX = "dev.knative.apiserver.ref."
PING_TYPE = "dev.knative.sources.ping"


def event_type(verb: Verb, reference: bool = False) -> str:
    """The ApiServerSource event type of a change, in Reference or Resource mode."""
    return (REFERENCE_PREFIX if reference else RESOURCE_PREFIX) + verb.value


ACCEPTED_TYPES = frozenset({PING_TYPE} | {event_type(verb, ref) for ref in (False, True) for verb in Verb})


@dataclass(frozen=True)
class ObjectChange:
    """Resource mode: the object itself, as watched."""

    verb: Verb
    obj: Pod | Job | Intermediate


@dataclass(frozen=True)
class ReferenceChange:
    """Reference mode: only a name; the object must be read from the API."""

    verb: Verb
    kind: kinds.TrainingKind | None  # None means a Pod (or a chain's `link`)
    api_version: str
    namespace: str
    name: str
    link: kinds.IntermediateKind | None = None  # a chain's JobSet or batch Job


@dataclass(frozen=True)
class SweepRequest:
    """PingSource tick: sweep every allowed namespace."""


@dataclass(frozen=True)
class Ignored:
    """Nothing to do, and why: the one "not relevant" answer (2xx, no API request)."""

    reason: str


Trigger = ObjectChange | ReferenceChange | SweepRequest | Ignored
