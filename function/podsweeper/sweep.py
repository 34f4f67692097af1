"""The backstop sweep: find the jobs whose listed state needs action, run a pass on each.

A sweep lists the training pods (and a chain's JobSets and Jobs) for at most LIST_SHARE of its
time bound, then passes what it nominated until WORK_SHARE of it is spent. What it did not
reach is where the next sweep goes on: one Sweeper per Pipeline owns that position, the
candidates not yet passed and the round's leftover-GPU counts, under a lock (a threaded server
may run two sweeps at once). A round is one listing of everything in scope: one sweep on most
clusters, several on a big one, and the leftover gauge is replaced when a round ends.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from functools import partial

from podsweeper import engine, kinds, metrics
from podsweeper.actions import Acted, Applied
from podsweeper.cluster.base import Cluster, PodPage
from podsweeper.config import Settings
from podsweeper.decisions import Action, Decision, Result
from podsweeper.errors import ApiUnavailable
from podsweeper.lineage import made_again
from podsweeper.model import Intermediate, Job, JobRef, Node, Pod
from podsweeper.namespaces import Resolved
from podsweeper.ownership import controlled_by, has_current_labels, intermediate_job
from podsweeper.passes import JobPassRunner, stamped
from podsweeper.policy import Mode
from podsweeper.triage import JobPass, PassReason, in_scope

JobKey = tuple[str, str, str]
# Results after which a pod's GPUs are free (a suspended job's operator removes its pods).
RECLAIMED = frozenset({Result.DELETED, Result.SUSPENDED})
# Decisions whose objects hold GPUs for nothing (the leftover gauge).
WASTING = frozenset({Action.DELETE, Action.FORCE_DELETE, Action.WARN, Action.SUSPEND})

# Carries out one pass's decisions within a delete budget; returns the DELETE requests sent
# (what the sweep's total counts, whatever each answered) and the deletes made.
Act = Callable[[list[Decision], int], Acted]
# The share of a sweep's time bound its listing may take, and the share its listing and passes
# together may take. Listing 50,000 pods takes most of a 10 s bound on a small control plane:
# read in rounds instead. The rest of the bound is headroom: a tick stays short when the API
# server is slow, and a sweep never holds an instance for most of its bound.
LIST_SHARE = 0.15
WORK_SHARE = 0.25


class SweepEnd(StrEnum):
    """How a sweep ended: code and tests branch on this, not on the note's words."""

    DONE = "done"  # the round's listing is complete and every candidate's pass ran
    LISTING = "listing"  # every candidate's pass ran; the next sweep lists on where this one stopped
    TIME_BOUND = "time-bound"  # out of time: the next sweep passes the jobs left first
    WORK_SHARE = "work-share"  # WORK_SHARE of the time bound spent: likewise
    DELETE_CAP = "delete-cap"  # PODSWEEPER_MAX_DELETES_PER_EVENT reached: likewise


@dataclass(frozen=True)
class SweepReport:
    end: SweepEnd
    note: str


@dataclass(frozen=True)
class ListPosition:
    """Where a round's listing goes on: the scope (namespace) by its index, and the token of
    the page of its pods to go on after ("": its first page). A scope's chains' JobSets and
    Jobs are listed whole, after its pods."""

    scope: int
    resume: str = ""


@dataclass
class SweepRun:
    """One sweep's candidates, how much it listed, and its leftover GPUs by (namespace, rule)."""

    candidates: dict[JobKey, JobPass] = field(default_factory=dict)
    stuck: dict[tuple[str, str], Pod] = field(default_factory=dict)  # by (namespace, name)
    leftover: defaultdict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    listed_pods: int = 0
    round_done: bool = False  # this sweep's listing reached the end of the round

    def count(self, decisions: list[Decision]) -> None:
        for decision in decisions:
            if decision.action in WASTING:
                self.leftover[(decision.namespace, decision.rule.value)] += decision.gpus

    def nominate(self, ref: JobRef, all_label_sets: bool = False) -> None:
        known = self.candidates.get(ref.key)
        if known is None or (all_label_sets and not known.all_label_sets):
            self.candidates[ref.key] = JobPass(ref, PassReason.SWEEP, all_label_sets=all_label_sets)


def _count_chains(run: SweepRun, act: Act, decisions: list[Decision], bound: int) -> Acted:
    """A chain's pods are not decided one by one: its passes' decisions (a restarted TrainJob,
    an orphaned or leftover JobSet/Job) carry the GPUs their active pods hold."""
    run.count([d for d in decisions if d.job.kind.chain is not None])
    return act(decisions, bound)


def runs_on(job: Job, jobset: Intermediate) -> bool:
    """A finished TrainJob whose JobSet, as listed, has not ended (nor is being stopped): its
    pass reads the pods (Trainer may have failed to delete it, kubeflow/trainer#3833)."""
    return (
        job.finished is not None
        and jobset.finished is None
        and not jobset.suspended
        and not jobset.terminating
    )


def looks_stuck(pod: Pod, now: datetime, settings: Settings) -> bool:
    limit = settings.stuck_terminating_seconds
    due = pod.deletion_due
    return limit is not None and due is not None and (now - due).total_seconds() >= limit


@dataclass
class Sweeper:
    settings: Settings
    passes: JobPassRunner
    clock: Callable[[], float] = time.monotonic  # the listing's share is measured on it
    _position: ListPosition | None = field(default=None, init=False, repr=False)
    _pending: dict[JobKey, JobPass] = field(default_factory=dict, init=False, repr=False)
    # The last sweep left jobs waiting and passed none (its listing spent the work share): the
    # next one passes the first of them whatever its own listing took.
    _starved: bool = field(default=False, init=False, repr=False)
    _round: defaultdict[tuple[str, str], int] = field(
        default_factory=lambda: defaultdict(int), init=False, repr=False
    )
    # Each scope's job indexes ({kind: {job key: job}}), listed once a round: re-listing 20,000
    # jobs on every tick of a round would leave a tick no time for pods.
    _indexes: dict[int, dict[str, dict[JobKey, Job]]] = field(default_factory=dict, init=False, repr=False)
    # Where the reading of an index not yet complete goes on, by (scope, kind): a kind with
    # 20,000 jobs takes seconds to list, so its index is read in pages across ticks too.
    _index_resume: dict[tuple[int, str], str] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def sweep(
        self, cluster: Cluster, now: datetime, deadline: float | None, act: Act, run: SweepRun
    ) -> SweepReport:
        """Each scope's pods are streamed page by page, each page decided and dropped, against an
        index of the jobs of each kind met (listed when its first pod shows up, once a round): memory holds the
        jobs and the candidates, never all pods. A job created after its index was read makes its
        pods look orphaned here, but every candidate is re-read by its pass before anything is
        decided. The listing stops after the page that ends its share of the time bound (always
        after one page at least, so a round always moves on), the passes stop at the end of the
        work share, the time bound or the delete cap, and the next sweep goes on from both. The
        caller publishes `run`."""
        with self._lock:
            position = self._position
            run.candidates.update(self._pending)
            carried = list(self._pending)  # in the order they were left
            starved = self._starved
        start = self.clock()
        bound = None if deadline is None else max(0.0, deadline - time.monotonic())
        list_until = None if bound is None else start + LIST_SHARE * bound
        work_until = None if bound is None else start + WORK_SHARE * bound
        went_on = position  # a listing that fails goes on, next time, where this one started
        try:
            went_on = self._nominate(cluster, now, list_until, run, position)
            run.round_done = went_on is None
            if run.round_done:
                with self._lock:
                    self._indexes, self._index_resume = {}, {}  # memory holds no job between rounds
        finally:
            with self._lock:
                self._position = went_on
        report = self._run_passes(
            run,
            (carried, starved),
            cluster,
            now,
            (deadline, work_until),
            partial(_count_chains, run, act),
        )
        if run.stuck:
            stuck_note = self._sweep_stuck(run.stuck, cluster, now, deadline, act)
            report = SweepReport(report.end, f"{report.note}; {stuck_note}")
        return report

    def publish(self, run: SweepRun, applied: Iterable[Applied]) -> None:
        """The leftover gauge, replaced when a round ends: what the round saw wasted, less
        what it reclaimed. Until then a big cluster's gauge shows the last round's."""
        with self._lock:
            for slot, gpus in run.leftover.items():
                self._round[slot] += gpus
            for item in applied:
                if item.result in RECLAIMED and item.decision.action in WASTING:
                    slot = (item.decision.namespace, item.decision.rule.value)
                    self._round[slot] = max(0, self._round[slot] - item.decision.gpus)
            if run.round_done:
                metrics.publish_leftover({slot: gpus for slot, gpus in self._round.items() if gpus})
                self._round.clear()

    def _nominate(
        self,
        cluster: Cluster,
        now: datetime,
        list_until: float | None,
        run: SweepRun,
        at: ListPosition | None,
    ) -> ListPosition | None:
        """List on from `at` until `list_until` (on self.clock; None: no bound); returns where
        the next sweep goes on (None: the round is complete)."""
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
                self._nominate_v1(page, indexes, namespace, cluster, now, run)
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
        """The policy a listed pod is swept under: None for a pod of no job, out of scope or in
        a namespace podsweeper is off in (the one filter _read_indexes and _nominate_v1 share)."""
        if pod.job is None or in_scope(pod.namespace, self.settings) is not None:
            return None
        resolved = self.passes.resolved(cluster, pod.namespace, now)
        return None if resolved.policy.mode is Mode.OFF else resolved

    def _decided_here(self, pod: Pod, cluster: Cluster, now: datetime) -> bool:
        """A listed pod _nominate_v1 decides against its kind's index: a v1 job's, swept, not
        terminating."""
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

    def _nominate_v1(
        self,
        page: PodPage,
        indexes: dict[str, dict[JobKey, Job]],
        namespace: str | None,
        cluster: Cluster,
        now: datetime,
        run: SweepRun,
    ) -> None:
        """v1 candidates from a page of the scope's pods as listed; stuck ones for rule
        stuck-terminating. Each kind's jobs are listed once per round, when its first pod shows
        up (`indexes`, read by _read_indexes): no LIST for a kind the scope runs none of."""
        stuck_rule = self.settings.stuck_terminating_seconds is not None
        run.listed_pods += len(page.pods)
        for pod in page.pods:
            resolved = self._swept(pod, cluster, now)
            if resolved is None or pod.job is None:
                continue
            if pod.terminating:
                if stuck_rule and looks_stuck(pod, now, self.settings):
                    run.stuck[(pod.namespace, pod.name)] = pod
                continue
            if pod.job.kind.chain is not None:
                continue  # a chain's pods are decided at its JobSet (_nominate_chain)
            kind = pod.job.kind
            if kind.kind not in indexes:  # its namespace's policy changed since _read_indexes
                indexes[kind.kind] = {job.ref.key: job for job in cluster.list_jobs(namespace, kind)}
            jobs = indexes[kind.kind]
            key = pod.job.key
            # The version the pod's owner or the listed job names (an MPIJob may be v2beta1).
            version = pod.job.api_version or (jobs[key].api_version if key in jobs else None)
            ref = JobRef(pod.job.kind, pod.namespace, pod.job.name, None, version)
            # A launcher pod of a listed job is proven by the pass (launchers=None), not here;
            # one whose job is not listed is nobody's to nominate (its Job may be anyone's).
            launchers: frozenset[str] | None = None if key in jobs else frozenset()
            listed = engine.decide_pods(ref, jobs.get(key), [pod], now, resolved.settings, launchers)
            run.count(listed)
            unsettled = key in jobs and jobs[key].failed_unsettled_at is not None  # its pass decides
            if not unsettled and not any(d.action is not Action.SKIP for d in listed):
                continue
            # Pods labelled only the pre-v1.6 way: the pass must list both label sets.
            run.nominate(ref, all_label_sets=not has_current_labels(pod.labels))

    def _nominate_chain(
        self, kind: kinds.TrainingKind, namespace: str | None, cluster: Cluster, run: SweepRun, now: datetime
    ) -> None:
        """A chained kind's candidates, from its JobSets and Jobs as listed: a JobSet whose
        TrainJob is gone or finished, a Job whose JobSet is gone, an ownerless one. The pass
        re-reads each before anything is decided."""
        chain = kind.chain
        assert chain is not None
        jobs = {(job.namespace, job.name): job for job in cluster.list_jobs(namespace, kind)}
        jobsets: dict[tuple[str, str], Intermediate] = {}
        for jobset in cluster.list_intermediates(chain.links[0], namespace, ""):
            if not jobset.terminating:  # a terminating JobSet controls nothing the pass would spare
                jobsets[(jobset.namespace, jobset.name)] = jobset
            job = jobs.get((jobset.namespace, jobset.name))
            owned = job is not None and controlled_by(jobset.controller, kind.kind, job.uid)
            if owned and job is not None and not made_again(job, jobset) and not runs_on(job, jobset):
                continue  # its first JobSet, ended with its job or running with it: nothing a rule names
            self._nominate_intermediate(jobset, run, cluster, now)
        for batch_job in cluster.list_intermediates(chain.links[-1], namespace, chain.name_label):
            parent = jobsets.get((batch_job.namespace, batch_job.labels.get(chain.name_label, "")))
            if parent is not None and controlled_by(batch_job.controller, parent.link.kind, parent.uid):
                continue
            self._nominate_intermediate(batch_job, run, cluster, now)

    def _nominate_intermediate(
        self, intermediate: Intermediate, run: SweepRun, cluster: Cluster, now: datetime
    ) -> None:
        ref = intermediate_job(intermediate)
        if ref is None or in_scope(ref.namespace, self.settings) is not None:
            return
        if self.passes.resolved(cluster, ref.namespace, now).policy.mode is Mode.OFF:
            return
        run.candidates.setdefault(ref.key, JobPass(ref, PassReason.SWEEP))

    def _sweep_stuck(
        self,
        stuck: dict[tuple[str, str], Pod],
        cluster: Cluster,
        now: datetime,
        deadline: float | None,
        act: Act,
    ) -> str:
        """Rule stuck-terminating: re-read each pod, its node and its job, then decide.

        Each node is read once per sweep (a lost node holds many pods). The decisions are
        carried out together, so one Event per job names all its pods, within the same delete
        cap as a pass (PODSWEEPER_MAX_DELETES_PER_EVENT; the rest are deferred: 429)."""
        decided: list[Decision] = []
        nodes: dict[str, Node | None] = {}
        stopped = ""
        for index, (namespace, name) in enumerate(sorted(stuck)):
            if deadline is not None and time.monotonic() > deadline - 1.0:
                stopped = f" (stopped at its time bound after {index} of {len(stuck)})"
                break
            pod = cluster.get_pod(namespace, name)
            if pod is None or pod.job is None or pod.node is None or not looks_stuck(pod, now, self.settings):
                continue
            if pod.job.kind.chain is not None and not self._chain_proven(pod, cluster):
                continue
            resolved = self.passes.resolved(cluster, namespace, now)
            if resolved.policy.mode is Mode.OFF:
                continue
            job = cluster.get_job(pod.job)
            if pod.node not in nodes:
                nodes[pod.node] = cluster.get_node(pod.node)
            found = engine.decide_stuck(pod, nodes[pod.node], job, now, resolved.settings)
            decided += stamped(found, resolved.policy)
        forced = act(decided, self.settings.max_deletes_per_event).deleted if decided else 0
        return f"{forced} of {len(stuck)} pod(s) stuck terminating force-deleted{stopped}"

    @staticmethod
    def _chain_proven(pod: Pod, cluster: Cluster) -> bool:
        """A chain's pod counts as a training pod only when its JobSet, read now, is the one
        its labels name and a TrainJob controls it (a plain JobSet's pods look alike)."""
        assert pod.job is not None and pod.job.kind.chain is not None
        chain = pod.job.kind.chain
        jobset = cluster.get_intermediate(chain.links[0], pod.namespace, pod.job.name)
        return (
            jobset is not None
            and jobset.uid == pod.labels.get(chain.uid_label)
            and jobset.controller is not None
            and jobset.controller.kind == pod.job.kind.kind
        )

    def _run_passes(
        self,
        run: SweepRun,
        queue: tuple[list[JobKey], bool],
        cluster: Cluster,
        now: datetime,
        bounds: tuple[float | None, float | None],
        act: Act,
    ) -> SweepReport:
        """Run the candidates' passes, those an earlier sweep left first (in the order left),
        then the new ones in job order; what this one leaves (time bound, work share, delete
        cap, an API failure) the next one passes first. `queue`: the jobs left, and whether
        the sweep that left them passed none. `bounds`: the time bound (time.monotonic) and
        the end of the work share (self.clock). A pass starts only if one as long as the
        longest so far still ends within the work share, except the first job left by a sweep
        that passed none: a listing that spends the share never starves the jobs waiting."""
        carried, starved = queue
        deadline, work_until = bounds
        candidates = run.candidates
        # The jobs left keep their place in the queue: sorting them anew would put a job
        # nominated again (a dry run, a pass that found nothing yet) ahead of those still waiting.
        waiting = set(carried)
        order = carried + sorted(k for k in candidates if k not in waiting)
        left = self.settings.max_deletes_per_event
        done = 0
        longest = 0.0  # the longest pass so far: one is started only if one as long still fits
        try:
            for index, key in enumerate(order):
                if deadline is not None and time.monotonic() > deadline - 1.0:
                    return self._stopped(SweepEnd.TIME_BOUND, f"after {index} of {len(order)} jobs", run)
                if left <= 0:
                    return self._stopped(SweepEnd.DELETE_CAP, f"after {index} of {len(order)} jobs", run)
                owed = starved and index == 0 and key in waiting
                began = self.clock()
                if work_until is not None and not owed and began + longest > work_until:
                    return self._stopped(SweepEnd.WORK_SHARE, f"after {index} of {len(order)} jobs", run)
                try:
                    result = self.passes.run(candidates[key], cluster, now)
                    left -= act(result.decisions, min(result.bound, left)).sent
                    longest = max(longest, self.clock() - began)
                except ApiUnavailable:
                    if deadline is None or time.monotonic() < deadline - 0.1:
                        raise  # the API failed: 503, the source retries
                    # Out of time within a pass: what it did is reported; this job comes first next time.
                    return self._stopped(
                        SweepEnd.TIME_BOUND, f"in the pass of job {index + 1} of {len(order)}", run
                    )
                done = index + 1
        finally:
            with self._lock:
                self._pending = {key: candidates[key] for key in order[done:]}
                self._starved = done == 0 and bool(self._pending)
        listed = f"; listed {run.listed_pods} training pod(s)"
        if not run.round_done:
            return SweepReport(
                SweepEnd.LISTING, f"swept {len(order)} job(s) needing action{listed}, the next sweep lists on"
            )
        return SweepReport(SweepEnd.DONE, f"swept {len(order)} job(s) needing action{listed}")

    @staticmethod
    def _stopped(end: SweepEnd, where: str, run: SweepRun) -> SweepReport:
        at = {
            SweepEnd.TIME_BOUND: "at its time bound",
            SweepEnd.WORK_SHARE: "at its share of the time bound",
        }.get(end, "at PODSWEEPER_MAX_DELETES_PER_EVENT")
        return SweepReport(
            end,
            f"sweep stopped {at} {where}; the next sweep passes the jobs left first; "
            f"listed {run.listed_pods} training pod(s)",
        )
