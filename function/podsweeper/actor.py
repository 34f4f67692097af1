"""The one acting handle: every decision of every pass is carried out by Actor.act.

Like descheduler's Evictor, it alone applies dry-run (and a held run's "act on nothing"), the
delete budget the caller hands it, the preconditions (podsweeper.actions), the evidence
(podsweeper.keeper: read while the pods exist, written once each Result is known), the log
line and the metrics, the Events and the CloudEvents out; it returns what happened and adds it
to the event's Ledger. It calls only down: nothing it calls calls back.
"""

from __future__ import annotations

import threading
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial

from podsweeper import metrics
from podsweeper.actions import Acted, Applied, carry_out, dry_run
from podsweeper.cluster.base import Cluster
from podsweeper.config import Settings
from podsweeper.decisions import Action, Decision, Result, Target
from podsweeper.evidence import Failure
from podsweeper.keeper import EvidenceKeeper
from podsweeper.model import JobRef, Pod, Verb
from podsweeper.namespaces import NamespacePolicies
from podsweeper.notify import Notifier, notices
from podsweeper.report import log_decision

# Results after which a pod's GPUs are free (a suspended job's operator removes its pods).
RECLAIMED = frozenset({Result.DELETED, Result.SUSPENDED})


@dataclass
class Ledger:
    """What one event's handling did, in order: each decision with its Result (None: a skip)."""

    event_id: str
    applied: list[Applied] = field(default_factory=list)


class Actor:
    def __init__(
        self,
        settings: Settings,
        policies: NamespacePolicies,
        *,
        notifier: Notifier | None = None,
        hold: bool = False,
        concurrent_deletes: bool = True,
    ):
        self.settings = settings
        # What dry-run reads (podsweeper.actions.dry_run): the settings, or, held (`podsweeper
        # sweep` without --live), a dry run no namespace may lift.
        self.acting = (
            settings.model_copy(update={"dry_run": True, "namespace_live_allowed": False})
            if hold
            else settings
        )
        self.keeper = EvidenceKeeper(settings, policies)
        self.notifier = notifier
        # Deletes of one pass run concurrently (PODSWEEPER_DELETE_CONCURRENCY); the replay keeps
        # them in order on its single-threaded simulated cluster.
        self._concurrent = concurrent_deletes and settings.delete_concurrency > 1
        self._executor: Executor | None = None
        self._lock = threading.Lock()

    def keep_sighted(self, verb: Verb, pod: Pod, cluster: Cluster, now: datetime) -> None:
        """Keep the failed runs a pod event claims, if the pod and its job, read now, prove it."""
        self.keeper.keep_sighted(verb, pod, cluster, now)

    def act(
        self,
        decisions: list[Decision],
        budget: int,
        *,
        cluster: Cluster,
        now: datetime,
        ledger: Ledger,
        keep_first: tuple[JobRef, tuple[Failure, ...]] | None = None,
    ) -> Acted:
        """Carry out one pass's decisions within a delete budget; returns the DELETE requests
        sent (what a bound counts) and the deletes made. `keep_first`: runs kept before anything
        is done (the pods a JobSet/Job delete takes with it). An API failure goes on (503)
        after what was done is logged, counted, recorded and announced."""
        if keep_first is not None:
            job, failures = keep_first
            self.keeper.keep(cluster, job, failures, read_logs=True, now=now)
        decisions = [self._retained(d, cluster, now) for d in decisions]
        acting = self.keeper.before_acting(cluster, decisions, now)
        try:
            carried = carry_out(decisions, cluster, self.acting, now, budget, self._deleter())
        except BaseException:
            self.keeper.after_acting(cluster, acting, [], now, best_effort=True)
            raise
        for item in carried.applied:
            self._report(item, ledger.event_id, now)
        ledger.applied += carried.applied
        try:
            # What was deleted before a failure is kept if the API lets us; the failure goes on.
            self.keeper.after_acting(
                cluster, acting, carried.applied, now, best_effort=carried.failure is not None
            )
        finally:
            self._notify(carried.applied, ledger.event_id, now)
        if carried.failure is not None:
            raise carried.failure
        return carried.acted

    def _retained(self, decision: Decision, cluster: Cluster, now: datetime) -> Decision:
        """A decision to delete a training job itself, once its evidence is copied apart from
        it; a skip when that could not be done (nothing is lost: the next pass tries again)."""
        if not (decision.target is Target.JOB and decision.action.deletes) or dry_run(decision, self.acting):
            return decision
        if self.keeper.retain(cluster, decision.job, now):
            return decision
        return replace(
            decision,
            action=Action.SKIP,
            reason=f"its evidence could not be kept apart from it, so it is not deleted; would delete: {decision.reason}",
        )

    def _report(self, item: Applied, event_id: str, now: datetime) -> None:
        """The decision log line and the metrics of one decision carried out."""
        decision = item.decision
        metrics.DECISIONS.labels(decision.rule.value, decision.action.value).inc()
        if decision.action.deletes and item.result is not None:
            metrics.DELETES.labels(decision.rule.value, item.result.value).inc()
        reclaimed = decision.gpu_seconds(now) if item.result in RECLAIMED else 0.0
        if reclaimed:
            metrics.RECLAIMED_GPU_SECONDS.labels(decision.namespace, decision.rule.value).inc(reclaimed)
        log_decision(event_id, decision, item.result, dry_run(decision, self.acting), reclaimed)

    def _notify(self, applied: list[Applied], event_id: str, now: datetime) -> None:
        """Tell the owners what was done (or would be): queued, never waited for."""
        if self.notifier is None or not applied:
            return
        dry = partial(dry_run, settings=self.acting)
        self.notifier.submit(notices(applied, dry, event_id, now, self.notifier.source))

    def _deleter(self) -> Executor | None:
        if not self._concurrent:
            return None
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    self.settings.delete_concurrency, thread_name_prefix="podsweeper-delete"
                )
            return self._executor
