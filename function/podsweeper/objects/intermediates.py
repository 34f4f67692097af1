"""A chain's JobSets and batch Jobs: their place in a TrainJob's chain, and their state.

Only what tells whose they are (controller, labels, template labels), whether they finished
or were resumed, and which failure-policy actions restart them without bound.
"""

from __future__ import annotations

from podsweeper import kinds
from podsweeper.errors import BadEvent
from podsweeper.model import Intermediate
from podsweeper.objects.base import JobStatus, ObjectMeta, Schema, finished_state, validate_json

# JobSet failurePolicy actions that restart without counting against maxRestarts.
UNBOUNDED_RESTART_ACTIONS = frozenset({"RestartJobSetAndIgnoreMaxRestarts", "RestartJobAndIgnoreMaxRestarts"})


class FailurePolicyRule(Schema):
    action: str = ""


class FailurePolicy(Schema):
    rules: list[FailurePolicyRule] | None = None


class TemplateMeta(Schema):
    labels: dict[str, str] | None = None


class JobTemplate(Schema):
    metadata: TemplateMeta | None = None


class ReplicatedJob(Schema):
    template: JobTemplate | None = None


class IntermediateSpec(Schema):
    replicatedJobs: list[ReplicatedJob] | None = None
    failurePolicy: FailurePolicy | None = None
    suspend: bool | None = None
    # A Volcano PodGroup's: what its queue reserves for it while it is Inqueue, and which queue.
    minResources: dict[str, int | str] | None = None
    queue: str | None = None


class IntermediateObject(Schema):
    """A JobSet or a batch Job: only what tells its place in a chain and its state.

    LIST items of built-in kinds (batch Jobs) carry no apiVersion/kind: the list names them."""

    apiVersion: str = ""
    kind: str = ""
    metadata: ObjectMeta
    spec: IntermediateSpec | None = None
    status: JobStatus | None = None


def intermediate_from(obj: IntermediateObject, listed: kinds.IntermediateKind | None = None) -> Intermediate:
    link = kinds.intermediate_lookup(obj.apiVersion, obj.kind)
    if link is None and listed is not None and not obj.apiVersion and not obj.kind:
        link = listed  # an item of a LIST of that kind
    if link is None:
        raise BadEvent(f"{obj.apiVersion}/{obj.kind} is not a JobSet or batch Job")
    meta, spec = obj.metadata, obj.spec or IntermediateSpec()
    labels = dict(meta.labels or {})
    template_labels: set[tuple[str, str]] = set()
    for rjob in spec.replicatedJobs or ():
        template_meta = (rjob.template or JobTemplate()).metadata or TemplateMeta()
        template_labels.update((template_meta.labels or {}).items())
    conditions = link.finished_conditions
    finished, _, suspended = finished_state(obj.status, conditions) if conditions else (None, None, False)
    actions = tuple(
        sorted(
            {r.action for r in (spec.failurePolicy or FailurePolicy()).rules or ()}
            & UNBOUNDED_RESTART_ACTIONS
        )
    )
    return Intermediate(
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
        phase=(obj.status.phase if obj.status else None) or "",
        reserves=tuple(sorted((k, str(v)) for k, v in (spec.minResources or {}).items())),
        queue=spec.queue or "",
    )


def decode_intermediate(body: bytes | str) -> Intermediate:
    """A JobSet or batch Job from the JSON the API (or an event) sent."""
    return intermediate_from(validate_json(IntermediateObject, body, "object"))
