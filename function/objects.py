"""The typed edge: Kubernetes objects (event payloads and API answers) -> plain data.

Pydantic validates exactly the fields the rules read and ignores everything else
(managedFields, spec.containers, ...). A payload that does not validate is bad input
(400); the engine never sees a half-understood object.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from function import kinds
from function.errors import BadEvent
from function.model import SKIP_ANNOTATION, ContainerView, Job, JobRef, Pod

JOB_NAME_LABEL = "training.kubeflow.org/job-name"
OPERATOR_NAME_LABEL = "training.kubeflow.org/operator-name"
LEGACY_JOB_NAME_LABEL = "job-name"
LEGACY_GROUP_LABEL = "group-name"

# The two label selectors that find every training pod (v1.6+ and the older labels).
TRAINING_POD_SELECTORS = (JOB_NAME_LABEL, f"{LEGACY_GROUP_LABEL}={kinds.GROUP},{LEGACY_JOB_NAME_LABEL}")


def has_training_label(labels: dict[str, str]) -> bool:
    """What TRAINING_POD_SELECTORS select, for clusters that filter in memory."""
    return JOB_NAME_LABEL in labels or (
        labels.get(LEGACY_GROUP_LABEL) == kinds.GROUP and LEGACY_JOB_NAME_LABEL in labels)


def job_pod_selectors(job_name: str) -> tuple[str, str]:
    """The two label selectors that find one job's pods (v1.6+ and the pre-v1.6 labels)."""
    return (f"{JOB_NAME_LABEL}={job_name}",
            f"{LEGACY_GROUP_LABEL}={kinds.GROUP},{LEGACY_JOB_NAME_LABEL}={job_name}")


def labels_name_job(labels: dict[str, str], job_name: str) -> bool:
    """What job_pod_selectors(job_name) select, for clusters that filter in memory."""
    return labels.get(JOB_NAME_LABEL) == job_name or (
        labels.get(LEGACY_GROUP_LABEL) == kinds.GROUP and labels.get(LEGACY_JOB_NAME_LABEL) == job_name)


CLEAN_POD_POLICIES = frozenset({"None", "Running", "All"})


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
    reason: str | None = None
    message: str | None = None


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
        )


class PodStatus(_Model):
    phase: str | None = None
    containerStatuses: list[ContainerStatus] | None = None


class PodObject(_Model):
    apiVersion: str = "v1"
    kind: str = "Pod"
    metadata: ObjectMeta
    status: PodStatus | None = None


class Condition(_Model):
    type: str
    status: str


class JobStatus(_Model):
    conditions: list[Condition] | None = None


class RunPolicy(_Model):
    cleanPodPolicy: str | None = None
    backoffLimit: int | None = None
    activeDeadlineSeconds: int | None = None


class ReplicaSpec(_Model):
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


def validate(model: type[_Model], raw: Any, what: str) -> Any:
    """Validate raw data against `model`; BadEvent with a one-line reason on failure."""
    if not isinstance(raw, dict):
        raise BadEvent(f"{what} is not a JSON object")
    try:
        return model.model_validate(raw)
    except ValidationError as error:
        raise BadEvent(f"{what} invalid: {_one_line(error)}") from None


@dataclass(frozen=True)
class RawJSON:
    """A JSON body not decoded yet: pydantic validates it straight from bytes (twice as fast
    as json.loads + validation, and unread fields never become Python objects)."""

    body: bytes

    def decode(self, what: str = "body") -> Any:
        try:
            return json.loads(self.body)
        except (ValueError, UnicodeDecodeError):
            raise BadEvent(f"{what} is not valid JSON") from None
        except RecursionError:
            raise BadEvent(f"{what} JSON is nested too deeply") from None


def validate_json(model: type[_Model], body: bytes, what: str) -> Any:
    """Like validate(), from JSON bytes."""
    try:
        return model.model_validate_json(body)
    except ValidationError as error:
        raise BadEvent(f"{what} invalid: {_one_line(error)}") from None


class _ListMeta(_Model):
    continue_: str | None = Field(default=None, alias="continue")


class PodList(_Model):
    """A page of a pod LIST, validated in one pass from the API's bytes."""

    items: list[PodObject] | None = None
    metadata: _ListMeta | None = None


def parse_pod_page(body: bytes) -> tuple[list[Pod], list[Any], str | None]:
    """Pods of one LIST page and its continue token.

    Fast path: the whole page validated from bytes. If any item does not validate, the
    page is decoded and the unreadable items are returned raw (second list) for the caller
    to report and leave alone.
    """
    try:
        page = PodList.model_validate_json(body or b"{}")
        token = page.metadata.continue_ if page.metadata else None
        return [pod_from(item) for item in page.items or ()], [], token
    except ValidationError:
        pass
    decoded = RawJSON(body).decode("pod list") or {}
    good, bad = [], []
    for raw in decoded.get("items") or ():
        try:
            good.append(parse_pod(raw))
        except BadEvent:
            bad.append(raw)
    return good, bad, (decoded.get("metadata") or {}).get("continue")


def pod_job_ref(meta: ObjectMeta) -> tuple[JobRef | None, bool]:
    """The job a pod belongs to, and whether a non-training controller owns it.

    Controller ownerReference first; only a pod with no controller at all may be claimed
    by its labels (a pod some other controller owns is never ours, whatever its labels).
    """
    controller = next((o for o in meta.ownerReferences or () if o.controller), None)
    if controller is not None:
        kind = kinds.lookup(controller.apiVersion, controller.kind)
        if kind is None:
            return None, True
        return JobRef(kind, meta.namespace, controller.name, controller.uid or None,
                      controller.apiVersion), False
    labels = meta.labels or {}
    name = labels.get(JOB_NAME_LABEL)
    if not name and labels.get(LEGACY_GROUP_LABEL) == kinds.GROUP:
        name = labels.get(LEGACY_JOB_NAME_LABEL)
    kind = kinds.BY_OPERATOR_NAME.get(labels.get(OPERATOR_NAME_LABEL, ""))
    if not name or kind is None:
        return None, False  # no job, or a job whose kind cannot be told: not ours
    return JobRef(kind, meta.namespace, name), False


def pod_from(obj: PodObject) -> Pod:
    meta = obj.metadata
    status = obj.status or PodStatus()
    job, foreign = pod_job_ref(meta)
    return Pod(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        phase=status.phase or "Unknown",
        labels=dict(meta.labels or {}),
        opted_out=meta.opted_out(),
        terminating=meta.deletionTimestamp is not None,
        created=meta.creationTimestamp,
        job=job,
        foreign_controller=foreign,
        containers=tuple(c.view() for c in status.containerStatuses or ()),
        resource_version=meta.resourceVersion,
    )


def _finished(status: JobStatus | None) -> tuple[str | None, bool]:
    true_types = {c.type for c in (status.conditions or ()) if c.status == "True"} if status else set()
    finished = "Failed" if "Failed" in true_types else "Succeeded" if "Succeeded" in true_types else None
    return finished, "Suspended" in true_types


def job_from(obj: JobObject) -> Job:
    """Plain job from a validated object; raises BadEvent when it is not a training kind."""
    kind = kinds.lookup(obj.apiVersion, obj.kind)
    if kind is None:
        raise BadEvent(f"{obj.apiVersion}/{obj.kind} is not a training job kind")
    spec = obj.spec or {}
    run_policy = validate(RunPolicy, spec.get("runPolicy") or {}, "spec.runPolicy")
    policy = run_policy.cleanPodPolicy
    if policy is None and kind.top_level_clean_pod_policy:
        top = spec.get("cleanPodPolicy")
        policy = top if isinstance(top, str) else None
    replicas = spec.get(kind.replica_specs_key) or {}
    if not isinstance(replicas, dict):
        raise BadEvent(f"spec.{kind.replica_specs_key} is not an object")
    restart = tuple(
        (str(rtype), validate(ReplicaSpec, rspec or {}, f"spec.{kind.replica_specs_key}.{rtype}").restartPolicy
         or kind.default_restart_policy)
        for rtype, rspec in replicas.items()
    )
    finished, suspended = _finished(obj.status)
    return Job(
        kind=kind,
        namespace=obj.metadata.namespace,
        name=obj.metadata.name,
        uid=obj.metadata.uid,
        api_version=obj.apiVersion,
        opted_out=obj.metadata.opted_out(),
        finished=finished,
        suspended=suspended,
        # An unknown policy is treated as None: keeping pods is the safe reading.
        clean_pod_policy=policy if policy in CLEAN_POD_POLICIES else "None",
        backoff_limit=run_policy.backoffLimit,
        active_deadline_seconds=run_policy.activeDeadlineSeconds,
        restart_policies=restart,
    )


def parse_pod(raw: Any) -> Pod:
    return pod_from(validate(PodObject, raw, "pod"))


def parse_job(raw: Any) -> Job:
    return job_from(validate(JobObject, raw, "job"))
