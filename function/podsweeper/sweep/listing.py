"""The sweep's listing: where a round goes on, the job index, and what the rules nominate.

A round is one listing of everything in scope: one sweep on most clusters, several on a big
one. Each scope's pods are streamed page by page, each page decided and dropped, against an
index of the jobs of each kind met (listed when its first pod shows up, once a round): memory
holds the jobs and the candidates, never all pods. What is nominated is each rule's to say
(its registry entry's pod checks and `nominates` hook, podsweeper.engine.nominated): a new
rule never opens the listing. Every candidate is re-read by its pass before anything is
decided, so a job created after its index was read only costs a pass.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from podsweeper import engine, kinds
from podsweeper.cluster.base import Cluster, PodPage
from podsweeper.config import Settings
from podsweeper.decisions import Action
from podsweeper.model import Intermediate, Job, JobRef, Pod
from podsweeper.namespaces import Closed, NamespacePolicies, Resolved
from podsweeper.ownership import controlled_by, has_current_labels, intermediate_job
from podsweeper.rules import Listed, Looks
from podsweeper.sweep.run import JobKey, SweepRun
from podsweeper.triage import JobPass, PassReason


@dataclass(frozen=True)
class ListPosition:
    """Where a round's listing goes on: the scope (namespace) by its index, and the token of
    the page of its pods to go on after ("": its first page). A scope's chains' JobSets and
    Jobs are listed whole, after its pods."""

    scope: int
    resume: str = ""


class Listing:
    """One per Pipeline: the round's position and its job indexes, under a lock (a threaded
    server may run two sweeps at once)."""

    def __init__(
        self, settings: Settings, policies: NamespacePolicies, clock: Callable[[], float] = time.monotonic
    ):
        self.settings = settings
        self.policies = policies
        self.clock = clock  # the listing's share is measured on it
        self._position: ListPosition | None = None
        # Each scope's job indexes ({kind: {job key: job}}), listed once a round: re-listing
        # 20,000 jobs on every tick of a round would leave a tick no time for pods.
        self._indexes: dict[int, dict[str, dict[JobKey, Job]]] = {}
        # Where the reading of an index not yet complete goes on, by (scope, kind): a kind with
        # 20,000 jobs takes seconds to list, so its index is read in pages across ticks too.
        self._index_resume: dict[tuple[int, str], str] = {}
        self._lock = threading.Lock()

    def list_on(self, cluster: Cluster, now: datetime, list_until: float | None, run: SweepRun) -> None:
        """List on from where the last sweep stopped until `list_until` (on self.clock; None:
        no bound), nominating into `run`. A listing that fails goes on, next time, where this
        one started."""
        with self._lock:
            position = self._position
        went_on = position
        try:
            went_on = self._list(cluster, now, list_until, run, position)
            run.round_done = went_on is None
            if run.round_done:
                with self._lock:
                    self._indexes, self._index_resume = {}, {}  # memory holds no job between rounds
        finally:
            with self._lock:
                self._position = went_on

    def _list(
        self,
        cluster: Cluster,
        now: datetime,
        list_until: float | None,
        run: SweepRun,
        at: ListPosition | None,
    ) -> ListPosition | None:
        """Returns where the next sweep goes on (None: the round is complete). The listing stops
        after the page that ends its share (always after one page at least, so a round always
        moves on)."""
        scopes: list[str | None] = [*sorted(self.settings.namespace_set)] or [None]
        if at is None or at.scope >= len(scopes):
            at = ListPosition(0)
            with self._lock:
                self._indexes, self._index_resume = {}, {}  # a new round reads the jobs anew
        for index in range(at.scope, len(scopes)):
            namespace = scopes[index]
            requested = at.resume if index == at.scope else ""  # the token this page was asked with
            pages = cluster.training_pod_pages(
                namespace,
                chained=self.settings.stuck_terminating_seconds is not None,
                resume=requested or None,
            )
            with self._lock:
                indexes = self._indexes.setdefault(index, {})
            for page in pages:
                if not self._read_indexes(page, indexes, index, namespace, cluster, now, list_until):
                    return ListPosition(index, requested)  # this page again, its jobs read on
                self._nominate_pods(page, indexes, namespace, cluster, now, run)
                if page.resume is not None and list_until is not None and self.clock() >= list_until:
                    return ListPosition(index, page.resume)
                requested = page.resume or ""
            for chained in kinds.TRAINING_KINDS:
                if chained.chain is not None:
                    self._nominate_chain(chained, namespace, cluster, run, now)
            if index + 1 < len(scopes) and list_until is not None and self.clock() >= list_until:
                return ListPosition(index + 1)
        return None

    def _swept(self, pod: Pod, cluster: Cluster, now: datetime) -> Resolved | None:
        """The policy a listed pod is swept under: None for a pod of no job, or where the
        namespace gate is closed."""
        if pod.job is None:
            return None
        admitted = self.policies.admit(cluster, pod.namespace, now)
        return None if isinstance(admitted, Closed) else admitted

    def _decided_here(self, pod: Pod, cluster: Cluster, now: datetime) -> bool:
        """A listed pod decided against its kind's index: a v1 job's, swept, not terminating."""
        return (
            pod.job is not None
            and pod.job.kind.chain is None
            and not pod.terminating
            and self._swept(pod, cluster, now) is not None
        )

    def _read_indexes(
        self,
        page: PodPage,
        indexes: dict[str, dict[JobKey, Job]],
        scope: int,
        namespace: str | None,
        cluster: Cluster,
        now: datetime,
        list_until: float | None,
    ) -> bool:
        """Read on the index of each kind the page's pods need, page by page, until `list_until`
        (one page at least, so it always moves on); False if one is still incomplete: the page
        is then decided by a later sweep, none of it now (a round counts each pod once)."""
        needed = {
            pod.job.kind: None for pod in page.pods if pod.job and self._decided_here(pod, cluster, now)
        }
        for kind in needed:
            key = (scope, kind.kind)
            with self._lock:
                if kind.kind in indexes and key not in self._index_resume:
                    continue
                resume = self._index_resume.get(key)
                index = indexes.setdefault(kind.kind, {})
            for job_page in cluster.job_pages(namespace, kind, resume):
                with self._lock:
                    index.update((job.ref.key, job) for job in job_page.jobs)
                    if job_page.resume is None:
                        self._index_resume.pop(key, None)
                    else:
                        self._index_resume[key] = job_page.resume
                if job_page.resume is not None and list_until is not None and self.clock() >= list_until:
                    return False
        return True

    def _nominate_pods(
        self,
        page: PodPage,
        indexes: dict[str, dict[JobKey, Job]],
        namespace: str | None,
        cluster: Cluster,
        now: datetime,
        run: SweepRun,
    ) -> None:
        """v1 candidates from a page of the scope's pods as listed (the pod rules' checks on the
        listed pod and job, then the job rules' hooks); terminating pods for the stuck pass."""
        run.listed_pods += len(page.pods)
        for pod in page.pods:
            resolved = self._swept(pod, cluster, now)
            if resolved is None or pod.job is None:
                continue
            if pod.terminating:
                if engine.nominated(Looks.STUCK, Listed(pod=pod), now, self.settings):
                    run.stuck[(pod.namespace, pod.name)] = pod
                continue
            if pod.job.kind.chain is not None:
                continue  # a chain's pods are decided at its JobSet (_nominate_chain)
            kind = pod.job.kind
            if kind.kind not in indexes:  # its namespace's policy changed since _read_indexes
                indexes[kind.kind] = {job.ref.key: job for job in cluster.list_jobs(namespace, kind)}
            jobs = indexes[kind.kind]
            key = pod.job.key
            job = jobs.get(key)
            # The version the pod's owner or the listed job names (an MPIJob may be v2beta1).
            version = pod.job.api_version or (job.api_version if job is not None else None)
            ref = JobRef(pod.job.kind, pod.namespace, pod.job.name, None, version)
            # A launcher pod of a listed job is proven by the pass (launchers=None), not here;
            # one whose job is not listed is nobody's to nominate (its Job may be anyone's).
            launchers: frozenset[str] | None = None if job is not None else frozenset()
            listed = engine.decide_pods(ref, job, [pod], now, resolved.settings, launchers)
            run.count(listed)
            if not any(d.action is not Action.SKIP for d in listed) and not engine.nominated(
                Looks.JOB, Listed(job=job, pod=pod), now, resolved.settings
            ):
                continue
            # Pods labelled only the pre-v1.6 way: the pass must list both label sets.
            run.nominate(ref, all_label_sets=not has_current_labels(pod.labels))

    def _nominate_chain(
        self, kind: kinds.TrainingKind, namespace: str | None, cluster: Cluster, run: SweepRun, now: datetime
    ) -> None:
        """A chained kind's candidates, from its JobSets, Jobs and companions (PodGroups) as
        listed, each with whether its listed parent controls it: the chain rules' hooks say
        which call for a pass."""
        chain = kind.chain
        assert chain is not None
        jobs = {(job.namespace, job.name): job for job in cluster.list_jobs(namespace, kind)}
        # The job alone, as listed (a finished TrainJob past a retention, with or without its
        # JobSet): the pass reads the chain again before anything is decided.
        for alone in jobs.values():
            if engine.nominated(Looks.CHAIN, Listed(job=alone), now, self.settings) and not isinstance(
                self.policies.admit(cluster, alone.namespace, now), Closed
            ):
                run.candidates.setdefault(alone.ref.key, JobPass(alone.ref, PassReason.SWEEP))
        jobsets: dict[tuple[str, str], Intermediate] = {}
        for jobset in cluster.list_intermediates(chain.links[0], namespace, ""):
            if not jobset.terminating:  # a terminating JobSet controls nothing the pass would spare
                jobsets[(jobset.namespace, jobset.name)] = jobset
            job = jobs.get((jobset.namespace, jobset.name))
            owned = job is not None and controlled_by(jobset.controller, kind.kind, job.uid)
            if engine.nominated(Looks.CHAIN, Listed(job=job, link=jobset, owned=owned), now, self.settings):
                self._nominate_intermediate(jobset, run, cluster, now)
        for batch_job in cluster.list_intermediates(chain.links[-1], namespace, chain.name_label):
            parent = jobsets.get((batch_job.namespace, batch_job.labels.get(chain.name_label, "")))
            owned = parent is not None and controlled_by(batch_job.controller, parent.link.kind, parent.uid)
            if engine.nominated(Looks.CHAIN, Listed(link=batch_job, owned=owned), now, self.settings):
                self._nominate_intermediate(batch_job, run, cluster, now)
        # Companions (a PodGroup) only of a job listed controlling them: a plain Volcano Job's,
        # or a v1 job's, is nobody's here. A kind the cluster does not serve lists as none.
        for companion_kind in chain.companions:
            for companion in cluster.list_intermediates(companion_kind, namespace, ""):
                job = jobs.get((companion.namespace, companion.name))
                if job is None or not controlled_by(companion.controller, kind.kind, job.uid):
                    continue
                listed = Listed(job=job, link=companion, owned=True)
                if engine.nominated(Looks.CHAIN, listed, now, self.settings):
                    self._nominate_intermediate(companion, run, cluster, now)

    def _nominate_intermediate(
        self, intermediate: Intermediate, run: SweepRun, cluster: Cluster, now: datetime
    ) -> None:
        ref = intermediate_job(intermediate)
        if ref is None or isinstance(self.policies.admit(cluster, ref.namespace, now), Closed):
            return
        run.candidates.setdefault(ref.key, JobPass(ref, PassReason.SWEEP))
