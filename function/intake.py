"""CloudEvents in, triggers out: the typed edge for what Knative sends.

Accepts ApiServerSource Resource and Reference mode and PingSource events. Anything
else is BadEvent (400). A valid Kubernetes object of another kind is Irrelevant (2xx).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import Field

from function import kinds
from function.errors import BadEvent
from function.model import Job, Pod
from function.objects import (
    JobObject, ObjectReference, PodObject, RawJSON, _Model, job_from, pod_from, validate, validate_json,
)

RESOURCE_PREFIX = "dev.knative.apiserver.resource."
REFERENCE_PREFIX = "dev.knative.apiserver.ref."
PING_TYPE = "dev.knative.sources.ping"
VERBS = frozenset({"add", "update", "delete"})


class EventAttributes(_Model):
    """The CloudEvent context attributes podsweeper reads."""

    id: str = Field(min_length=1, max_length=256)
    source: str = Field(min_length=1, max_length=2048)
    type: str = Field(min_length=1, max_length=256)
    specversion: str = "1.0"
    time: datetime | None = None
    subject: str | None = None


@dataclass(frozen=True)
class ObjectChange:
    """Resource mode: the object itself, as watched."""

    verb: str
    obj: Pod | Job


@dataclass(frozen=True)
class ReferenceChange:
    """Reference mode: only a name; the object must be read from the API."""

    verb: str
    kind: kinds.TrainingKind | None  # None means a Pod
    api_version: str
    namespace: str
    name: str


@dataclass(frozen=True)
class SweepRequest:
    """PingSource tick: sweep every allowed namespace."""


@dataclass(frozen=True)
class Irrelevant:
    reason: str


Trigger = ObjectChange | ReferenceChange | SweepRequest | Irrelevant


@dataclass(frozen=True)
class Intake:
    attributes: EventAttributes
    trigger: Trigger


def _is_pod(api_version: str, kind: str) -> bool:
    return api_version == "v1" and kind == "Pod"


def _typed_from_bytes(verb: str, data: RawJSON, hint: tuple[Any, Any]) -> Trigger | None:
    """Validate straight from the body when the event's kind/apiversion extensions say what
    it is (ApiServerSource always sets them); None if the object turns out to be another kind."""
    api_version, kind = hint
    if _is_pod(api_version, kind):
        pod = validate_json(PodObject, data.body, "pod")
        return ObjectChange(verb, pod_from(pod)) if _is_pod(pod.apiVersion, pod.kind) else None
    if kinds.lookup(api_version, kind) is not None:
        job = validate_json(JobObject, data.body, "job")
        return ObjectChange(verb, job_from(job)) if kinds.lookup(job.apiVersion, job.kind) else None
    return None


def _object_change(verb: str, data: Any, hint: tuple[Any, Any]) -> Trigger:
    if isinstance(data, RawJSON):
        typed = _typed_from_bytes(verb, data, hint)
        if typed is not None:
            return typed
        data = data.decode()
    if not isinstance(data, dict) or not isinstance(data.get("metadata"), dict) \
            or not isinstance(data.get("kind"), str) or not isinstance(data.get("apiVersion"), str):
        raise BadEvent("data is not a Kubernetes object (needs apiVersion, kind, metadata)")
    api_version, kind = data["apiVersion"], data["kind"]
    if _is_pod(api_version, kind):
        return ObjectChange(verb, pod_from(validate(PodObject, data, "pod")))
    if kinds.lookup(api_version, kind) is not None:
        return ObjectChange(verb, job_from(validate(JobObject, data, "job")))
    return Irrelevant(f"{api_version}/{kind} is neither a pod nor a training job")


def _reference_change(verb: str, data: Any, hint: tuple[Any, Any]) -> Trigger:
    if isinstance(data, RawJSON):
        data = data.decode()
    ref = validate(ObjectReference, data, "reference")
    if _is_pod(ref.apiVersion, ref.kind):
        return ReferenceChange(verb, None, ref.apiVersion, ref.namespace, ref.name)
    kind = kinds.lookup(ref.apiVersion, ref.kind)
    if kind is None:
        return Irrelevant(f"{ref.apiVersion}/{ref.kind} is neither a pod nor a training job")
    return ReferenceChange(verb, kind, ref.apiVersion, ref.namespace, ref.name)


def parse_event(attributes: Mapping[str, Any], data: Any) -> Intake:
    """Turn one CloudEvent (its attributes, and its data decoded or as RawJSON) into a trigger."""
    attrs = validate(EventAttributes, dict(attributes), "CloudEvent attributes")
    hint = (attributes.get("apiversion"), attributes.get("kind"))
    event_type = attrs.type
    if event_type == PING_TYPE:
        return Intake(attrs, SweepRequest())
    for prefix, build in ((RESOURCE_PREFIX, _object_change), (REFERENCE_PREFIX, _reference_change)):
        if event_type.startswith(prefix):
            verb = event_type.removeprefix(prefix)
            if verb not in VERBS:
                break
            return Intake(attrs, build(verb, data, hint))
    raise BadEvent(f"unknown CloudEvent type {event_type[:100]!r}")
