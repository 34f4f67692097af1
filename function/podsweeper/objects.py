"""The typed edge: Kubernetes objects (event payloads and API answers) -> plain data.

One path for every body: pydantic validates JSON bytes straight into the models below
(about twice as fast as json.loads + validation, and unread fields never become Python
objects), reading exactly the fields the rules need and ignoring the rest (managedFields,
spec.containers, ...). A payload that does not validate is bad input (400); the engine
never sees a half-understood object.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
)

from podsweeper import kinds
from podsweeper.errors import BadEvent
from podsweeper.model import SKIP_ANNOTATION, CleanPodPolicy, ContainerView, Job, Pod
from podsweeper.ownership import Owner, pod_ownership

POLICIES = frozenset(p.value for p in CleanPodPolicy)


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class OwnerReference(_Model):
    apiVersion: str
    kind: str
    name: str
    uid: str = ""
    controller: bool | None = None


class ObjectMeta(_Model):
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


class ContainerStateWaiting(_Model):
    reason: str | None = None


class ContainerStateTerminated(_Model):
    exitCode: int | None = None
    signal: int | None = None
    reason: str | None = None
    message: str | None = None
    # Kept as the API wrote them (RFC 3339): only evidence reads them, and parsing a time on
    # every pod event cost more than the rest of the container status.
    startedAt: str | None = None
    finishedAt: str | None = None


class ContainerState(_Model):
    waiting: ContainerStateWaiting | None = None
    terminated: ContainerStateTerminated | None = None


class ContainerStatus(_Model):
    name: str = ""
    restartCount: int = 0
    state: ContainerState | None = None
    lastState: ContainerState | None = None

    def view(self) -> ContainerView:
        state = self.state or ContainerState()
        # A crash-looping container's evidence is in lastState; a dead one's in state.
        terminated = state.terminated or (self.lastState or ContainerState()).terminated
        return ContainerView(
            name=self.name,
            restart_count=self.restartCount,
            waiting_reason=state.waiting.reason if state.waiting else None,
            exit_code=terminated.exitCode if terminated else None,
            reason=terminated.reason if terminated else None,
            message=(terminated.message or "")[:256] or None if terminated else None,
            signal=terminated.signal if terminated else None,
            started_at=terminated.startedAt if terminated else None,
            finished_at=terminated.finishedAt if terminated else None,
            restarted=state.terminated is None and terminated is not None,
        )


class PodStatus(_Model):
    phase: str | None = None
    startTime: datetime | None = None
    containerStatuses: list[ContainerStatus] | None = None


Quantity = str | int | float


class Resources(_Model):
    requests: dict[str, Quantity] | None = None
    limits: dict[str, Quantity] | None = None

    def extended(self) -> dict[str, int]:
        """Extended resources (a domain-prefixed name, e.g. nvidia.com/gpu): whole units.

        They are requested in whole units and requests equal limits; either may be given."""
        amounts: dict[str, int] = {}
        for given in (self.requests or {}, self.limits or {}):
            for name, value in given.items():
                if "/" in name:
                    amounts[name] = max(amounts.get(name, 0), _whole(value))
        return amounts


def _whole(value: Quantity) -> int:
    try:
        return max(0, int(float(value)))
    except ValueError:
        return 0  # not a plain number: not an extended resource count


class ContainerSpec(_Model):
    resources: Resources | None = None


class PodSpec(_Model):
    nodeName: str | None = None
    containers: list[ContainerSpec] | None = None
    initContainers: list[ContainerSpec] | None = None

    def extended_resources(self) -> tuple[tuple[str, int], ...]:
        """What the pod holds of each extended resource, as the scheduler counts it: the sum
        over its containers, or the largest init container's if that is more."""
        total: dict[str, int] = {}
        for container in self.containers or ():
            for name, amount in (container.resources or Resources()).extended().items():
                total[name] = total.get(name, 0) + amount
        for container in self.initContainers or ():
            for name, amount in (container.resources or Resources()).extended().items():
                total[name] = max(total.get(name, 0), amount)
        return tuple(sorted((name, amount) for name, amount in total.items() if amount))


class PodObject(_Model):
    apiVersion: str = "v1"
    kind: str = "Pod"
    metadata: ObjectMeta
    spec: PodSpec | None = None
    status: PodStatus | None = None


class Condition(_Model):
    type: str
    status: str
    lastTransitionTime: datetime | None = None
    lastUpdateTime: datetime | None = None


class JobStatus(_Model):
    conditions: list[Condition] | None = None


class RunPolicy(_Model):
    cleanPodPolicy: str | None = None
    backoffLimit: int | None = None
    activeDeadlineSeconds: int | None = None
    managedBy: str | None = None


# Kueue admits a job by driving its suspend field; a queued job is Kueue's to suspend.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
TRAINING_OPERATOR = "kubeflow.org/training-operator"


def _suspend_blocked(labels: dict[str, str], run_policy: RunPolicy) -> str | None:
    if KUEUE_QUEUE_LABEL in labels:
        return f"Kueue manages it (label {KUEUE_QUEUE_LABEL}) and drives spec.runPolicy.suspend itself"
    if run_policy.managedBy not in (None, "", TRAINING_OPERATOR):
        return f"runPolicy.managedBy is {run_policy.managedBy!r}, not the training operator"
    return None


class ReplicaSpec(_Model):
    replicas: int | None = Field(default=None, ge=0)
    restartPolicy: str | None = None


class JobObject(_Model):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: dict[str, Any] | None = None
    status: JobStatus | None = None


class ObjectReference(_Model):
    """Reference-mode payload: just enough to GET the object."""

    apiVersion: str = Field(min_length=1)
    kind: str = Field(min_length=1)
    name: str = Field(min_length=1, max_length=253)
    namespace: str = Field(default="", max_length=63)


def _one_line(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "object"
    return f"{where}: {first['msg']}"


def validate_json(model: type[Any], body: bytes | str, what: str) -> Any:
    """Validate JSON bytes against `model`; BadEvent with a one-line reason on failure."""
    try:
        return model.model_validate_json(body)
    except ValidationError as error:
        raise BadEvent(f"{what} invalid: {_one_line(error)}") from None
    except RecursionError:
        raise BadEvent(f"{what} JSON is nested too deeply") from None


def _validate_part(model: type[Any], raw: Any, what: str) -> Any:
    """A part of an already validated object (a replica spec, the runPolicy)."""
    if not isinstance(raw, dict):
        raise BadEvent(f"{what} is not a JSON object")
    try:
        return model.model_validate(raw)
    except ValidationError as error:
        raise BadEvent(f"{what} invalid: {_one_line(error)}") from None


def json_bytes(obj: Mapping[str, Any]) -> bytes:
    """An object as the API would send it (for callers that hold one decoded, e.g. a replay line)."""
    return json.dumps(obj, separators=(",", ":")).encode()


class TypeMeta(_Model):
    """What every Kubernetes object says about itself; read when nothing else tells the kind."""

    apiVersion: str
    kind: str
    metadata: dict[str, Any]


def _unreadable(model: type[Any], raw: Any) -> str:
    """Why a LIST item did not validate (rare: only then is the item decoded to Python)."""
    try:
        model.model_validate(raw)
    except ValidationError as error:
        return _one_line(error)
    return "not readable"


class _ListMeta(_Model):
    continue_: str | None = Field(default=None, alias="continue")


# A LIST item: the model if it validates, else the raw item (left to right: a valid item is
# never decoded into Python objects; a per-item validator would do that for every item,
# costing 2.5x per page).
PodItem = Annotated[PodObject | Any, Field(union_mode="left_to_right")]
JobItem = Annotated[JobObject | Any, Field(union_mode="left_to_right")]


class PodList(_Model):
    """A page of a pod LIST, validated in one pass from the API's bytes."""

    items: list[PodItem] | None = None
    metadata: _ListMeta | None = None


class JobList(_Model):
    """A page of a training-job LIST, validated in one pass from the API's bytes."""

    items: list[JobItem] | None = None
    metadata: _ListMeta | None = None


def parse_pod_page(body: bytes) -> tuple[list[Pod], list[str], str | None]:
    """Pods of one LIST page, why any item was unreadable, and the continue token."""
    page = validate_json(PodList, body or b"{}", "pod list")
    pods, unreadable = [], []
    for item in page.items or ():
        if isinstance(item, PodObject):
            pods.append(pod_from(item))
        else:
            unreadable.append(f"pod invalid: {_unreadable(PodObject, item)}")
    return pods, unreadable, page.metadata.continue_ if page.metadata else None


def parse_job_page(body: bytes) -> tuple[list[Job], list[str], str | None]:
    """Jobs of one LIST page, why any item was unreadable, and the continue token."""
    page = validate_json(JobList, body or b"{}", "job list")
    jobs, unreadable = [], []
    for item in page.items or ():
        try:
            if not isinstance(item, JobObject):
                raise BadEvent(f"job invalid: {_unreadable(JobObject, item)}")
            jobs.append(job_from(item))
        except BadEvent as error:
            unreadable.append(str(error))
    return jobs, unreadable, page.metadata.continue_ if page.metadata else None


def pod_from(obj: PodObject) -> Pod:
    meta = obj.metadata
    status = obj.status or PodStatus()
    owners = [
        Owner(o.apiVersion, o.kind, o.name, o.uid, bool(o.controller)) for o in meta.ownerReferences or ()
    ]
    ownership = pod_ownership(meta.namespace, owners, meta.labels or {})
    return Pod(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        phase=status.phase or "Unknown",
        labels=dict(meta.labels or {}),
        opted_out=meta.opted_out(),
        terminating=meta.deletionTimestamp is not None,
        created=meta.creationTimestamp,
        job=ownership.job,
        foreign_controller=ownership.foreign_controller,
        containers=tuple(c.view() for c in status.containerStatuses or ()),
        resource_version=meta.resourceVersion,
        started=status.startTime,
        extended_resources=obj.spec.extended_resources() if obj.spec else (),
        node=obj.spec.nodeName if obj.spec else None,
    )


def _finished(status: JobStatus | None) -> tuple[str | None, datetime | None, bool]:
    """Failed or Succeeded (and since when), and whether the job is suspended."""
    true = {c.type: c for c in (status.conditions or ()) if c.status == "True"} if status else {}
    finished = "Failed" if "Failed" in true else "Succeeded" if "Succeeded" in true else None
    since = None
    if finished is not None:
        condition = true[finished]
        since = condition.lastTransitionTime or condition.lastUpdateTime
    return finished, since, "Suspended" in true


def job_from(obj: JobObject) -> Job:
    """Plain job from a validated object; raises BadEvent when it is not a training kind."""
    kind = kinds.lookup(obj.apiVersion, obj.kind)
    if kind is None:
        raise BadEvent(f"{obj.apiVersion}/{obj.kind} is not a training job kind")
    spec = obj.spec or {}
    run_policy = _validate_part(RunPolicy, spec.get("runPolicy") or {}, "spec.runPolicy")
    policy = run_policy.cleanPodPolicy
    if policy is None and kind.top_level_clean_pod_policy:
        top = spec.get("cleanPodPolicy")
        policy = top if isinstance(top, str) else None
    replicas = spec.get(kind.replica_specs_key) or {}
    if not isinstance(replicas, dict):
        raise BadEvent(f"spec.{kind.replica_specs_key} is not an object")
    specs = {
        str(rtype): _validate_part(ReplicaSpec, rspec or {}, f"spec.{kind.replica_specs_key}.{rtype}")
        for rtype, rspec in replicas.items()
    }
    restart = tuple((rtype, s.restartPolicy or kind.default_restart_policy) for rtype, s in specs.items())
    # The operators default an unset replica count to 1.
    declared = sum(1 if s.replicas is None else s.replicas for s in specs.values())
    finished, finished_at, suspended = _finished(obj.status)
    return Job(
        kind=kind,
        namespace=obj.metadata.namespace,
        name=obj.metadata.name,
        uid=obj.metadata.uid,
        api_version=obj.apiVersion,
        opted_out=obj.metadata.opted_out(),
        finished=finished,
        finished_at=finished_at,
        suspended=suspended,
        # An unknown policy is treated as None: keeping pods is the safe reading.
        clean_pod_policy=CleanPodPolicy(policy) if policy in POLICIES else CleanPodPolicy.NONE,
        backoff_limit=run_policy.backoffLimit,
        active_deadline_seconds=run_policy.activeDeadlineSeconds,
        restart_policies=restart,
        declared_replicas=declared,
        suspend_blocked=_suspend_blocked(obj.metadata.labels or {}, run_policy),
    )


def decode_pod(body: bytes | str) -> Pod:
    """A pod from the JSON the API (or an event) sent."""
    return pod_from(validate_json(PodObject, body, "pod"))


def decode_job(body: bytes | str) -> Job:
    """A training job from the JSON the API (or an event) sent; BadEvent if it is not one."""
    return job_from(validate_json(JobObject, body, "job"))


def parse_pod(obj: Mapping[str, Any]) -> Pod:
    """A pod from an object already decoded (tests, builders): the same path, via its JSON."""
    return decode_pod(json_bytes(obj))


def parse_job(obj: Mapping[str, Any]) -> Job:
    """A training job from an object already decoded: the same path, via its JSON."""
    return decode_job(json_bytes(obj))
