"""One event, one clear pass: route -> fresh read -> decide -> act -> report.

Shared by the live function, the CLI sweep and the replay; only the Cluster differs. The
parts: routing (event -> work), passes (one per job shape, on the rule registry), the sweep
(its cursor and its GPU counts); here, the one way decisions are carried out.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

from podsweeper import metrics
from podsweeper.actions import Acted, Applied, carry_out, dry_run
from podsweeper.cluster.base import Cluster
from podsweeper.config import Settings
from podsweeper.decisions import Decision, Result
from podsweeper.intake import Intake
from podsweeper.keeper import EvidenceKeeper
from podsweeper.namespaces import NamespacePolicies
from podsweeper.notify import Notifier, notices
from podsweeper.passes import JobPassRunner
from podsweeper.policy import NamespacePolicy
from podsweeper.report import log_decision
from podsweeper.routing import Router
from podsweeper.sweep import RECLAIMED, SweepEnd, Sweeper, SweepRun
from podsweeper.triggers import Ignored, SweepRequest


@dataclass
class Outcome:
    """What handling one event did; `note` says why nothing (or not everything) was done,
    `sweep` how a sweep ended (None: no sweep)."""

    event_id: str
    applied: list[Applied] = field(default_factory=list)
    note: str | None = None
    sweep: SweepEnd | None = None
    # Set aside by triage from the event alone (no rule could act on it): nothing was read.
    set_aside: bool = False

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
            **({"sweep": self.sweep.value} if self.sweep else {}),
        }


@dataclass
class Pipeline:
    cluster: Cluster
    settings: Settings
    # Deletes of one pass run concurrently (PODSWEEPER_DELETE_CONCURRENCY); the replay keeps
    # them in order on its single-threaded simulated cluster.
    concurrent_deletes: bool = True
    # How long a Namespace's policy read is used (None: PODSWEEPER_NAMESPACE_CACHE_SECONDS); the
    # replay reads it every time, its stream may change it from one event to the next.
    namespace_cache_seconds: float | None = None
    # Decisions out as CloudEvents (K_SINK); None: none are built.
    notifier: Notifier | None = None
    # Act on nothing, whatever the settings or a namespace's mode say (`podsweeper sweep`
    # without --live): decided as a live run would decide, held back where it would act.
    hold: bool = False
    _executor: Executor | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        # What the acting side reads (podsweeper.actions.dry_run): the settings, or a dry run
        # no namespace may lift.
        self._acting = (
            self.settings.model_copy(update={"dry_run": True, "namespace_live_allowed": False})
            if self.hold
            else self.settings
        )
        self.policies = NamespacePolicies(self.settings, self.namespace_cache_seconds)
        self._keeper = EvidenceKeeper(self.settings, self._evidence_policy)
        self._router = Router(self.settings, self._keeper)
        self._passes = JobPassRunner(self.settings, self._keeper, self.policies)
        self._sweeper = Sweeper(self.settings, self._passes)

    def _evidence_policy(self, cluster: Cluster, namespace: str) -> NamespacePolicy:
        """Evidence is kept wherever podsweeper is not `off` (podsweeper.dev/mode), log text
        where podsweeper.dev/evidence-logs does not turn it off (podsweeper.keeper)."""
        return self.policies.for_namespace(cluster, namespace, datetime.now(UTC)).policy

    def handle(self, intake: Intake, now: datetime, deadline: float | None = None) -> Outcome:
        """Handle one parsed event. Raises ApiUnavailable when the API fails (-> 503)."""
        cluster = self.cluster.bounded(deadline) if deadline is not None else self.cluster
        outcome = Outcome(intake.attributes.id)
        work = self._router.work_for(intake.trigger, cluster)
        if isinstance(work, Ignored):
            outcome.note, outcome.set_aside = work.reason, True
            return outcome

        act = partial(self._act, cluster=cluster, now=now, outcome=outcome)
        if isinstance(work, SweepRequest):
            run = SweepRun()
            try:
                report = self._sweeper.sweep(cluster, now, deadline, act, run)
                outcome.note, outcome.sweep = report.note, report.end
            finally:
                self._sweeper.publish(run, outcome.applied)
        else:
            result = self._passes.run(work, cluster, now)
            outcome.note = result.note
            act(result.decisions, result.bound)
        return outcome

    def _act(
        self, decisions: list[Decision], budget: int, *, cluster: Cluster, now: datetime, outcome: Outcome
    ) -> Acted:
        """Carries out one pass's decisions within a delete budget; returns the DELETE requests
        sent (what a bound counts) and the deletes made.

        The one way every rule's decisions are acted on: dry-run, the bound and the
        preconditions (podsweeper.actions), evidence read while the pods exist and written
        once each Result is known (podsweeper.keeper), then the log line and the metrics."""
        before = len(outcome.applied)

        def report(item: Applied) -> None:
            decision = item.decision
            metrics.DECISIONS.labels(decision.rule.value, decision.action.value).inc()
            if decision.action.deletes and item.result is not None:
                metrics.DELETES.labels(decision.rule.value, item.result.value).inc()
            reclaimed = decision.gpu_seconds(now) if item.result in RECLAIMED else 0.0
            if reclaimed:
                metrics.RECLAIMED_GPU_SECONDS.labels(decision.namespace, decision.rule.value).inc(reclaimed)
            log_decision(outcome.event_id, decision, item.result, dry_run(decision, self._acting), reclaimed)
            outcome.applied.append(item)

        acting = self._keeper.before_acting(cluster, decisions)
        try:
            acted = carry_out(decisions, cluster, self._acting, now, report, budget, self._deleter())
        except Exception:
            # What was deleted before the failure is kept if the API lets us; the failure goes on.
            self._keeper.after_acting(cluster, acting, outcome.applied[before:], best_effort=True)
            raise
        finally:
            self._notify(outcome.applied[before:], outcome.event_id, now)
        self._keeper.after_acting(cluster, acting, outcome.applied[before:])
        return acted

    def _notify(self, applied: list[Applied], event_id: str, now: datetime) -> None:
        """Tell the owners what was done (or would be): queued, never waited for."""
        if self.notifier is None or not applied:
            return
        dry = partial(dry_run, settings=self._acting)
        self.notifier.submit(notices(applied, dry, event_id, now, self.notifier.source))

    def _deleter(self) -> Executor | None:
        if not self.concurrent_deletes or self.settings.delete_concurrency == 1:
            return None
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    self.settings.delete_concurrency, thread_name_prefix="podsweeper-delete"
                )
            return self._executor
