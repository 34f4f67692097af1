"""Pods: their state, their containers' last runs, what they hold, and whose they are.

A pod is read on every pod event and every LIST page, so only what a rule or the evidence
reads is validated; whose job it is comes from `ownership`, not from here.
"""

from __future__ import annotations

from datetime import datetime

from podsweeper.kinds import KUEUE_SAFE_TO_FORCEFULLY_DELETE
from podsweeper.model import ContainerView, Pod
from podsweeper.objects.base import ObjectMeta, Schema, validate_json
from podsweeper.ownership import pod_ownership


class ContainerStateWaiting(Schema):
    reason: str | None = None


class ContainerStateTerminated(Schema):
    exitCode: int | None = None
    signal: int | None = None
    reason: str | None = None
    message: str | None = None
    # Kept as the API wrote them (RFC 3339): only evidence reads them, and parsing a time on
    # every pod event cost more than the rest of the container status.
    startedAt: str | None = None
    finishedAt: str | None = None
    containerID: str | None = None  # the container the run was: one per run


class ContainerState(Schema):
    waiting: ContainerStateWaiting | None = None
    terminated: ContainerStateTerminated | None = None


# Shared empty parts (frozen): building a model instance for an absent part on every pod
# read cost more than reading the parts that are there.
_NO_STATE = ContainerState()


class ContainerStatus(Schema):
    name: str = ""
    restartCount: int = 0
    state: ContainerState | None = None
    lastState: ContainerState | None = None

    def view(self) -> ContainerView:
        state = self.state or _NO_STATE
        # A crash-looping container's evidence is in lastState; a dead one's in state.
        terminated = state.terminated or (self.lastState or _NO_STATE).terminated
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
            run_id=(terminated.containerID or "")[:128] or None if terminated else None,
        )


class PodStatus(Schema):
    phase: str | None = None
    startTime: datetime | None = None
    containerStatuses: list[ContainerStatus] | None = None


Quantity = str | int | float


class Resources(Schema):
    requests: dict[str, Quantity] | None = None
    limits: dict[str, Quantity] | None = None

    def extended(self) -> dict[str, int]:
        """Extended resources (a domain-prefixed name, e.g. nvidia.com/gpu): whole units.

        They are requested in whole units and requests equal limits; either may be given."""
        amounts: dict[str, int] = {}
        for given in (self.requests, self.limits):
            for name, value in given.items() if given else ():
                if "/" in name:
                    amounts[name] = max(amounts.get(name, 0), _whole(value))
        return amounts


def _whole(value: Quantity) -> int:
    try:
        return max(0, int(float(value)))
    except ValueError:
        return 0  # not a plain number: not an extended resource count


class ContainerSpec(Schema):
    resources: Resources | None = None


class PodSpec(Schema):
    nodeName: str | None = None
    containers: list[ContainerSpec] | None = None
    initContainers: list[ContainerSpec] | None = None

    def extended_resources(self) -> tuple[tuple[str, int], ...]:
        """What the pod holds of each extended resource, as the scheduler counts it: the sum
        over its containers, or the largest init container's if that is more."""
        total: dict[str, int] = {}
        for container in self.containers or ():
            if container.resources is not None:
                for name, amount in container.resources.extended().items():
                    total[name] = total.get(name, 0) + amount
        for container in self.initContainers or ():
            if container.resources is not None:
                for name, amount in container.resources.extended().items():
                    total[name] = max(total.get(name, 0), amount)
        if not total:
            return ()
        return tuple(sorted((name, amount) for name, amount in total.items() if amount))


class PodObject(Schema):
    apiVersion: str = "v1"
    kind: str = "Pod"
    metadata: ObjectMeta
    spec: PodSpec | None = None
    status: PodStatus | None = None


_NO_STATUS = PodStatus()
# Kueue compares the value with "true" exactly; "false" is the owner's no.
_SAFE = {"true": True, "false": False}


def pod_from(obj: PodObject) -> Pod:
    meta = obj.metadata
    status = obj.status or _NO_STATUS
    spec = obj.spec
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
        extended_resources=spec.extended_resources() if spec else (),
        node=spec.nodeName if spec else None,
        batch_job=ownership.batch_job,
        deletion_due=meta.deletionTimestamp,
        safe_to_force_delete=_SAFE.get((meta.annotations or {}).get(KUEUE_SAFE_TO_FORCEFULLY_DELETE, "")),
    )


def decode_pod(body: bytes | str) -> Pod:
    """A pod from the JSON the API (or an event) sent."""
    return pod_from(validate_json(PodObject, body, "pod"))
