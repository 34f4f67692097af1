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
from podsweeper.model import (
    SKIP_ANNOTATION,
    CleanPodPolicy,
    ContainerView,
    Job,
    Node,
    NodeReady,
    Owner,
    Pod,
    Workload,
)
from podsweeper.ownership import pod_ownership

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

    def owners(self) -> list[Owner]:
        return [
            Owner(o.apiVersion, o.kind, o.name, o.uid, bool(o.controller)) for o in self.ownerReferences or ()
        ]

    def controller(self) -> Owner | None:
        return next((o for o in self.owners() if o.controller), None)


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
    reason: str | None = None
    lastTransitionTime: datetime | None = None
    lastUpdateTime: datetime | None = None


class JobStatus(_Model):
    conditions: list[Condition] | None = None
    completionTime: str | None = None  # the mpi-operator's "settled" mark (kinds.Launcher)


class RunPolicy(_Model):
    cleanPodPolicy: str | None = None
    backoffLimit: int | None = None
    activeDeadlineSeconds: int | None = None
    managedBy: str | None = None


# Kueue admits a job by driving its suspend field; a queued job is Kueue's to suspend.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def _suspend_blocked(
    kind: kinds.TrainingKind, labels: dict[str, str], managed_by: str | None, field: str, own: str, owner: str
) -> str | None:
    """Why podsweeper must not drive this job's suspend: Kueue does, or another controller."""
    if KUEUE_QUEUE_LABEL in labels:
        switch = ".".join(("spec", *kind.suspend_path))
        return f"Kueue manages it (label {KUEUE_QUEUE_LABEL}) and drives {switch} itself"
    if managed_by not in (None, "", own):
        return f"{field} is {managed_by!r}, not {owner}"
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
    ownership = pod_ownership(meta.namespace, meta.owners(), meta.labels or {})
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
        via=ownership.via,
        deletion_due=meta.deletionTimestamp,
    )


def _finished(
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


def job_from(obj: JobObject) -> Job:
    """Plain job from a validated object; raises BadEvent when it is not a training kind."""
    kind = kinds.lookup(obj.apiVersion, obj.kind)
    if kind is None:
        raise BadEvent(f"{obj.apiVersion}/{obj.kind} is not a training job kind")
    if kind.chain is not None:
        return _chained_job(kind, obj)
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
    launcher = kind.launches(obj.apiVersion.rpartition("/")[2])
    unsettled_at, failed_reason = None, ""
    status = obj.status
    if (
        launcher is not None
        and status
        and finished == kind.finished_conditions[1]
        and not status.completionTime
    ):
        # Failed without completionTime (a worker evicted, mpi-operator#647): the operator still
        # reconciles it and re-creates any pod deleted. Not finished, for the pod rules.
        unsettled_at = finished_at or obj.metadata.creationTimestamp
        failed = [c for c in status.conditions or () if c.type == finished and c.status == "True"]
        failed_reason = failed[0].reason or "" if failed else ""
        finished, finished_at = None, None
    manager = launcher or kind  # a launcher's operator (the mpi-operator) manages the job itself
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
        failed_unsettled_at=unsettled_at,
        failed_reason=failed_reason,
        suspend_blocked=_suspend_blocked(
            kind,
            obj.metadata.labels or {},
            run_policy.managedBy,
            "runPolicy.managedBy",
            manager.managed_by,
            manager.manager,
        ),
    )


class NodeStatus(_Model):
    conditions: list[Condition] | None = None


class NodeObject(_Model):
    metadata: ObjectMeta
    status: NodeStatus | None = None


def decode_node(body: bytes | str) -> Node:
    """A node's readiness from the JSON the API sent."""
    obj = validate_json(NodeObject, body, "node")
    ready = next((c for c in (obj.status or NodeStatus()).conditions or () if c.type == "Ready"), None)
    if ready is None:
        return Node(obj.metadata.name, NodeReady.UNKNOWN)
    try:
        status = NodeReady(ready.status)
    except ValueError:
        raise BadEvent(f"node {obj.metadata.name}: Ready condition status {ready.status[:40]!r}") from None
    return Node(obj.metadata.name, status, ready.lastTransitionTime)


class TrainerSpec(_Model):
    numNodes: int | None = Field(default=None, ge=0)


def _chained_job(kind: kinds.TrainingKind, obj: JobObject) -> Job:
    """A TrainJob: its state, nothing of v1's clean policy or restart policies (its chain's
    rules read the JobSet and Jobs instead)."""
    spec = obj.spec or {}
    trainer = _validate_part(TrainerSpec, spec.get("trainer") or {}, "spec.trainer")
    finished, finished_at, suspended = _finished(obj.status, kind.finished_conditions)
    deadline = spec.get("activeDeadlineSeconds")
    managed_by = spec.get("managedBy")
    blocked = _suspend_blocked(
        kind,
        obj.metadata.labels or {},
        managed_by if isinstance(managed_by, str) else None,
        "spec.managedBy",
        kind.managed_by,
        kind.manager,
    )
    return Job(
        kind=kind,
        namespace=obj.metadata.namespace,
        name=obj.metadata.name,
        uid=obj.metadata.uid,
        api_version=obj.apiVersion,
        opted_out=obj.metadata.opted_out(),
        finished=finished,
        finished_at=finished_at,
        suspended=suspended or spec.get("suspend") is True,
        active_deadline_seconds=deadline if isinstance(deadline, int) else None,
        declared_replicas=trainer.numNodes or 1,
        created=obj.metadata.creationTimestamp,
        suspend_blocked=blocked,
    )


class FailurePolicyRule(_Model):
    action: str = ""


class FailurePolicy(_Model):
    rules: list[FailurePolicyRule] | None = None


class TemplateMeta(_Model):
    labels: dict[str, str] | None = None


class JobTemplate(_Model):
    metadata: TemplateMeta | None = None


class ReplicatedJob(_Model):
    template: JobTemplate | None = None


class WorkloadSpec(_Model):
    replicatedJobs: list[ReplicatedJob] | None = None
    failurePolicy: FailurePolicy | None = None
    suspend: bool | None = None


class WorkloadObject(_Model):
    """A JobSet or a batch Job: only what tells its place in a chain and its state.

    LIST items of built-in kinds (batch Jobs) carry no apiVersion/kind: the list names them."""

    apiVersion: str = ""
    kind: str = ""
    metadata: ObjectMeta
    spec: WorkloadSpec | None = None
    status: JobStatus | None = None


# JobSet failurePolicy actions that restart without counting against maxRestarts.
UNBOUNDED_RESTART_ACTIONS = frozenset({"RestartJobSetAndIgnoreMaxRestarts", "RestartJobAndIgnoreMaxRestarts"})


def workload_from(obj: WorkloadObject, listed: kinds.Link | None = None) -> Workload:
    link = kinds.link_lookup(obj.apiVersion, obj.kind)
    if link is None and listed is not None and not obj.apiVersion and not obj.kind:
        link = listed  # an item of a LIST of that kind
    if link is None:
        raise BadEvent(f"{obj.apiVersion}/{obj.kind} is not a JobSet or batch Job")
    meta, spec = obj.metadata, obj.spec or WorkloadSpec()
    labels = dict(meta.labels or {})
    template_labels: set[tuple[str, str]] = set()
    for rjob in spec.replicatedJobs or ():
        template_meta = (rjob.template or JobTemplate()).metadata or TemplateMeta()
        template_labels.update((template_meta.labels or {}).items())
    finished, _, suspended = _finished(obj.status, link.finished_conditions)
    actions = tuple(
        sorted(
            {r.action for r in (spec.failurePolicy or FailurePolicy()).rules or ()}
            & UNBOUNDED_RESTART_ACTIONS
        )
    )
    return Workload(
        link=link,
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        controller=meta.controller(),
        labels=labels,
        template_labels=tuple(sorted(template_labels)),
        opted_out=meta.opted_out(),
        terminating=meta.deletionTimestamp is not None,
        created=meta.creationTimestamp,
        finished=finished,
        suspended=suspended or spec.suspend is True,
        resumed=any(
            c.type == "Suspended" and c.status == "False"
            for c in (obj.status or JobStatus()).conditions or ()
        ),
        unbounded_restart_actions=actions,
        resource_version=meta.resourceVersion,
    )


WorkloadItem = Annotated[WorkloadObject | Any, Field(union_mode="left_to_right")]


class WorkloadList(_Model):
    items: list[WorkloadItem] | None = None
    metadata: _ListMeta | None = None


def parse_workload_page(
    body: bytes, listed: kinds.Link | None = None
) -> tuple[list[Workload], list[str], str | None]:
    """JobSets or Jobs of one LIST page, why any item was unreadable, and the continue token."""
    page = validate_json(WorkloadList, body or b"{}", "list")
    found, unreadable = [], []
    for item in page.items or ():
        try:
            if not isinstance(item, WorkloadObject):
                raise BadEvent(f"object invalid: {_unreadable(WorkloadObject, item)}")
            found.append(workload_from(item, listed))
        except BadEvent as error:
            unreadable.append(str(error))
    return found, unreadable, page.metadata.continue_ if page.metadata else None


def decode_workload(body: bytes | str) -> Workload:
    """A JobSet or batch Job from the JSON the API (or an event) sent."""
    return workload_from(validate_json(WorkloadObject, body, "object"))


def parse_workload(obj: Mapping[str, Any]) -> Workload:
    return decode_workload(json_bytes(obj))


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
