"""The backstop sweep: listing (its position and job index, what the rules nominate), the
queue of jobs left, the leftover-GPU gauge, and the sweeper that runs a sweep through them."""

from podsweeper.sweep.run import SweepEnd, SweepReport, SweepRun
from podsweeper.sweep.sweeper import LIST_SHARE, WORK_SHARE, Sweeper

__all__ = ["LIST_SHARE", "WORK_SHARE", "SweepEnd", "SweepReport", "SweepRun", "Sweeper"]
