"""What every object shares: metadata, conditions, and the one validation path.

The family modules build on these, so a field every kind carries (an owner reference, the
skip annotation, a condition's time) is read one way, and every bad input says why in one
line.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from podsweeper.errors import BadEvent
from podsweeper.model import SKIP_ANNOTATION, Owner


class Schema(BaseModel):
    """A frozen pydantic model that ignores every field it does not name.

    Each model's validator is built when it first validates, not at import: a pod event
    needs a few of these models, and building them all made the cold start twice the
    framework's own."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)


class OwnerReference(Schema):
    apiVersion: str
    kind: str
    name: str
    uid: str = ""
    controller: bool | None = None


class ObjectMeta(Schema):
    name: str = Field(min_length=1, max_length=253)
    namespace: str = Field(default="", max_length=63)
    uid: str = ""
    resourceVersion: str = ""
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    ownerReferences: list[OwnerReference] | None = None
    deletionTimestamp: datetime | None = None
    creationTimestamp: datetime | None = None

    def opted_out(self) -> bool:
        return (self.annotations or {}).get(SKIP_ANNOTATION, "").lower() == "true"

    def owners(self) -> list[Owner]:
        return [
            Owner(o.apiVersion, o.kind, o.name, o.uid, bool(o.controller)) for o in self.ownerReferences or ()
        ]

    def controller(self) -> Owner | None:
        return next((o for o in self.owners() if o.controller), None)


class Condition(Schema):
    type: str
    status: str
    reason: str | None = None
    lastTransitionTime: datetime | None = None
    lastUpdateTime: datetime | None = None


class JobStatus(Schema):
    """The status of a training job, a JobSet or a batch Job: all say their state alike."""

    conditions: list[Condition] | None = None
    completionTime: str | None = None  # the mpi-operator's "settled" mark (kinds.Launcher)
    phase: str | None = None  # a Volcano PodGroup's (Pending, Inqueue, Running, Completed)


def finished_state(
    status: JobStatus | None, types: tuple[str, str] = ("Succeeded", "Failed")
) -> tuple[str | None, datetime | None, bool]:
    """Failed or succeeded (the condition type that says so, and since when), and whether
    the job is suspended. `types`: the kind's (success, failure) condition types."""
    success, failure = types
    true = {c.type: c for c in (status.conditions or ()) if c.status == "True"} if status else {}
    finished = failure if failure in true else success if success in true else None
    since = None
    if finished is not None:
        condition = true[finished]
        since = condition.lastTransitionTime or condition.lastUpdateTime
    return finished, since, "Suspended" in true


def condition_reason(status: JobStatus | None, condition: str) -> str:
    """The reason of a "True" condition of this type ("" when none says one)."""
    true = (
        [c for c in (status.conditions or ()) if c.type == condition and c.status == "True"] if status else []
    )
    return true[0].reason or "" if true else ""


class TypeMeta(Schema):
    """What every Kubernetes object says about itself; read when nothing else tells the kind."""

    apiVersion: str
    kind: str
    metadata: dict[str, Any]


class ObjectReference(Schema):
    """Reference-mode payload: just enough to GET the object."""

    apiVersion: str = Field(min_length=1)
    kind: str = Field(min_length=1)
    name: str = Field(min_length=1, max_length=253)
    namespace: str = Field(default="", max_length=63)


def one_line(error: ValidationError) -> str:
    """The first thing wrong with an input, where it is and what: never the input itself."""
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "object"
    return f"{where}: {first['msg']}"


def validate_json(model: type[Any], body: bytes | str, what: str) -> Any:
    """Validate JSON bytes against `model`; BadEvent with a one-line reason on failure."""
    try:
        return model.model_validate_json(body)
    except ValidationError as error:
        raise BadEvent(f"{what} invalid: {one_line(error)}") from None
    except RecursionError:
        raise BadEvent(f"{what} JSON is nested too deeply") from None


def validate_part(model: type[Any], raw: Any, what: str) -> Any:
    """A part of an already validated object (a replica spec, the runPolicy)."""
    if not isinstance(raw, dict):
        raise BadEvent(f"{what} is not a JSON object")
    try:
        return model.model_validate(raw)
    except ValidationError as error:
        raise BadEvent(f"{what} invalid: {one_line(error)}") from None
