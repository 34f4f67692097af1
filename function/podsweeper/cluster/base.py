"""The interface the pipeline needs from a cluster: the only door to the Kubernetes API."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from podsweeper.decisions import Result
from podsweeper.kinds import IntermediateKind, TrainingKind
from podsweeper.model import (
    EventRecord,
    FinishMark,
    Intermediate,
    Job,
    JobRef,
    Namespace,
    Node,
    Pod,
)


@dataclass(frozen=True)
class PodPage:
    """One page of a listing of training pods, and where the listing goes on after it: a token
    only the cluster that made it reads (None after the last page)."""

    pods: list[Pod]
    resume: str | None


@dataclass(frozen=True)
class JobPage:
    """One page of a listing of one kind's jobs, and where the listing goes on after it (None
    after the last page); the token, like a PodPage's, only the cluster that made it reads."""

    jobs: list[Job]
    resume: str | None


@dataclass(frozen=True)
class Retained:
    """A copy of a deleted job's evidence, kept apart from it (rule expired-trainjob)."""

    uid: str  # the job's
    at: str  # when the copy was made (RFC 3339), as it says
    records: list[dict[str, Any]]


class Cluster(Protocol):
    def get_job(self, ref: JobRef) -> Job | None:
        """The job as it is now; None on 404 (or, in a replay, when the stream never showed it)."""

    def knows_job(self, ref: JobRef) -> bool:
        """Whether this cluster can tell if the job exists: the API always can (a 404 says it
        is gone); a replay cannot for a job its stream never showed, and then no pass decides."""

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        """The pod as it is now; None on 404."""

    def list_job_pods(self, ref: JobRef, all_label_sets: bool = False) -> list[Pod]:
        """Pods labelled as <ref.name>'s (v1.6+ or pre-v1.6 job-name labels) in ref's namespace."""

    def bounded(self, deadline: float) -> Cluster:
        """A view whose calls all end by `deadline` (a time.monotonic() value)."""

    def read_finish_mark(self, job: JobRef, created: datetime | None = None) -> FinishMark | None:
        """podsweeper's record that this chained job finished; None when there is none, or
        when the ConfigMap is not podsweeper's record of this job (its label, owned by
        ref.uid), or was made before `created` (the job's creation, when known)."""

    def write_finish_mark(self, job: JobRef, mark: FinishMark) -> None:
        """Keep the record (a ConfigMap owned by the job, ref.uid: it goes with the job)."""

    def get_node(self, name: str) -> Node | None:
        """The node's readiness now; None when the node object no longer exists."""

    def get_namespace(self, name: str) -> Namespace | None:
        """The Namespace as it is now (its annotations are its podsweeper policy); None on 404
        (or, in a replay, when the stream never showed it: no annotations)."""

    def delete_pod(
        self, namespace: str, name: str, uid: str, resource_version: str = "", force: bool = False
    ) -> Result:
        """Delete with preconditions uid (and resourceVersion, when given); `force`: grace
        period 0 (rule stuck-terminating only).

        Returns DELETED, GONE (404) or CONFLICT (409). The resourceVersion precondition makes
        DELETED mean "this call deleted it": two racing deletes of one pod otherwise both get
        200 (always, for a pod on a node), and a pod that changed since it was read (say, just
        opted out) is not deleted on stale facts.
        """

    def get_intermediate(self, link: IntermediateKind, namespace: str, name: str) -> Intermediate | None:
        """A chain's JobSet or batch Job as it is now; None on 404 (or never seen, in a replay)."""

    def list_intermediates(
        self, link: IntermediateKind, namespace: str | None, selector: str
    ) -> Iterator[Intermediate]:
        """JobSets or batch Jobs matching a `label=value` or `label` selector (paginated)."""

    def delete_intermediate(self, link: IntermediateKind, namespace: str, name: str, uid: str) -> Result:
        """Delete a JobSet or batch Job with preconditions uid and background propagation
        (the garbage collector then removes what it controls). DELETED, GONE or CONFLICT."""

    def delete_job(self, ref: JobRef, uid: str, resource_version: str = "") -> Result:
        """Delete the training job itself (rule expired-trainjob) with preconditions uid (and
        resourceVersion, when given: a finished job changed since it was read, say opted out,
        is not deleted) and background propagation: the garbage collector removes its chain
        after it. DELETED, GONE or CONFLICT."""

    def suspend_job(self, ref: JobRef) -> Result:
        """Set the job's suspend field (kinds: spec.runPolicy.suspend, a TrainJob's spec.suspend)
        on the job whose uid is ref.uid.

        Returns SUSPENDED, GONE (404) or CONFLICT (another job has that name now).
        """

    def read_evidence(self, job: JobRef) -> tuple[list[dict[str, Any]], str] | None:
        """The job's evidence records and the store's version; None when it has no store."""

    def write_evidence(self, job: JobRef, records: list[dict[str, Any]], version: str | None) -> bool:
        """Create the job's store (version None) or replace it at `version`, owned by the job
        (ref.uid) so it goes with it. False when someone wrote it since (409); NotKept
        (evidence.py) when the API refuses it for good or a read found it is not podsweeper's."""

    def retain_evidence(self, job: JobRef, records: list[dict[str, Any]], at: datetime) -> bool:
        """Keep a copy of the job's records apart from it (owned by nothing, named by its uid)
        before the job is deleted: its own store goes with it. False when someone wrote the
        copy since it was read (409); NotKept when it cannot be podsweeper's or is refused."""

    def read_retained_evidence(self, namespace: str, name: str) -> list[Retained]:
        """The copies kept apart from deleted jobs of this name, oldest first."""

    def container_log(
        self, namespace: str, pod: str, container: str, previous: bool, lines: int, limit_bytes: int
    ) -> str | None:
        """The last lines of a container's log (of its previous run if `previous`); None when
        there is none to read (the pod is gone, the node does not serve it)."""

    def record_event(self, event: EventRecord) -> bool:
        """Create the Event, or bump the count of the existing one with the same name.

        False (nothing written) when the existing one's `progress` is not below the event's.
        """

    def training_pod_pages(
        self, namespace: str | None, chained: bool = False, resume: str | None = None
    ) -> Iterator[PodPage]:
        """Every pod carrying a training job label, page by page, each pod once; namespace
        None = all. `chained`: also every pod labelled as a chain's (a JobSet's). `resume`: a
        page's token, to go on after that page (in a later sweep: the pods may have changed
        since, and a pod may then be missed or met again)."""

    def list_jobs(self, namespace: str | None, kind: TrainingKind | None = None) -> Iterator[Job]:
        """Every training job of `kind` (None: every registered kind), paginated; namespace
        None = all."""

    def job_pages(
        self, namespace: str | None, kind: TrainingKind, resume: str | None = None
    ) -> Iterator[JobPage]:
        """Every job of `kind` (each of its served versions in turn), page by page; namespace
        None = all. `resume`: a page's token, to go on after that page (in a later sweep)."""
