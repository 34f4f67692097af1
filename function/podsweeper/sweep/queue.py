"""The sweep's work queue: the jobs a sweep left, in the order it left them.

Fairness: the jobs left keep their place (sorting them anew would put a job nominated again,
by a dry run or a pass that found nothing yet, ahead of those still waiting), and a sweep that
passed none of them (its listing spent the work share) makes the next one pass the first of
them whatever its own listing took: a listing never starves the jobs waiting.
"""

from __future__ import annotations

import threading

from podsweeper.sweep.run import JobKey
from podsweeper.triage import JobPass


class WorkQueue:
    def __init__(self) -> None:
        self._pending: dict[JobKey, JobPass] = {}
        self._starved = False  # the last sweep left jobs waiting and passed none
        self._lock = threading.Lock()

    def take(self, candidates: dict[JobKey, JobPass]) -> tuple[list[JobKey], bool]:
        """Add the jobs left to a sweep's candidates; returns them in the order left, and
        whether the sweep that left them passed none."""
        with self._lock:
            candidates.update(self._pending)
            return list(self._pending), self._starved

    @staticmethod
    def order(carried: list[JobKey], candidates: dict[JobKey, JobPass]) -> list[JobKey]:
        """The jobs left first, in the order left, then the new ones in job order."""
        waiting = set(carried)
        return carried + sorted(key for key in candidates if key not in waiting)

    def leave(self, left: dict[JobKey, JobPass], passed: int) -> None:
        """What a sweep did not reach, for the next one."""
        with self._lock:
            self._pending = left
            self._starved = passed == 0 and bool(left)
