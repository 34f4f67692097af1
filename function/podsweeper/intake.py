"""CloudEvents in, triggers out: the typed edge for what Knative sends.

Accepts ApiServerSource Resource and Reference mode and PingSource events. Anything
else is BadEvent (400). A valid Kubernetes object of another kind is Ignored (2xx).
The event's data arrives as the JSON bytes it was sent as, and is validated from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import Field, ValidationError

from podsweeper import kinds
from podsweeper.errors import BadEvent
from podsweeper.model import Verb
from podsweeper.objects.base import ObjectReference, Schema, TypeMeta, one_line, validate_json
from podsweeper.objects.intermediates import IntermediateObject, intermediate_from
from podsweeper.objects.jobs import JobObject, job_from
from podsweeper.objects.pods import PodObject, pod_from
from podsweeper.triggers import (
    PING_TYPE,
    REFERENCE_PREFIX,
    RESOURCE_PREFIX,
    Ignored,
    ObjectChange,
    ReferenceChange,
    SweepRequest,
    Trigger,
)


class EventAttributes(Schema):
    """The CloudEvent context attributes podsweeper reads."""

    id: str = Field(min_length=1, max_length=256)
    source: str = Field(min_length=1, max_length=2048)
    type: str = Field(min_length=1, max_length=256)
    specversion: str = "1.0"
    time: datetime | None = None
    subject: str | None = None


@dataclass(frozen=True)
class Intake:
    attributes: EventAttributes
    trigger: Trigger


def _is_pod(api_version: str, kind: str) -> bool:
    return api_version == "v1" and kind == "Pod"


def _type_meta(body: bytes) -> tuple[str, str]:
    try:
        meta = TypeMeta.model_validate_json(body)
    except ValidationError as error:
        if error.errors()[0]["type"] == "json_invalid":
            raise BadEvent("data is not valid JSON") from None
        raise BadEvent(
            f"data is not a Kubernetes object (needs apiVersion, kind, metadata): {one_line(error)}"
        ) from None
    except RecursionError:
        raise BadEvent("data JSON is nested too deeply") from None
    return meta.apiVersion, meta.kind


def _typed(verb: Verb, body: bytes, api_version: str, kind: str) -> ObjectChange | None:
    """The body as the pod or training job it is said to be; None if it is neither, or if
    the body itself says it is another kind."""
    if _is_pod(api_version, kind):
        pod = validate_json(PodObject, body, "pod")
        return ObjectChange(verb, pod_from(pod)) if _is_pod(pod.apiVersion, pod.kind) else None
    if kinds.lookup(api_version, kind) is not None:
        job = validate_json(JobObject, body, "job")
        return ObjectChange(verb, job_from(job)) if kinds.lookup(job.apiVersion, job.kind) else None
    if kinds.intermediate_lookup(api_version, kind) is not None:
        intermediate = validate_json(IntermediateObject, body, kind)
        if kinds.intermediate_lookup(intermediate.apiVersion, intermediate.kind) is None:
            return None
        return ObjectChange(verb, intermediate_from(intermediate))
    return None


def _object_change(verb: Verb, body: bytes, hint: tuple[str, str] | None) -> Trigger:
    """The object in the body. ApiServerSource names its kind in the event's extensions; the
    body's own apiVersion/kind are read only when they are absent or disagree."""
    if hint is not None:
        try:
            typed = _typed(verb, body, *hint)
        except BadEvent:
            _type_meta(body)  # not an object at all: say so rather than what the model missed
            raise
        if typed is not None:
            return typed
    api_version, kind = _type_meta(body)
    return _typed(verb, body, api_version, kind) or Ignored(
        f"{api_version}/{kind} is neither a pod, a training job nor a JobSet/Job of one"
    )


def _reference_change(verb: Verb, body: bytes) -> Trigger:
    ref = validate_json(ObjectReference, body, "reference")
    if _is_pod(ref.apiVersion, ref.kind):
        return ReferenceChange(verb, None, ref.apiVersion, ref.namespace, ref.name)
    kind = kinds.lookup(ref.apiVersion, ref.kind)
    if kind is None:
        link = kinds.intermediate_lookup(ref.apiVersion, ref.kind)
        if link is not None:
            return ReferenceChange(verb, None, ref.apiVersion, ref.namespace, ref.name, link)
        return Ignored(
            f"{ref.apiVersion}/{ref.kind} is neither a pod, a training job nor a JobSet/Job of one"
        )
    return ReferenceChange(verb, kind, ref.apiVersion, ref.namespace, ref.name)


def _hint(attributes: Mapping[str, Any]) -> tuple[str, str] | None:
    api_version, kind = attributes.get("apiversion"), attributes.get("kind")
    if isinstance(api_version, str) and isinstance(kind, str) and api_version and kind:
        return api_version, kind
    return None


def parse_event(attributes: Mapping[str, Any], data: bytes | None) -> Intake:
    """Turn one CloudEvent (its attributes, and its data as sent) into a trigger."""
    try:
        attrs = EventAttributes.model_validate(dict(attributes))
    except ValidationError as error:
        raise BadEvent(f"CloudEvent attributes invalid: {one_line(error)}") from None
    event_type = attrs.type
    if event_type == PING_TYPE:
        return Intake(attrs, SweepRequest())
    for prefix in (RESOURCE_PREFIX, REFERENCE_PREFIX):
        if not event_type.startswith(prefix):
            continue
        try:
            verb = Verb(event_type.removeprefix(prefix))
        except ValueError:
            break
        if not data:
            raise BadEvent("data is not a Kubernetes object: the event carries no data")
        if prefix == RESOURCE_PREFIX:
            return Intake(attrs, _object_change(verb, data, _hint(attributes)))
        return Intake(attrs, _reference_change(verb, data))
    raise BadEvent(f"unknown CloudEvent type {event_type[:100]!r}")
