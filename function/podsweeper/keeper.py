"""Keeping failures' evidence: the I/O around podsweeper.evidence (read the job's store, take
in what is new, write it back), with a memory of what this instance already kept so a pod
event that shows no new termination costs no API request."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

from podsweeper.cluster.base import Cluster, JobUnknown
from podsweeper.config import Settings
from podsweeper.evidence import MAX_LOG_BYTES, Failure, merge
from podsweeper.model import JobRef

# Terminations this instance has kept (or found kept): bounded, oldest forgotten first.
REMEMBERED = 100_000
# Logs read per job pass at most: a 1,024-worker job's cleanup must not wait for 1,024 reads.
LOG_READS_PER_PASS = 16


class EvidenceKeeper:
    def __init__(self, settings: Settings):
        self.settings = settings
        self._kept: OrderedDict[tuple[str, str, int, str], None] = OrderedDict()
        self._lock = threading.Lock()

    def keep(self, cluster: Cluster, job: JobRef, failures: Iterable[Failure], read_logs: bool) -> int:
        """Keep what is new of these failures in the job's store; returns how many were new.

        An API failure goes on (the event is answered 503 and retried, nothing is lost)."""
        if not self.settings.evidence:
            return 0
        with self._lock:
            new = [f for f in failures if f.key not in self._kept]
        if not new:
            return 0
        if not job.uid:
            # A pod tied to its job by labels only (a chain's, or an ownerless v1 pod): the
            # store is owned by the job, so read its uid (one GET, only for a new failure).
            try:
                owner = cluster.get_job(job)
            except JobUnknown:
                owner = None
            if owner is None:
                self._remember(new)  # no job to keep it with: do not ask again
                return 0
            job = owner.ref
        if read_logs and self._logs_allowed(job.namespace):
            new = [self._with_logs(cluster, job, f) for f in new[:LOG_READS_PER_PASS]] + new[
                LOG_READS_PER_PASS:
            ]
        for _attempt in (1, 2):  # a store written by another instance meanwhile: read it again
            found = cluster.read_evidence(job)
            records, version = found if found is not None else ([], None)
            merged = merge(records, new)
            if merged is None or cluster.write_evidence(job, merged, version):
                break
        self._remember(new)
        return len(new)

    def _remember(self, kept: Iterable[Failure]) -> None:
        with self._lock:
            for failure in kept:
                self._kept[failure.key] = None
            while len(self._kept) > REMEMBERED:
                self._kept.popitem(last=False)

    def _logs_allowed(self, namespace: str) -> bool:
        return self.settings.evidence_log_lines > 0 and namespace not in self.settings.evidence_logs_excluded

    def _with_logs(self, cluster: Cluster, job: JobRef, failure: Failure) -> Failure:
        logs = cluster.container_log(
            job.namespace,
            failure.pod,
            failure.container,
            failure.restarted,
            self.settings.evidence_log_lines,
            MAX_LOG_BYTES,
        )
        return failure.with_logs(logs)
