"""What one sweep found and how it ended: plain data the listing fills and the sweeper reads."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from enum import StrEnum

from podsweeper.decisions import Decision
from podsweeper.model import JobRef, Pod
from podsweeper.sweep.leftover import count
from podsweeper.triage import JobPass, PassReason

JobKey = tuple[str, str, str]


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


@dataclass
class SweepRun:
    """One sweep's candidates, how much it listed, and its leftover GPUs by (namespace, rule)."""

    candidates: dict[JobKey, JobPass] = field(default_factory=dict)
    stuck: dict[tuple[str, str], Pod] = field(default_factory=dict)  # by (namespace, name)
    leftover: defaultdict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    listed_pods: int = 0
    round_done: bool = False  # this sweep's listing reached the end of the round

    def count(self, decisions: list[Decision]) -> None:
        count(self.leftover, decisions)

    def nominate(self, ref: JobRef, all_label_sets: bool = False) -> None:
        known = self.candidates.get(ref.key)
        if known is None or (all_label_sets and not known.all_label_sets):
            self.candidates[ref.key] = JobPass(ref, PassReason.SWEEP, all_label_sets=all_label_sets)
