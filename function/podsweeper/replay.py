"""`podsweeper replay`: what would the function have done with these recorded events, and why.

Events (CloudEvents JSON, one per line, Resource mode or PingSource) are fed in order to
the same pipeline the live function uses, against a SimulatedCluster built from the
events themselves. The simulated "now" is each event's `time`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TextIO

from podsweeper.cluster.simulated import SimulatedCluster
from podsweeper.config import Settings
from podsweeper.errors import BadEvent
from podsweeper.intake import EventAttributes, Intake, parse_event
from podsweeper.model import Namespace, Verb
from podsweeper.objects.namespaces import decode_namespace, is_namespace
from podsweeper.objects.pages import json_bytes
from podsweeper.pipeline import Outcome, Pipeline
from podsweeper.triggers import PING_TYPE, RESOURCE_PREFIX, ObjectChange, SweepRequest


class MalformedLine(Exception):
    """A line that is not a CloudEvent we accept; names the file and line."""

    def __init__(self, path: str, line: int, reason: str):
        super().__init__(f"{path}:{line}: {reason}")


@dataclass(frozen=True)
class ReplayStep:
    path: str
    line: int
    intake: Intake
    time: datetime
    outcome: Outcome
    observed: str | None  # why the event itself was ignored by the simulated cluster
    final: bool = False  # the sweep the replay runs after the last event


@dataclass
class ReplayRun:
    cluster: SimulatedCluster = field(default_factory=SimulatedCluster)
    steps: list[ReplayStep] = field(default_factory=list)


def read_events(path: str, stream: TextIO) -> Iterator[tuple[int, Intake, datetime]]:
    for number, intake, now, _, _ in read_versioned(path, stream):
        yield number, intake, now


def _resource_version(data: object) -> str:
    """The object's metadata.resourceVersion as sent ("" if none): a Job keeps none of its own."""
    meta = data.get("metadata") if isinstance(data, dict) else None
    version = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return version if isinstance(version, str) else ""


def read_versioned(
    path: str, stream: TextIO
) -> Iterator[tuple[int, Intake, datetime, str, Namespace | None]]:
    """Each event with its object's resourceVersion, which the simulated cluster orders by, and
    the Namespace it carries, if it is one (its annotations are that namespace's policy)."""
    for number, text in enumerate(stream, start=1):
        if not text.strip():
            continue
        try:
            raw = json.loads(text)
        except (ValueError, RecursionError):
            raise MalformedLine(path, number, "not valid JSON") from None
        if not isinstance(raw, dict):
            raise MalformedLine(path, number, "not a JSON object")
        attributes = {k: v for k, v in raw.items() if k not in ("data", "data_base64")}
        data = raw.get("data")
        try:
            intake = parse_event(attributes, None if data is None else json_bytes(data))
        except BadEvent as error:
            raise MalformedLine(path, number, str(error)) from None
        if intake.attributes.time is None:
            raise MalformedLine(path, number, "event has no 'time' attribute (the replay's clock)")
        namespace = None
        if (
            isinstance(data, dict)
            and is_namespace(data)
            and intake.attributes.type.startswith(RESOURCE_PREFIX)
        ):
            try:
                namespace = decode_namespace(json_bytes(data))
            except BadEvent as error:
                raise MalformedLine(path, number, str(error)) from None
        yield number, intake, intake.attributes.time, _resource_version(data), namespace


FINAL_SWEEP = "(final sweep)"


def replay(
    paths: list[str],
    settings: Settings,
    on_step: Callable[[ReplayStep], None] | None = None,
    final_sweep: bool = True,
) -> ReplayRun:
    """Replay files in order against one simulated cluster. Raises MalformedLine.

    Watches interleave: a job's Failed update can arrive before the pod events of the same
    moments, and the live function, which re-reads the cluster, still finds those pods. So
    the replay ends with the sweep the PingSource would run, at the latest time the stream
    showed: whatever order the events came in, it reaches what the live function reaches.
    An event older than one already seen for its object (resourceVersion) is reported as
    ignored rather than rolling the simulated object back (SimulatedCluster.observe).
    """
    run = ReplayRun()
    pipeline = Pipeline(run.cluster, settings, concurrent_deletes=False, namespace_cache_seconds=0)
    for path in paths:
        with Path(path).open(encoding="utf-8") as stream:
            for number, intake, now, version, namespace in read_versioned(path, stream):
                observed = None
                if namespace is not None:  # its policy from here on (the pipeline ignores it)
                    verb = intake.attributes.type.removeprefix(RESOURCE_PREFIX)
                    run.cluster.observe_namespace(Verb(verb), namespace)
                if isinstance(intake.trigger, ObjectChange):
                    observed = run.cluster.observe(intake.trigger.verb, intake.trigger.obj, version)
                outcome = (
                    Outcome(intake.attributes.id, note=observed) if observed else pipeline.handle(intake, now)
                )
                step = ReplayStep(path, number, intake, now, outcome, observed)
                run.steps.append(step)
                if on_step is not None:
                    on_step(step)
    if final_sweep and run.steps:
        last = max(step.time for step in run.steps)
        attributes = EventAttributes(id="final-sweep", source="podsweeper-replay", type=PING_TYPE, time=last)
        intake = Intake(attributes, SweepRequest())
        step = ReplayStep(FINAL_SWEEP, 0, intake, last, pipeline.handle(intake, last), None, final=True)
        run.steps.append(step)
        if on_step is not None:
            on_step(step)
    return run
