"""Training jobs: finished or not, their policies, and whether podsweeper may suspend them.

A v1 job (the training operator's, the mpi-operator's) is read with its replica specs and
runPolicy; a chained one (a TrainJob) only for its state, since its chain's rules read the
JobSet and Jobs instead. An MPIJob Failed but not yet settled by its operator is not finished
here, so no rule deletes pods the operator would re-create.
"""

from __future__ import annotations

import sys
from datetime import datetime
from functools import lru_cache
from typing import Any

from pydantic import Field

from podsweeper import kinds
from podsweeper.errors import BadEvent
from podsweeper.model import TTL_ANNOTATION, CleanPodPolicy, Job
from podsweeper.objects.base import (
    JobStatus,
    ObjectMeta,
    Schema,
    condition_reason,
    finished_state,
    validate_json,
    validate_part,
)

POLICIES = frozenset(p.value for p in CleanPodPolicy)
# Kueue admits a job by driving its suspend field; a queued job is Kueue's to suspend.


class RunPolicy(Schema):
    cleanPodPolicy: str | None = None
    backoffLimit: int | None = None
    activeDeadlineSeconds: int | None = None
    managedBy: str | None = None


class ReplicaSpec(Schema):
    replicas: int | None = Field(default=None, ge=0)
    restartPolicy: str | None = None


class TrainerSpec(Schema):
    numNodes: int | None = Field(default=None, ge=0)


class JobObject(Schema):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: dict[str, Any] | None = None
    status: JobStatus | None = None


def _suspend_blocked(
    kind: kinds.TrainingKind, labels: dict[str, str], managed_by: str | None, field: str, own: str, owner: str
) -> str | None:
    """Why podsweeper must not drive this job's suspend: Kueue does, or another controller."""
    if kinds.KUEUE_QUEUE_LABEL in labels:
        return f"Kueue manages it (label {kinds.KUEUE_QUEUE_LABEL}) and drives {kind.suspend_field} itself"
    if managed_by not in (None, "", own):
        return f"{field} is {managed_by!r}, not {owner}"
    return None


@lru_cache(maxsize=256)
def _shared(value: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """One tuple for each restart-policy shape, not one per job: a cluster's jobs share a few,
    and a sweep holds a round's jobs (20,000 on a big cluster) between its ticks."""
    return value


def job_from(obj: JobObject) -> Job:
    """Plain job from a validated object; raises BadEvent when it is not a training kind."""
    kind = kinds.lookup(obj.apiVersion, obj.kind)
    if kind is None:
        raise BadEvent(f"{obj.apiVersion}/{obj.kind} is not a training job kind")
    if kind.chain is not None:
        return _chained_job(kind, obj)
    spec = obj.spec or {}
    run_policy = validate_part(RunPolicy, spec.get("runPolicy") or {}, "spec.runPolicy")
    policy = run_policy.cleanPodPolicy
    if policy is None and kind.top_level_clean_pod_policy:
        top = spec.get("cleanPodPolicy")
        policy = top if isinstance(top, str) else None
    replicas = spec.get(kind.replica_specs_key) or {}
    if not isinstance(replicas, dict):
        raise BadEvent(f"spec.{kind.replica_specs_key} is not an object")
    specs = {
        str(rtype): validate_part(ReplicaSpec, rspec or {}, f"spec.{kind.replica_specs_key}.{rtype}")
        for rtype, rspec in replicas.items()
    }
    restart = _shared(
        tuple((rtype, s.restartPolicy or kind.default_restart_policy) for rtype, s in specs.items())
    )
    # The operators default an unset replica count to 1.
    declared = sum(1 if s.replicas is None else s.replicas for s in specs.values())
    finished, finished_at, suspended = finished_state(obj.status)
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
        failed_reason = condition_reason(status, finished)
        finished, finished_at = None, None
    manager = launcher or kind  # a launcher's operator (the mpi-operator) manages the job itself
    return Job(
        **_identity(kind, obj),
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


def _chained_job(kind: kinds.TrainingKind, obj: JobObject) -> Job:
    """A TrainJob: its state, nothing of v1's clean policy or restart policies (its chain's
    rules read the JobSet and Jobs instead)."""
    spec = obj.spec or {}
    trainer = validate_part(TrainerSpec, spec.get("trainer") or {}, "spec.trainer")
    finished, finished_at, suspended = finished_state(obj.status, kind.finished_conditions)
    deadline = spec.get("activeDeadlineSeconds")
    failure = kind.finished_conditions[-1]
    failed_reason = condition_reason(obj.status, failure) if finished == failure else ""
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
        **_identity(kind, obj),
        finished=finished,
        finished_at=finished_at,
        suspended=suspended or spec.get("suspend") is True,
        active_deadline_seconds=deadline if isinstance(deadline, int) else None,
        failed_reason=failed_reason,
        declared_replicas=trainer.numNodes or 1,
        suspend_blocked=blocked,
        suspend_changed_at=_suspend_changed_at(obj.status),
        managed_by=managed_by if isinstance(managed_by, str) else None,
        owned_by=next((f"{o.kind}/{o.name}" for o in obj.metadata.owners()), None),
        sets_own_ttl=spec.get("ttlSecondsAfterFinished") is not None,
        ttl_asked=(obj.metadata.annotations or {}).get(TTL_ANNOTATION),
        resource_version=obj.metadata.resourceVersion,
    )


def _suspend_changed_at(status: JobStatus | None) -> datetime | None:
    """When a TrainJob was last suspended or resumed: its Suspended condition's transition."""
    times = (
        [c.lastTransitionTime for c in (status.conditions or ()) if c.type == "Suspended"] if status else []
    )
    return max((t for t in times if t is not None), default=None)


def _identity(kind: kinds.TrainingKind, obj: JobObject) -> dict[str, Any]:
    """What every job says about itself, whatever its kind."""
    meta = obj.metadata
    return {
        "kind": kind,
        "namespace": sys.intern(meta.namespace),
        "name": meta.name,
        "uid": meta.uid,
        "api_version": sys.intern(obj.apiVersion),
        "opted_out": meta.opted_out(),
        "labels": meta.labels or {},
        "created": meta.creationTimestamp,
    }


def decode_job(body: bytes | str) -> Job:
    """A training job from the JSON the API (or an event) sent; BadEvent if it is not one."""
    return job_from(validate_json(JobObject, body, "job"))
