"""The in-memory cluster a replay builds from the recorded events themselves.

A product feature, not a test double: it answers the pipeline's reads with the state the
stream has shown so far, and applies podsweeper's own deletes so later events about a
deleted pod are recognised and ignored.

Over 300 lines, on purpose: it is one implementation of the whole Cluster protocol (reads,
lists, deletes with preconditions, suspends, records, evidence) over one state, and splitting
it by call would spread that state over several modules.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from itertools import count
from typing import Any

from podsweeper.cluster.base import JobPage, PodPage, Retained
from podsweeper.decisions import Result
from podsweeper.evidence import CONFIGMAP_DATA_LIMIT, Dropped, NotKept, decode, encode, store_name
from podsweeper.kinds import IntermediateKind, TrainingKind
from podsweeper.model import (
    EventRecord,
    FinishMark,
    Intermediate,
    Job,
    JobRef,
    Namespace,
    Node,
    NodeReady,
    Pod,
    Verb,
)
from podsweeper.ownership import has_training_label, labelled_job_names, labels_name_job


def _uid_label(pod: Pod) -> str:
    """The label with the uid of the top of the pod's chain ("" for a v1 pod)."""
    chain = pod.job.kind.chain if pod.job is not None else None
    return chain.uid_label if chain is not None else ""


def _version(text: str) -> int | None:
    """A resourceVersion as an etcd-backed API server writes it (a decimal integer), or None.

    Kubernetes calls resourceVersions opaque: only two integers are ever compared, and an
    event whose version is not one is applied in stream order."""
    return int(text) if text.isascii() and text.isdigit() else None


def _what(obj: Pod | Job | Intermediate) -> str:
    if isinstance(obj, Pod):
        return f"pod {obj.namespace}/{obj.name}"
    kind = obj.link.kind if isinstance(obj, Intermediate) else obj.kind.kind
    return f"{kind} {obj.namespace}/{obj.name}"


def _slot(obj: Pod | Job | Intermediate) -> tuple[str, ...]:
    """Which object a change is of: what it is, its namespace and name (any incarnation)."""
    if isinstance(obj, Pod):
        return ("Pod", obj.namespace, obj.name)
    if isinstance(obj, Intermediate):
        return (obj.link.kind, obj.namespace, obj.name)
    return obj.ref.key


def _grew(before: int | None, now: int | None) -> bool:
    return now is None or before is None or now > before


@dataclass
class RecordedEvent:
    record: EventRecord
    count: int = 1


@dataclass
class SimulatedCluster:
    pods: dict[tuple[str, str], Pod] = field(default_factory=dict)
    jobs: dict[tuple[str, str, str], Job] = field(default_factory=dict)
    gone_jobs: set[tuple[str, str, str]] = field(default_factory=set)
    deleted_by_podsweeper: set[str] = field(default_factory=set)  # pod, JobSet and Job uids
    # (kind, namespace, name) -> the chains' JobSets and batch Jobs the stream showed
    intermediates: dict[tuple[str, str, str], Intermediate] = field(default_factory=dict)
    # (job key, job uid) -> record: an earlier job of the same name has its own
    finish_marks: dict[tuple[tuple[str, str, str], str | None], FinishMark] = field(default_factory=dict)
    events: dict[str, RecordedEvent] = field(default_factory=dict)
    # (namespace, store name) -> (encoded records, version): the evidence stores
    evidence: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    # (namespace, name) of ConfigMaps someone else made at a store's name: never read nor written
    foreign_stores: set[tuple[str, str]] = field(default_factory=set)
    # (namespace, job name, job uid) -> the copy of a deleted job's evidence kept apart from it
    retained: dict[tuple[str, str, str], Retained] = field(default_factory=dict)
    # object (what it is, namespace, name) -> (the newest integer resourceVersion the stream
    # showed for it, whether that was a delete): what a late, older event is measured against
    # (and the uid it was of)
    newest: dict[tuple[str, ...], tuple[int, bool, str]] = field(default_factory=dict)
    page_size: int = 500  # pods per page of training_pod_pages, as the API client asks
    # The Namespaces the stream showed (their annotations are their policy); a namespace it
    # never showed has none: the global settings apply there.
    namespaces: dict[str, Namespace] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # list_job_pods' index, so a pass costs the same however many pods the replay holds:
        # (namespace, job name) -> names of the pods labelled for it, and each pod key's
        # position in `pods` (results keep the order a scan of `pods` would give).
        self._by_job: dict[tuple[str, str], dict[str, None]] = {}
        self._position: dict[tuple[str, str], int] = {}
        self._counter = count()
        for key, pod in self.pods.items():
            self._indexed(key, pod)

    def _indexed(self, key: tuple[str, str], pod: Pod) -> None:
        if key not in self._position:
            self._position[key] = next(self._counter)
        for _, job in labelled_job_names(pod.labels):
            self._by_job.setdefault((key[0], job), {})[key[1]] = None

    def _unindexed(self, key: tuple[str, str], pod: Pod, keep_position: bool = False) -> None:
        if not keep_position:
            self._position.pop(key, None)
        for _, job in labelled_job_names(pod.labels):
            names = self._by_job.get((key[0], job))
            if names is not None:
                names.pop(key[1], None)
                if not names:
                    del self._by_job[(key[0], job)]

    def _put_pod(self, key: tuple[str, str], pod: Pod) -> None:
        previous = self.pods.get(key)
        if previous is not None:
            self._unindexed(key, previous, keep_position=True)
        self.pods[key] = pod
        self._indexed(key, pod)

    def _drop_pod(self, key: tuple[str, str]) -> None:
        previous = self.pods.pop(key, None)
        if previous is not None:
            self._unindexed(key, previous)

    # -- feeding the stream --------------------------------------------------------
    def observe(
        self, verb: Verb | str, obj: Pod | Job | Intermediate, version: str | None = None
    ) -> str | None:
        """Apply one watched change; returns why it was ignored, if it was.

        `version` is the object's metadata.resourceVersion (default: the one it carries; a Job
        carries none, so the replay passes it). A change older than one already seen for the
        same object (kind, namespace, name: an API server's versions grow across incarnations,
        so a late change of an earlier uid is older too), arriving late through a retry or a
        second watch, is ignored, deletes included, and so is an add/update not newer than the
        object's delete: the live function re-reads the cluster and would never see that state.
        Only integer versions are compared; otherwise stream order.
        """
        verb = Verb(verb)
        if version is None and not isinstance(obj, Job):
            version = obj.resource_version
        older = self._older(verb, obj, version or "")
        if older:
            return older
        if obj.uid and obj.uid in self.deleted_by_podsweeper:
            kind = "pod" if isinstance(obj, Pod) else obj.kind.kind if isinstance(obj, Job) else obj.link.kind
            return f"{kind} already deleted by podsweeper in this replay"
        if isinstance(obj, Intermediate):
            intermediate_key = (obj.link.kind, obj.namespace, obj.name)
            if verb is Verb.DELETE:
                self.intermediates.pop(intermediate_key, None)
            else:
                self.intermediates[intermediate_key] = obj
            return None
        if isinstance(obj, Pod):
            key = (obj.namespace, obj.name)
            if verb is Verb.DELETE:
                self._drop_pod(key)
            else:
                self._put_pod(key, obj)
            return None
        job_key = obj.ref.key
        if verb is Verb.DELETE:
            self.jobs.pop(job_key, None)
            self.gone_jobs.add(job_key)
        else:
            self.jobs[job_key] = obj
            self.gone_jobs.discard(job_key)
        return None

    def _older(self, verb: Verb, obj: Pod | Job | Intermediate, version: str) -> str | None:
        """Why this change is older than the stream already showed for its object, if it is;
        records its version otherwise."""
        number = _version(version)
        if number is None:
            return None
        slot = _slot(obj)
        seen = self.newest.get(slot)
        if seen is not None:
            last, deleted, uid = seen
            if deleted and verb is not Verb.DELETE and number == last and obj.uid == uid:
                return (
                    f"{_what(obj)} {verb.value} at resourceVersion {number} is older than its delete "
                    f"(resourceVersion {last}): a late event does not bring it back"
                )
            if number < last and deleted:
                return (
                    f"{_what(obj)} {verb.value} at resourceVersion {number} is older than its delete "
                    f"(resourceVersion {last}): a late event does not bring it back"
                )
            if number < last:
                return (
                    f"{_what(obj)} {verb.value} at resourceVersion {number} is older than "
                    f"resourceVersion {last} already seen: the live function re-reads and never sees it"
                )
        self.newest[slot] = (number, verb is Verb.DELETE, obj.uid)
        return None

    # -- the Cluster protocol ------------------------------------------------------
    def bounded(self, deadline: float) -> SimulatedCluster:
        return self

    def get_job(self, ref: JobRef) -> Job | None:
        return self.jobs.get(ref.key)

    def knows_job(self, ref: JobRef) -> bool:
        return ref.key in self.jobs or ref.key in self.gone_jobs

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        return self.pods.get((namespace, name))

    def list_job_pods(self, ref: JobRef, all_label_sets: bool = False) -> list[Pod]:
        # In memory both label sets cost nothing: always the union.
        keys = sorted(
            ((ref.namespace, name) for name in self._by_job.get((ref.namespace, ref.name), ())),
            key=self._position.__getitem__,
        )
        return [p for p in (self.pods[key] for key in keys) if labels_name_job(p.labels, ref)]

    def read_finish_mark(self, job: JobRef, created: datetime | None = None) -> FinishMark | None:
        # Only podsweeper writes marks here, each after its job showed: none predates its job.
        return self.finish_marks.get((job.key, job.uid))

    def write_finish_mark(self, job: JobRef, mark: FinishMark) -> None:
        self.finish_marks[(job.key, job.uid)] = mark

    def observe_namespace(self, verb: Verb | str, namespace: Namespace) -> None:
        """A Namespace's change: its annotations from here on (deleted: none)."""
        if Verb(verb) is Verb.DELETE:
            self.namespaces.pop(namespace.name, None)
        else:
            self.namespaces[namespace.name] = namespace

    def get_namespace(self, name: str) -> Namespace | None:
        return self.namespaces.get(name)

    def get_node(self, name: str) -> Node | None:
        # A recorded stream carries no node facts: every node counts as Ready, so rule
        # stuck-terminating (which never acts on a Ready node) decides nothing in a replay.
        return Node(name, NodeReady.TRUE)

    def delete_pod(
        self, namespace: str, name: str, uid: str, resource_version: str = "", force: bool = False
    ) -> Result:
        current = self.pods.get((namespace, name))
        if current is None:
            return Result.GONE
        if current.uid != uid or (
            resource_version and current.resource_version and current.resource_version != resource_version
        ):
            return Result.CONFLICT
        self._drop_pod((namespace, name))
        self.deleted_by_podsweeper.add(uid)
        return Result.DELETED

    def get_intermediate(self, link: IntermediateKind, namespace: str, name: str) -> Intermediate | None:
        return self.intermediates.get((link.kind, namespace, name))

    def list_intermediates(
        self, link: IntermediateKind, namespace: str | None, selector: str
    ) -> Iterator[Intermediate]:
        label, _, value = selector.partition("=")
        for (kind, ns, _), intermediate in list(self.intermediates.items()):
            if kind != link.kind or (namespace is not None and ns != namespace):
                continue
            labels = intermediate.labels
            if not label or (label in labels and (not value or labels[label] == value)):
                yield intermediate

    def delete_intermediate(self, link: IntermediateKind, namespace: str, name: str, uid: str) -> Result:
        current = self.intermediates.get((link.kind, namespace, name))
        if current is None:
            return Result.GONE
        if current.uid != uid:
            return Result.CONFLICT
        del self.intermediates[(link.kind, namespace, name)]
        self.deleted_by_podsweeper.add(uid)
        # Background propagation: what it controls goes too (the garbage collector's part).
        for key, pod in list(self.pods.items()):
            if pod.batch_job is not None and (
                pod.batch_job.uid == uid or pod.labels.get(_uid_label(pod)) == uid
            ):
                self._drop_pod(key)
                self.deleted_by_podsweeper.add(pod.uid)
        for intermediate in list(self.intermediates.values()):
            if intermediate.controller is not None and intermediate.controller.uid == uid:
                self.delete_intermediate(
                    intermediate.link, intermediate.namespace, intermediate.name, intermediate.uid
                )
        return Result.DELETED

    def delete_job(self, ref: JobRef, uid: str, resource_version: str = "") -> Result:
        current = self.jobs.get(ref.key)
        if current is None:
            return Result.GONE
        changed = bool(resource_version) and current.resource_version != resource_version
        if current.uid != uid or changed:
            return Result.CONFLICT
        del self.jobs[ref.key]
        self.gone_jobs.add(ref.key)
        self.deleted_by_podsweeper.add(uid)
        # Background propagation: what it controls goes (the garbage collector's part), and
        # the records it owns (its finish mark, its evidence store) with it.
        for intermediate in list(self.intermediates.values()):
            if intermediate.controller is not None and intermediate.controller.uid == uid:
                self.delete_intermediate(
                    intermediate.link, intermediate.namespace, intermediate.name, intermediate.uid
                )
        self.finish_marks.pop((ref.key, uid), None)
        self.evidence.pop((ref.namespace, store_name(ref.name)), None)
        return Result.DELETED

    def retain_evidence(self, job: JobRef, records: list[dict[str, Any]], at: datetime) -> bool:
        if not job.uid:
            return False
        self.retained[(job.namespace, job.name, job.uid)] = Retained(job.uid, at.isoformat(), list(records))
        return True

    def read_retained_evidence(self, namespace: str, name: str) -> list[Retained]:
        found = [r for (ns, job, _), r in self.retained.items() if (ns, job) == (namespace, name)]
        return sorted(found, key=lambda r: r.at)

    def suspend_job(self, ref: JobRef) -> Result:
        current = self.jobs.get(ref.key)
        if current is None:
            return Result.GONE
        if current.uid != ref.uid:
            return Result.CONFLICT
        self.jobs[ref.key] = dataclasses.replace(current, suspended=True)
        return Result.SUSPENDED

    def read_evidence(self, job: JobRef) -> tuple[list[dict[str, Any]], str] | None:
        key = (job.namespace, store_name(job.name))
        if key in self.foreign_stores:
            raise NotKept(Dropped.FOREIGN, f"ConfigMap {'/'.join(key)} is not podsweeper's")
        found = self.evidence.get(key)
        return (decode(found[0]), found[1]) if found else None

    def write_evidence(self, job: JobRef, records: list[dict[str, Any]], version: str | None) -> bool:
        """As the API server: a store at another version is not replaced (409: False), one
        whose data passes a ConfigMap's limit is refused (422: NotKept)."""
        key = (job.namespace, store_name(job.name))
        if key in self.foreign_stores:
            return False  # the create finds it there (409)
        current = self.evidence.get(key)
        if (current[1] if current else None) != version:
            return False
        text = encode(records)
        if len("evidence.json") + len(text.encode()) > CONFIGMAP_DATA_LIMIT:
            raise NotKept(
                Dropped.REFUSED, f"ConfigMap {'/'.join(key)}: data over {CONFIGMAP_DATA_LIMIT} bytes (422)"
            )
        self.evidence[key] = (text, str(int(version or 0) + 1))
        return True

    def container_log(
        self, namespace: str, pod: str, container: str, previous: bool, lines: int, limit_bytes: int
    ) -> str | None:
        return None  # a recorded stream carries no logs

    def record_event(self, event: EventRecord) -> bool:
        existing = self.events.get(event.name)
        if existing is None:
            self.events[event.name] = RecordedEvent(event)
            return True
        if not _grew(existing.record.progress, event.progress):
            return False
        existing.record, existing.count = event, existing.count + 1
        return True

    def training_pod_pages(
        self, namespace: str | None, chained: bool = False, resume: str | None = None
    ) -> Iterator[PodPage]:
        """Pages of `page_size` in the order the pods came; the token: the last one's place."""
        after = int(resume) if resume else -1
        selected = [
            (self._position[key], pod)
            for key, pod in list(self.pods.items())
            if (namespace is None or key[0] == namespace)
            and self._position[key] > after
            and (has_training_label(pod.labels) or (chained and labelled_job_names(pod.labels)))
        ]
        for start in range(0, len(selected), self.page_size):
            page = selected[start : start + self.page_size]
            last = start + self.page_size >= len(selected)
            yield PodPage([pod for _, pod in page], None if last else str(page[-1][0]))
        if not selected:
            yield PodPage([], None)

    def job_pages(
        self, namespace: str | None, kind: TrainingKind, resume: str | None = None
    ) -> Iterator[JobPage]:
        """Pages of `page_size` in the order the jobs came; the token: how many came before."""
        listed = [
            job
            for job in list(self.jobs.values())
            if (namespace is None or job.namespace == namespace) and job.kind == kind
        ]
        start = int(resume) if resume else 0
        for at in range(start, len(listed), self.page_size):
            after = at + self.page_size
            yield JobPage(listed[at:after], str(after) if after < len(listed) else None)
        if start >= len(listed):
            yield JobPage([], None)

    def list_jobs(self, namespace: str | None, kind: TrainingKind | None = None) -> Iterator[Job]:
        for job in list(self.jobs.values()):
            if (namespace is None or job.namespace == namespace) and (kind is None or job.kind == kind):
                yield job
