"""The in-memory cluster a replay builds from the recorded events themselves.

A product feature, not a test double: it answers the pipeline's reads with the state the
stream has shown so far, and applies podsweeper's own deletes so later events about a
deleted pod are recognised and ignored.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from function.cluster.base import DeleteResult, EventRecord, JobUnknown
from function.model import Job, JobRef, Pod
from function.objects import has_training_label, labels_name_job


@dataclass
class RecordedEvent:
    record: EventRecord
    count: int = 1


@dataclass
class SimulatedCluster:
    pods: dict[tuple[str, str], Pod] = field(default_factory=dict)
    jobs: dict[tuple[str, str, str], Job] = field(default_factory=dict)
    gone_jobs: set[tuple[str, str, str]] = field(default_factory=set)
    deleted_by_podsweeper: set[str] = field(default_factory=set)  # pod uids
    events: dict[str, RecordedEvent] = field(default_factory=dict)

    # -- feeding the stream --------------------------------------------------------
    def observe(self, verb: str, obj: Pod | Job) -> str | None:
        """Apply one watched change; returns why it was ignored, if it was."""
        if isinstance(obj, Pod):
            if obj.uid and obj.uid in self.deleted_by_podsweeper:
                return "pod already deleted by podsweeper in this replay"
            key = (obj.namespace, obj.name)
            if verb == "delete":
                self.pods.pop(key, None)
            else:
                self.pods[key] = obj
            return None
        key = obj.ref.key
        if verb == "delete":
            self.jobs.pop(key, None)
            self.gone_jobs.add(key)
        else:
            self.jobs[key] = obj
            self.gone_jobs.discard(key)
        return None

    # -- the Cluster protocol ------------------------------------------------------
    def bounded(self, deadline: float) -> SimulatedCluster:
        return self

    def get_job(self, ref: JobRef) -> Job | None:
        job = self.jobs.get(ref.key)
        if job is not None:
            return job
        if ref.key in self.gone_jobs:
            return None
        raise JobUnknown(f"{ref.kind.kind} {ref.namespace}/{ref.name} never appeared in the stream")

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        return self.pods.get((namespace, name))

    def list_job_pods(self, ref: JobRef) -> list[Pod]:
        return [p for (ns, _), p in self.pods.items()
                if ns == ref.namespace and labels_name_job(p.labels, ref.name)]

    def delete_pod(self, namespace: str, name: str, uid: str) -> DeleteResult:
        current = self.pods.get((namespace, name))
        if current is None:
            return DeleteResult.GONE
        if current.uid != uid:
            return DeleteResult.CONFLICT
        del self.pods[(namespace, name)]
        self.deleted_by_podsweeper.add(uid)
        return DeleteResult.DELETED

    def record_event(self, event: EventRecord) -> None:
        existing = self.events.get(event.name)
        if existing is None:
            self.events[event.name] = RecordedEvent(event)
        else:
            existing.record, existing.count = event, existing.count + 1

    def list_training_pods(self, namespace: str | None) -> Iterator[Pod]:
        for (ns, _), pod in list(self.pods.items()):
            if (namespace is None or ns == namespace) and has_training_label(pod.labels):
                yield pod

    def list_jobs(self, namespace: str | None) -> Iterator[Job]:
        for job in list(self.jobs.values()):
            if namespace is None or job.namespace == namespace:
                yield job
