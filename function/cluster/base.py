"""The interface the pipeline needs from a cluster, and the records it exchanges."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Protocol

from function.model import Job, JobRef, Pod


class DeleteResult(str, Enum):
    DELETED = "deleted"
    GONE = "gone"  # 404: already deleted by someone else
    CONFLICT = "conflict"  # 409: the uid precondition failed, a new pod has this name
    DRY_RUN = "dry-run"
    DEFERRED = "deferred"  # over PODSWEEPER_MAX_DELETES_PER_EVENT: next event or sweep


class JobUnknown(Exception):
    """The replay has never seen this job: neither present nor known to be gone."""


@dataclass(frozen=True)
class EventRecord:
    """A Kubernetes Event about a job. Same `name` = same Event: its count goes up."""

    name: str
    involved: JobRef
    type: str  # "Normal" | "Warning"
    reason: str
    message: str
    time: datetime


class Cluster(Protocol):
    def get_job(self, ref: JobRef) -> Job | None:
        """The job as it is now; None on 404. Raises JobUnknown only in a replay."""

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        """The pod as it is now; None on 404."""

    def list_job_pods(self, ref: JobRef, all_label_sets: bool = False) -> list[Pod]:
        """Pods labelled as <ref.name>'s (v1.6+ or pre-v1.6 job-name labels) in ref's namespace."""

    def bounded(self, deadline: float) -> "Cluster":
        """A view whose calls all end by `deadline` (a time.monotonic() value)."""

    def delete_pod(self, namespace: str, name: str, uid: str, resource_version: str = "") -> DeleteResult:
        """Delete with preconditions uid (and resourceVersion, when given); 404 -> GONE, 409 -> CONFLICT.

        The resourceVersion precondition makes "DELETED" mean "this call deleted it": two
        racing deletes of one pod otherwise both get 200 (always, for a pod on a node), and a
        pod that changed since it was read (say, just opted out) is not deleted on stale facts.
        """

    def record_event(self, event: EventRecord) -> None:
        """Create the Event, or bump the count of the existing one with the same name."""

    def list_training_pods(self, namespace: str | None) -> Iterator[Pod]:
        """Every pod carrying a training job label (paginated); namespace None = all."""

    def list_jobs(self, namespace: str | None) -> Iterator[Job]:
        """Every training job of every registered kind (paginated); namespace None = all."""
