"""One event, one clear pass: triage -> fresh read -> decide -> act -> report.

Shared by the live function, the CLI sweep and the replay; only the Cluster differs.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from podsweeper import engine, kinds, metrics
from podsweeper.actions import Applied, carry_out
from podsweeper.cluster.base import Cluster, JobUnknown
from podsweeper.config import Settings
from podsweeper.decisions import Action, Decision, Result
from podsweeper.errors import ApiUnavailable
from podsweeper.evidence import Source, failures_of
from podsweeper.intake import Intake
from podsweeper.keeper import EvidenceKeeper
from podsweeper.lineage import Lineage, decide_lineage
from podsweeper.model import FinishMark, Job, JobRef, Node, Pod, Verb, Workload
from podsweeper.ownership import has_current_labels, workload_job
from podsweeper.report import log_decision
from podsweeper.triage import JobPass, PassReason, in_scope, triage_object
from podsweeper.triggers import Ignored, ObjectChange, ReferenceChange, SweepRequest, Trigger

JobKey = tuple[str, str, str]
# Results after which a pod's GPUs are free (a suspended job's operator removes its pods).
RECLAIMED = frozenset({Result.DELETED, Result.SUSPENDED})
# Pod decisions whose pods hold GPUs for nothing (the leftover gauge).
WASTING = frozenset({Action.DELETE, Action.FORCE_DELETE, Action.WARN, Action.SUSPEND})


@dataclass
class Outcome:
    """What handling one event did; `note` says why nothing (or not everything) was done."""

    event_id: str
    applied: list[Applied] = field(default_factory=list)
    note: str | None = None

    @property
    def ignored(self) -> bool:
        return self.note is not None and not self.applied

    @property
    def deferred(self) -> int:
        """Deletes left for later by the bound: the source should come back soon."""
        return sum(1 for item in self.applied if item.result is Result.DEFERRED)

    @property
    def summary(self) -> dict[str, Any]:
        counts: dict[str, int] = defaultdict(int)
        for item in self.applied:
            counts[item.result.value if item.result else item.decision.action.value] += 1
        return {
            "event_id": self.event_id,
            "decisions": len(self.applied),
            **counts,
            **({"note": self.note} if self.note else {}),
        }


@dataclass(frozen=True)
class PassResult:
    decisions: list[Decision]
    note: str | None
    bound: int  # how many of the decisions' deletes this pass may make


# A TrainJob's first JobSet is made within a second of it (measured ~0.1 s); one made later
# was made again (after a delete or a TTL): its pass checks whether the job had finished.
FIRST_JOBSET_WITHIN_SECONDS = 2.0


def _made_again(job: Job, top: Workload) -> bool:
    if job.suspended or top.suspended or job.created is None or top.created is None:
        return False
    return (top.created - job.created).total_seconds() >= FIRST_JOBSET_WITHIN_SECONDS


def _finish_seen(job: Job, top: Workload | None, erased: bool, now: datetime) -> FinishMark | None:
    """The finish of a chained job to remember: the one the fresh read shows, with the JobSet it
    finished with (its own, unless that one was made after the finish); or, `erased`, the one
    the event showed and Trainer has removed since.

    Trainer v2.3.0 derives Failed from the JobSet and drops it once the JobSet is gone, making a
    new one: under JobSet ttlSecondsAfterFinished 0 a TrainJob is Failed for ~50 ms, and the pass
    of that event can read it after (measured). Failed is the only finish it erases."""
    if job.finished is not None:
        if top is None:
            return None
        owned = top.controller is not None and top.controller.uid == job.uid
        made_after = job.finished_at is not None and top.created is not None and top.created > job.finished_at
        return FinishMark(job.finished, job.finished_at, top.uid if owned and not made_after else "")
    if not erased:
        return None
    failed = job.kind.finished_conditions[-1]
    if top is None:  # between the old JobSet's delete and the new one: what comes next is new
        return FinishMark(failed, now.replace(microsecond=0), "")
    if top.terminating or top.finished:  # the JobSet it failed with, on its way out
        return FinishMark(failed, None, top.uid)
    return FinishMark(failed, top.created, "")  # the JobSet made again already


@dataclass
class Pipeline:
    cluster: Cluster
    settings: Settings
    # Deletes of one pass run concurrently (PODSWEEPER_DELETE_CONCURRENCY); the replay keeps
    # them in order on its single-threaded simulated cluster.
    concurrent_deletes: bool = True
    # Where the last sweep stopped: the next one starts after it, so no namespace starves.
    _resume_after: JobKey | None = field(default=None, init=False, repr=False)
    _executor: Executor | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _keeper: EvidenceKeeper | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self._keeper = EvidenceKeeper(self.settings)

    def handle(self, intake: Intake, now: datetime, deadline: float | None = None) -> Outcome:
        """Handle one parsed event. Raises ApiUnavailable when the API fails (-> 503)."""
        cluster = self.cluster.bounded(deadline) if deadline is not None else self.cluster
        outcome = Outcome(intake.attributes.id)
        work = self._work_for(intake.trigger, cluster)
        if isinstance(work, Ignored):
            outcome.note = work.reason
            return outcome
        act = self._actor(outcome, cluster, now)
        if isinstance(work, SweepRequest):
            outcome.note = self._sweep(cluster, now, deadline, act, outcome)
        else:
            result = self._run_pass(work, cluster, now)
            outcome.note = result.note
            act(result.decisions, result.bound)
        return outcome

    def _actor(
        self, outcome: Outcome, cluster: Cluster, now: datetime
    ) -> Callable[[list[Decision], int], int]:
        """Carries out one pass's decisions within a delete budget; returns the deletes made."""

        def report(item: Applied) -> None:
            decision = item.decision
            metrics.DECISIONS.labels(decision.rule.value, decision.action.value).inc()
            if decision.action.deletes and item.result is not None:
                metrics.DELETES.labels(decision.rule.value, item.result.value).inc()
            reclaimed = decision.gpu_seconds(now) if item.result in RECLAIMED else 0.0
            if reclaimed:
                metrics.RECLAIMED_GPU_SECONDS.labels(decision.namespace, decision.rule.value).inc(reclaimed)
            log_decision(outcome.event_id, decision, item.result, self.settings.dry_run, reclaimed)
            outcome.applied.append(item)

        def act(decisions: list[Decision], budget: int) -> int:
            before = len(outcome.applied)
            assert self._keeper is not None
            # Evidence: read while the pods exist, written once each pod's Result is known.
            acting = self._keeper.before_acting(cluster, decisions)
            try:
                carry_out(decisions, cluster, self.settings, now, report, budget, self._deleter())
            except Exception:
                # What was deleted before the failure is kept if the API lets us; the failure goes on.
                self._keeper.after_acting(cluster, acting, outcome.applied[before:], best_effort=True)
                raise
            self._keeper.after_acting(cluster, acting, outcome.applied[before:])
            return sum(1 for item in outcome.applied[before:] if item.result is Result.DELETED)

        return act

    def _deleter(self) -> Executor | None:
        if not self.concurrent_deletes or self.settings.delete_concurrency == 1:
            return None
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    self.settings.delete_concurrency, thread_name_prefix="podsweeper-delete"
                )
            return self._executor

    # -- what to do ----------------------------------------------------------------
    def _work_for(self, trigger: Trigger, cluster: Cluster) -> JobPass | SweepRequest | Ignored:
        if isinstance(trigger, (Ignored, SweepRequest)):
            return trigger
        namespace = trigger.namespace if isinstance(trigger, ReferenceChange) else trigger.obj.namespace
        outside = in_scope(namespace, self.settings)
        if outside is not None:
            return outside
        if isinstance(trigger, ReferenceChange):
            return self._resolve_reference(trigger, cluster)
        if isinstance(trigger.obj, Pod):
            self._keep_evidence(trigger.verb, trigger.obj, cluster)
        return triage_object(trigger, self.settings)

    def _keep_evidence(self, verb: Verb, pod: Pod, cluster: Cluster) -> None:
        """A pod event that shows a failed run: keep it (its log too, while the pod exists)."""
        if pod.job is None or pod.foreign_controller or not any(c.failed for c in pod.containers):
            return
        gone = verb is Verb.DELETE
        failures = failures_of(
            pod, pod.gpus(self.settings.gpu_resource_names), Source.DELETED if gone else Source.TERMINATED
        )
        assert self._keeper is not None
        self._keeper.keep(cluster, pod.job, failures, read_logs=not gone)

    def _resolve_reference(self, ref: ReferenceChange, cluster: Cluster) -> JobPass | Ignored:
        """Reference mode carries no object: read it, then triage it like Resource mode."""
        if ref.link is not None:
            workload = cluster.get_workload(ref.link, ref.namespace, ref.name)
            if workload is None:
                if ref.verb is Verb.DELETE and ref.link.kind == kinds.JOBSET.kind:
                    job_ref = JobRef(kinds.TRAINJOB, ref.namespace, ref.name)
                    return JobPass(job_ref, PassReason.CHAIN)  # its Jobs may be left
                return Ignored(f"{ref.link.kind} no longer exists")
            return triage_object(ObjectChange(ref.verb, workload), self.settings)
        if ref.kind is not None:  # a job: the pass reads it fresh anyway
            job_ref = JobRef(ref.kind, ref.namespace, ref.name, None, ref.api_version)
            if ref.verb is Verb.DELETE:
                return JobPass(job_ref, PassReason.DELETED)
            # (a TrainJob's warning is decided on its JobSet's add, never on the job's)
            check = ref.verb is Verb.ADD and ref.kind.chain is None
            return JobPass(job_ref, PassReason.REFERENCE, check_backoff=check)
        if ref.verb is Verb.DELETE:
            return Ignored("pod deleted")
        pod = cluster.get_pod(ref.namespace, ref.name)
        if pod is None:
            return Ignored("pod no longer exists")
        return triage_object(ObjectChange(ref.verb, pod), self.settings)

    # -- deciding on fresh state -----------------------------------------------------
    def _run_pass(self, work: JobPass, cluster: Cluster, now: datetime) -> PassResult:
        """Re-read the job (and, when a rule may apply, its pods) and decide on that."""
        if work.ref.kind.chain is not None:
            return self._run_chain_pass(work, cluster, now)
        try:
            job = cluster.get_job(work.ref)
        except JobUnknown as unknown:
            return PassResult([], f"job unknown, not gone: {unknown}", 0)
        decisions: list[Decision] = []
        if job is not None and work.check_backoff:
            decisions += engine.decide_new_job(job, self.settings)
        replaced = job is not None and work.ref.uid is not None and job.uid != work.ref.uid
        owner = None if replaced else job  # a same-named new job does not own the old pods
        note = None
        if owner is not None and (unsettled := engine.failed_mpijob_running(owner, now, self.settings)):
            decisions.append(unsettled)
        if job is None or job.finished or replaced or work.reason.lists_pods:
            pods = cluster.list_job_pods(work.ref, all_label_sets=work.all_label_sets)
            # A launcher pod (MPIJob v2beta1) is the job's only if its batch Job, read now, is.
            launcher, ns = work.ref.kind.launcher, work.ref.namespace
            vias = engine.launcher_links(pods) if launcher is not None else []
            links = [cluster.get_workload(launcher.link, ns, via.name) for via in vias if launcher]
            launchers = engine.proven_launchers(owner, [link for link in links if link is not None])
            decisions += engine.decide_pods(work.ref, job, pods, now, self.settings, launchers)
            note = engine.left_to_operator(owner, pods, now, self.settings)
        bound = engine.delete_bound(owner, self.settings)
        if not decisions:
            note = note or "the fresh state names no pod for any rule"
        return PassResult(decisions, note, bound)

    def _run_chain_pass(self, work: JobPass, cluster: Cluster, now: datetime) -> PassResult:
        """A chained job (TrainJob): read the job, its JobSet, the Jobs and pods labelled with
        its name, decide on the whole chain (podsweeper.lineage)."""
        ref, chain = work.ref, work.ref.kind.chain
        assert chain is not None
        try:
            job = cluster.get_job(ref)
        except JobUnknown as unknown:
            return PassResult([], f"job unknown, not gone: {unknown}", 0)
        top = cluster.get_workload(chain.links[0], ref.namespace, ref.name)
        selector = f"{chain.name_label}={ref.name}"
        middles = tuple(cluster.list_workloads(chain.links[-1], ref.namespace, selector))
        pods = tuple(cluster.list_job_pods(ref))
        mark = None
        # The event showed the job finished; read now, the same job no longer is: Trainer erased it.
        erased = (
            work.reason is PassReason.FINISHED
            and job is not None
            and job.finished is None
            and job.uid == work.ref.uid
        )
        if job is not None and not job.suspended and (top is not None or erased):
            mark = cluster.read_finish_mark(job.ref)
            seen = _finish_seen(job, top, erased and mark is None, now)
            if seen is not None and (mark is None or (mark.condition, mark.at) != (seen.condition, seen.at)):
                mark = seen  # remembered: Trainer may erase the finish (a Failed TrainJob restarted)
                cluster.write_finish_mark(job.ref, mark)
        lineage = Lineage(ref, job, top, middles, pods, mark)
        decisions = decide_lineage(lineage, now, self.settings, check_new=work.check_backoff)
        self._keep_chain_evidence(decisions, lineage, cluster)
        note = None if decisions else "the fresh state of the chain names nothing for any rule"
        return PassResult(decisions, note, self.settings.max_deletes_per_event)

    def _keep_chain_evidence(self, decisions: list[Decision], lineage: Lineage, cluster: Cluster) -> None:
        """Failed runs of the pods a JobSet/Job delete is about to take with it, logs included.

        Kept as seen terminated, before the act: the pods go by the garbage collector's hand
        (or not at all, in dry-run), so no record of them says podsweeper deleted them."""
        doomed = {d.uid for d in decisions if d.action is Action.DELETE and d.kind != "Pod"}
        if not doomed or lineage.job is None:
            return
        uid_label = lineage.chain.uid_label
        gpus = self.settings.gpu_resource_names
        failures = [
            failure
            for pod in lineage.pods
            if pod.labels.get(uid_label) in doomed or (pod.via is not None and pod.via.uid in doomed)
            for failure in failures_of(pod, pod.gpus(gpus), Source.TERMINATED)
        ]
        if failures:
            assert self._keeper is not None
            self._keeper.keep(cluster, lineage.job.ref, failures, read_logs=True)

    def _sweep(
        self,
        cluster: Cluster,
        now: datetime,
        deadline: float | None,
        act: Callable[[list[Decision], int], int],
        outcome: Outcome,
    ) -> str:
        """Backstop: find jobs whose listed state needs action, then run a normal pass on each.

        Each scope's pods are streamed page by page, each page decided and dropped, against an
        index of the jobs of each kind met (listed when its first pod shows up): memory holds
        the jobs and the candidates, never all pods. A job created after its index was read makes its pods look orphaned here, but
        every candidate is re-read by its pass before anything is decided. The sweep stops at
        its time bound or its delete cap (PODSWEEPER_MAX_DELETES_PER_EVENT) and the next one
        continues after the last job it passed.
        """
        candidates: dict[JobKey, JobPass] = {}
        stuck: dict[tuple[str, str], Pod] = {}  # rule stuck-terminating's candidates, by pod
        stuck_rule = self.settings.stuck_terminating_seconds is not None
        leftover: dict[tuple[str, str], int] = defaultdict(int)  # (namespace, rule) -> GPUs
        scopes: list[str | None] = [*sorted(self.settings.namespace_set)] or [None]
        for namespace in scopes:
            # Each kind's jobs are listed once, when its first pod shows up: no LIST for a kind
            # the scope runs none of.
            indexes: dict[str, dict[JobKey, Job]] = {}
            for pod in cluster.list_training_pods(namespace, chained=stuck_rule):
                if pod.job is None or in_scope(pod.namespace, self.settings) is not None:
                    continue
                if pod.terminating:
                    if stuck_rule and self._looks_stuck(pod, now):
                        stuck[(pod.namespace, pod.name)] = pod
                    continue
                if pod.job.kind.chain is not None:
                    continue  # a chain's pods are decided at its JobSet (below)
                kind = pod.job.kind
                if kind.kind not in indexes:
                    indexes[kind.kind] = {job.ref.key: job for job in cluster.list_jobs(namespace, kind)}
                jobs = indexes[kind.kind]
                key = pod.job.key
                # The version the pod's owner or the listed job names (an MPIJob may be v2beta1).
                version = pod.job.api_version or (jobs[key].api_version if key in jobs else None)
                ref = JobRef(pod.job.kind, pod.namespace, pod.job.name, None, version)
                # A launcher pod of a listed job is proven by the pass (launchers=None), not here;
                # one whose job is not listed is nobody's to nominate (its Job may be anyone's).
                launchers: frozenset[str] | None = None if key in jobs else frozenset()
                listed = engine.decide_pods(ref, jobs.get(key), [pod], now, self.settings, launchers)
                for decision in listed:
                    if decision.action in WASTING:
                        leftover[(decision.namespace, decision.rule.value)] += decision.gpus
                unsettled = key in jobs and jobs[key].failed_unsettled_at is not None  # its pass decides
                if not unsettled and not any(d.action is not Action.SKIP for d in listed):
                    continue
                # Pods labelled only the pre-v1.6 way: the pass must list both label sets.
                legacy = not has_current_labels(pod.labels)
                known = candidates.get(key)
                if known is None or (legacy and not known.all_label_sets):
                    candidates[key] = JobPass(ref, PassReason.SWEEP, all_label_sets=legacy)
            for chained in kinds.TRAINING_KINDS:
                if chained.chain is not None:
                    self._sweep_chain(chained, namespace, cluster, candidates)

        def act_counting_chains(decisions: list[Decision], bound: int) -> int:
            # A chain's pods are not decided one by one above: its passes' decisions (a
            # restarted TrainJob, an orphaned JobSet/Job) carry the GPUs their active pods hold.
            for decision in decisions:
                if decision.job.kind.chain is not None and decision.action in WASTING:
                    leftover[(decision.namespace, decision.rule.value)] += decision.gpus
            return act(decisions, bound)

        try:
            note = self._sweep_passes(candidates, cluster, now, deadline, act_counting_chains)
            if stuck:
                note += "; " + self._sweep_stuck(stuck, cluster, now, deadline, act)
            return note
        finally:
            for item in outcome.applied:
                if item.result in RECLAIMED and item.decision.action in WASTING:
                    slot = (item.decision.namespace, item.decision.rule.value)
                    leftover[slot] = max(0, leftover[slot] - item.decision.gpus)
            metrics.publish_leftover({slot: gpus for slot, gpus in leftover.items() if gpus})

    def _looks_stuck(self, pod: Pod, now: datetime) -> bool:
        limit = self.settings.stuck_terminating_seconds
        due = pod.deletion_due
        return limit is not None and due is not None and (now - due).total_seconds() >= limit

    def _sweep_stuck(
        self,
        stuck: dict[tuple[str, str], Pod],
        cluster: Cluster,
        now: datetime,
        deadline: float | None,
        act: Callable[[list[Decision], int], int],
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
            if pod is None or pod.job is None or pod.node is None or not self._looks_stuck(pod, now):
                continue
            if pod.job.kind.chain is not None and not self._chain_proven(pod, cluster):
                continue
            try:
                job = cluster.get_job(pod.job)
            except JobUnknown:
                job = None
            if pod.node not in nodes:
                nodes[pod.node] = cluster.get_node(pod.node)
            decision = engine.stuck_terminating(pod, nodes[pod.node], job, now, self.settings)
            if decision is not None:
                decided.append(decision)
        forced = act(decided, self.settings.max_deletes_per_event) if decided else 0
        return f"{forced} of {len(stuck)} pod(s) stuck terminating force-deleted{stopped}"

    @staticmethod
    def _chain_proven(pod: Pod, cluster: Cluster) -> bool:
        """A chain's pod counts as a training pod only when its JobSet, read now, is the one
        its labels name and a TrainJob controls it (a plain JobSet's pods look alike)."""
        assert pod.job is not None and pod.job.kind.chain is not None
        chain = pod.job.kind.chain
        top = cluster.get_workload(chain.links[0], pod.namespace, pod.job.name)
        return (
            top is not None
            and top.uid == pod.labels.get(chain.uid_label)
            and top.controller is not None
            and top.controller.kind == pod.job.kind.kind
        )

    def _sweep_chain(
        self,
        kind: kinds.TrainingKind,
        namespace: str | None,
        cluster: Cluster,
        candidates: dict[JobKey, JobPass],
    ) -> None:
        """A chained kind's candidates, from its JobSets and Jobs as listed: a JobSet whose
        TrainJob is gone or finished, a Job whose JobSet is gone, an ownerless one. The pass
        re-reads each before anything is decided."""
        chain = kind.chain
        assert chain is not None
        jobs = {(job.namespace, job.name): job for job in cluster.list_jobs(namespace, kind)}
        tops: dict[tuple[str, str], Workload] = {}
        for top in cluster.list_workloads(chain.links[0], namespace, ""):
            if not top.terminating:  # a terminating JobSet controls nothing the pass would spare
                tops[(top.namespace, top.name)] = top
            job = jobs.get((top.namespace, top.name))
            owned = job is not None and top.controller is not None and top.controller.uid == job.uid
            if owned and job is not None and not _made_again(job, top):
                continue  # its first JobSet: nothing a rule names
            self._chain_candidate(top, candidates)
        for middle in cluster.list_workloads(chain.links[-1], namespace, chain.name_label):
            parent = tops.get((middle.namespace, middle.labels.get(chain.name_label, "")))
            if parent is not None and middle.controller is not None and middle.controller.uid == parent.uid:
                continue
            self._chain_candidate(middle, candidates)

    def _chain_candidate(self, workload: Workload, candidates: dict[JobKey, JobPass]) -> None:
        ref = workload_job(workload)
        if ref is None or in_scope(ref.namespace, self.settings) is not None:
            return
        candidates.setdefault(ref.key, JobPass(ref, PassReason.SWEEP))

    def _sweep_passes(
        self,
        candidates: dict[JobKey, JobPass],
        cluster: Cluster,
        now: datetime,
        deadline: float | None,
        act: Callable[[list[Decision], int], int],
    ) -> str:
        """Run the candidates' passes in job order, starting after where the last sweep stopped."""
        order = sorted(candidates)
        if self._resume_after is not None:
            order = [k for k in order if k > self._resume_after] + [
                k for k in order if k <= self._resume_after
            ]
        left = self.settings.max_deletes_per_event
        for index, key in enumerate(order):
            if deadline is not None and time.monotonic() > deadline - 1.0:
                return self._stopped(f"at its time bound after {index} of {len(order)} jobs")
            if left <= 0:
                return self._stopped(
                    f"at PODSWEEPER_MAX_DELETES_PER_EVENT after {index} of {len(order)} jobs"
                )
            try:
                result = self._run_pass(candidates[key], cluster, now)
                left -= act(result.decisions, min(result.bound, left))
            except ApiUnavailable:
                if deadline is None or time.monotonic() < deadline - 0.1:
                    raise  # the API failed: 503, the source retries
                # Out of time within a pass: what it did is reported; this job comes first next time.
                return self._stopped(f"at its time bound in the pass of job {index + 1} of {len(order)}")
            self._resume_after = key
        self._resume_after = None
        return f"swept {len(order)} job(s) needing action"

    def _stopped(self, where: str) -> str:
        after = "/".join(self._resume_after) if self._resume_after else "the start"
        return f"sweep stopped {where}; the next sweep continues after {after}"
