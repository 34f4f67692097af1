"""The leftover-GPU gauge: what a round of sweeps saw held for nothing, less what it reclaimed.

Replaced when a round (one listing of everything in scope) ends: until then a big cluster's
gauge shows the last round's.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable

from podsweeper import metrics
from podsweeper.actions import Applied
from podsweeper.actor import RECLAIMED
from podsweeper.decisions import Action, Decision

# Decisions whose objects hold GPUs for nothing.
WASTING = frozenset({Action.DELETE, Action.FORCE_DELETE, Action.WARN, Action.SUSPEND})

Slot = tuple[str, str]  # (namespace, rule)


def count(into: defaultdict[Slot, int], decisions: Iterable[Decision]) -> None:
    for decision in decisions:
        if decision.action in WASTING:
            into[(decision.namespace, decision.rule.value)] += decision.gpus


class LeftoverGauge:
    def __init__(self) -> None:
        self._round: defaultdict[Slot, int] = defaultdict(int)
        self._lock = threading.Lock()

    def publish(self, seen: dict[Slot, int], applied: Iterable[Applied], round_done: bool) -> None:
        """Add one sweep's counts (`seen`) and take off what it reclaimed; at the end of a
        round, the gauge is replaced by the round's total."""
        with self._lock:
            for slot, gpus in seen.items():
                self._round[slot] += gpus
            for item in applied:
                if item.result in RECLAIMED and item.decision.action in WASTING:
                    slot = (item.decision.namespace, item.decision.rule.value)
                    self._round[slot] = max(0, self._round[slot] - item.decision.gpus)
            if round_done:
                metrics.publish_leftover({slot: gpus for slot, gpus in self._round.items() if gpus})
                self._round.clear()
