"""One event, one clear path: route -> pass (or sweep) -> act, every call going down.

Shared by the live function, the CLI sweep and the replay; only the Cluster differs. The
parts: routing (event -> work, and the pod it sighted), the passes (fresh read -> decisions,
podsweeper.passes), the sweep (listing, queue, gauge: podsweeper.sweep) and the one acting
handle (podsweeper.actor), which carries out, records and announces every decision.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from podsweeper.actions import Applied
from podsweeper.actor import Actor, Ledger
from podsweeper.cluster.base import Cluster
from podsweeper.config import Settings
from podsweeper.decisions import Result
from podsweeper.intake import Intake
from podsweeper.namespaces import NamespacePolicies
from podsweeper.notify import Notifier
from podsweeper.passes import Passes
from podsweeper.routing import Router
from podsweeper.sweep import SweepEnd, Sweeper, SweepRun
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

    def __post_init__(self) -> None:
        self.policies = NamespacePolicies(self.settings, self.namespace_cache_seconds)
        self._router = Router(self.settings)
        self._passes = Passes(self.settings, self.policies)
        self._actor = Actor(
            self.settings,
            self.policies,
            notifier=self.notifier,
            hold=self.hold,
            concurrent_deletes=self.concurrent_deletes,
        )
        self._sweeper = Sweeper(self.settings, self._passes, self._actor)

    def handle(self, intake: Intake, now: datetime, deadline: float | None = None) -> Outcome:
        """Handle one parsed event. Raises ApiUnavailable when the API fails (-> 503)."""
        cluster = self.cluster.bounded(deadline) if deadline is not None else self.cluster
        outcome = Outcome(intake.attributes.id)
        ledger = Ledger(outcome.event_id, outcome.applied)
        work, sighted = self._router.work_for(intake.trigger, cluster)
        if sighted is not None:
            self._actor.keep_sighted(sighted.verb, sighted.pod, cluster, now)
        if isinstance(work, Ignored):
            outcome.note, outcome.set_aside = work.reason, True
            return outcome
        if isinstance(work, SweepRequest):
            run = SweepRun()
            try:
                report = self._sweeper.sweep(cluster, now, deadline, ledger, run)
                outcome.note, outcome.sweep = report.note, report.end
            finally:
                self._sweeper.publish(run, ledger)
        else:
            result = self._passes.run(work, cluster, now)
            outcome.note = result.note
            self._actor.act(
                result.decisions,
                result.bound,
                cluster=cluster,
                now=now,
                ledger=ledger,
                keep_first=result.keep_first,
            )
        return outcome
