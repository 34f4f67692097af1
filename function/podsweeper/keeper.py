"""Keeping failures' evidence: the I/O around podsweeper.evidence (read the job's store, take
in what is new, write it back), with a memory of what this instance already kept so a pod
event that shows no new termination costs no API request.

The runs of the pods a pass acts on are read before the act (the logs go with the pod) and
kept after it, with the source the act's Result says (evidence.source_of): a store never
claims a delete that did not happen.

Text the containers wrote (log lines, the termination message) is kept only where the
namespace's policy allows it (PODSWEEPER_EVIDENCE_LOG_LINES, _LOGS_EXCLUDE_NAMESPACES, the
Namespace's podsweeper.dev/evidence-logs). A store podsweeper may not or cannot write (not
its ConfigMap; refused by the API for good) is logged, counted and remembered, never a 503."""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from podsweeper import metrics
from podsweeper.actions import Applied
from podsweeper.cluster.base import Cluster
from podsweeper.config import Settings
from podsweeper.decisions import Decision
from podsweeper.errors import ApiUnavailable
from podsweeper.evidence import (
    MAX_LOG_BYTES,
    Failure,
    NotKept,
    Source,
    failures_of,
    failures_of_decided,
    merge,
    source_of,
    upgrades,
)
from podsweeper.model import JobRef, Pod, Verb
from podsweeper.namespaces import Closed, NamespacePolicies
from podsweeper.policy import NamespacePolicy, global_policy
from podsweeper.proof import proven_job
from podsweeper.report import log_disagreement

# Terminations this instance has kept (or found kept): bounded, oldest forgotten first.
REMEMBERED = 100_000
# Logs read per job pass at most: a 1,024-worker job's cleanup must not wait for 1,024 reads.
LOG_READS_PER_PASS = 16

RunKey = tuple[str, str, str]  # evidence.Failure.key


@dataclass
class Acting:
    """One pass's delete decisions' evidence, read before the act: per job, per pod (uid), its
    failed runs with their log lines. Kept by EvidenceKeeper.after_acting."""

    by_job: dict[tuple[str, str, str], tuple[JobRef, dict[str, list[Failure]]]] = field(default_factory=dict)

    @property
    def runs(self) -> list[Failure]:
        return [f for _, pods in self.by_job.values() for runs in pods.values() for f in runs]


class EvidenceKeeper:
    def __init__(self, settings: Settings, policies: NamespacePolicies | None = None):
        self.settings = settings
        # Each namespace's policy: evidence is kept where podsweeper is in scope and not `off`,
        # log text where it allows it. Asked only for a failure not kept yet, when the keeping
        # goes to the API anyway, and before reading logs. None: the global settings everywhere.
        self._policies = policies
        # Each run kept (or found kept), with its source: an upgrade is not "already kept".
        self._kept: OrderedDict[RunKey, Source] = OrderedDict()
        # Runs of pods a pass is acting on: a sighting of them meanwhile (the pod's delete
        # event) waits for the record the act makes instead of writing one of its own.
        self._held: Counter[RunKey] = Counter()
        self._lock = threading.Lock()

    def keep(
        self, cluster: Cluster, job: JobRef, failures: Iterable[Failure], *, read_logs: bool, now: datetime
    ) -> int:
        """Keep what is new of these failures in the job's store; returns how many were new.

        New: a run not kept yet, or one kept from a weaker source than this one (an upgrade,
        evidence.upgrades). Logs are read only for runs not kept before (an earlier record has
        its logs, and the store keeps them); where log text is not allowed, no termination
        message is kept either. An API failure goes on (the event is answered 503 and retried,
        nothing is lost); a store that is not podsweeper's, or that the API refuses for good,
        is logged and counted, and its runs remembered as if kept (not tried on every event)."""
        if not self.settings.evidence:
            return 0
        with self._lock:
            new = [f for f in failures if self._is_new(f)]
            unread = {f.key for f in new if f.key not in self._kept}
        if not new:
            return 0
        policy = self._policy(cluster, job.namespace, now)
        if policy is None:
            self._remember(new)  # podsweeper is off there: keep nothing, do not ask again
            return 0
        if not job.uid:
            # A pod tied to its job by labels only (a chain's, or an ownerless v1 pod): the
            # store is owned by the job, so read its uid (one GET, only for a new failure).
            owner = cluster.get_job(job)
            if owner is None:
                self._remember(new)  # no job to keep it with: do not ask again
                return 0
            job = owner.ref
        if not self._text_allowed(policy):
            new = [f.without_text() for f in new]
        elif read_logs:
            new = self._read_logs(cluster, job.namespace, new, unread, now, policy)
        try:
            for _attempt in (1, 2):  # a store written by another instance meanwhile: read it again
                found = cluster.read_evidence(job)
                records, version = found if found is not None else ([], None)
                merged = merge(records, new)
                if merged is None or cluster.write_evidence(job, merged, version):
                    break
        except NotKept as dropped:
            metrics.record_dropped("evidence", dropped.reason.value, job.namespace, job.name, dropped.detail)
        self._remember(new)
        return len(new)

    def retain(self, cluster: Cluster, job: JobRef, now: datetime) -> bool:
        """Copy the job's store apart from it before the job is deleted (its store, which it
        owns, goes with it); False when that cannot be done: the job must not be deleted then.
        Nothing to copy (no store, or not podsweeper's) is done at once. An API failure goes on
        (503: the source retries, nothing deleted)."""
        if not self.settings.evidence:
            return True
        try:
            found = cluster.read_evidence(job)
        except NotKept:
            return True  # a ConfigMap at its name that podsweeper did not make: nothing of ours
        if found is None or not found[0]:
            return True
        try:
            return cluster.retain_evidence(job, found[0], now)
        except NotKept as dropped:
            metrics.record_dropped("evidence", dropped.reason.value, job.namespace, job.name, dropped.detail)
            return False

    def before_acting(self, cluster: Cluster, decisions: Iterable[Decision], now: datetime) -> Acting:
        """What must be read while the pods exist, before a pass acts on its delete decisions:
        each pod's failed runs (its decision's evidence) and their last log lines (runs not
        kept before, LOG_READS_PER_PASS per job). Nothing is written: what became of the pod is
        not known yet. The runs are held until after_acting."""
        acting = Acting()
        if not self.settings.evidence:
            return acting
        for decision in decisions:
            if decision.action.deletes and decision.is_pod and (runs := failures_of_decided(decision)):
                _, pods = acting.by_job.setdefault(decision.job.key, (decision.job, {}))
                pods.setdefault(decision.uid, []).extend(runs)
        for job, pods in acting.by_job.values():
            runs = [f for pod in pods.values() for f in pod]
            with self._lock:
                unread = {f.key for f in runs if f.key not in self._kept}
            read = {f.key: f for f in self._read_logs(cluster, job.namespace, runs, unread, now)}
            for uid, pod in pods.items():
                pods[uid] = [read[f.key] for f in pod]
        with self._lock:
            self._held.update(f.key for f in acting.runs)
        return acting

    def after_acting(
        self,
        cluster: Cluster,
        acting: Acting,
        applied: Iterable[Applied],
        now: datetime,
        best_effort: bool = False,
    ) -> None:
        """Keep each held run with the source its pod's Result says (no Result: the API failed
        before it was known; the run was seen terminated, nothing more), one write per job.

        Every job's store is tried; the first API failure then goes on, unless `best_effort`
        (the act itself failed: that failure goes on instead)."""
        results = {item.decision.uid: item.result for item in applied if item.decision.is_pod}
        with self._lock:  # released first: a run kept only as seen terminated is not held back
            self._held.subtract(f.key for f in acting.runs)
            self._held = +self._held  # drop the runs no pass holds any more
        failure: ApiUnavailable | None = None
        for job, pods in acting.by_job.values():
            runs = [f.kept_as(source_of(results.get(uid))) for uid, pod in pods.items() for f in pod]
            try:
                self.keep(cluster, job, runs, read_logs=False, now=now)
            except ApiUnavailable as error:
                failure = failure or error
        if failure is not None and not best_effort:
            raise failure

    def keep_sighted(self, verb: Verb, pod: Pod, cluster: Cluster, now: datetime) -> None:
        """A pod event that shows a failed run not kept yet: keep the runs the pod shows when
        read now (its log too, while it exists), if it is that pod and its job's.

        The payload only says where to look: any caller can name any pod. The pod is read fresh
        (the event's uid, still there), its job proven by its controller chain read now, and what
        is kept is the fresh status's failed runs. A delete event's pod is gone and can be read
        no more: nothing is kept from it (the runs it showed were kept from its earlier events)."""
        if verb is Verb.DELETE or pod.job is None or pod.foreign_controller:
            return
        gpus = self.settings.gpu_resource_names
        if not self.any_new(failures_of(pod, pod.gpus(gpus), Source.TERMINATED)):
            return
        fresh = cluster.get_pod(pod.namespace, pod.name)
        if fresh is None or fresh.uid != pod.uid:
            fact = "gone" if fresh is None else f"another pod (uid {fresh.uid})"
            log_disagreement(f"pod {pod.namespace}/{pod.name} uid {pod.uid} failed", f"{fact}: nothing kept")
            return
        job = proven_job(fresh, cluster)
        if job is None or fresh.job is None or pod.job.key != fresh.job.key:
            log_disagreement(
                f"pod {pod.namespace}/{pod.name} is {pod.job.kind.kind} {pod.job.name}'s",
                "its controller chain, read now, does not prove it: nothing kept",
            )
            return
        failures = failures_of(fresh, fresh.gpus(gpus), Source.TERMINATED)
        if failures:
            self.keep(cluster, job, failures, read_logs=True, now=now)

    def any_new(self, failures: Iterable[Failure]) -> bool:
        """Whether keeping these would write anything (no API request): an event showing only
        runs already kept costs no fresh read."""
        if not self.settings.evidence:
            return False
        with self._lock:
            return any(self._is_new(f) for f in failures)

    def _is_new(self, failure: Failure) -> bool:
        kept = self._kept.get(failure.key)
        if kept is None:
            return not (failure.source.observed and self._held[failure.key] > 0)
        return upgrades(failure.source, kept)

    def _remember(self, kept: Iterable[Failure]) -> None:
        with self._lock:
            for failure in kept:
                known = self._kept.get(failure.key)
                if known is None or upgrades(failure.source, known):
                    self._kept[failure.key] = failure.source
                self._kept.move_to_end(failure.key)
            while len(self._kept) > REMEMBERED:
                self._kept.popitem(last=False)

    def _policy(self, cluster: Cluster, namespace: str, now: datetime) -> NamespacePolicy | None:
        """The namespace's policy; None where podsweeper is out of scope or `off`."""
        if self._policies is None:
            return global_policy(self.settings, namespace)
        admitted = self._policies.admit(cluster, namespace, now)
        return None if isinstance(admitted, Closed) else admitted.policy

    def _text_allowed(self, policy: NamespacePolicy) -> bool:
        """Whether the containers' own text may be kept there: the namespace's policy, which
        only ever narrows the global settings (checked again here all the same)."""
        return (
            policy.evidence_logs
            and self.settings.evidence_log_lines > 0
            and policy.namespace not in self.settings.evidence_logs_excluded
        )

    def _read_logs(
        self,
        cluster: Cluster,
        namespace: str,
        failures: list[Failure],
        unread: set[RunKey],
        now: datetime,
        policy: NamespacePolicy | None = None,
    ) -> list[Failure]:
        """The failures, the first LOG_READS_PER_PASS of those in `unread` with their log tail."""
        if not unread or not self.settings.evidence_log_lines:
            return failures
        policy = policy or self._policy(cluster, namespace, now)
        if policy is None or not self._text_allowed(policy):
            return failures
        reads, read = LOG_READS_PER_PASS, []
        for failure in failures:
            if reads and failure.key in unread:
                reads -= 1
                failure = self._with_logs(cluster, namespace, failure)
            read.append(failure)
        return read

    def _with_logs(self, cluster: Cluster, namespace: str, failure: Failure) -> Failure:
        logs = cluster.container_log(
            namespace,
            failure.pod,
            failure.container,
            failure.restarted,
            self.settings.evidence_log_lines,
            MAX_LOG_BYTES,
        )
        return failure.with_logs(logs)
