"""Figure 6: peak RSS (VmHWM) of a serving instance under load.

Method: the serving worker's and gunicorn master's peak RSS from /proc, read from figure 2's
servers after its load, and from figures 3-4's served function after real passes (the
kubernetes client loaded, real deletes), when those ran. Nothing is measured here: the
runner hands over what those figures read.

Baseline: the no-op function after figure 2's load.

Goal: the serving worker below 100 MB (the larger of the two readings).
"""

from __future__ import annotations

from bench.report import Bound, Goal, Row

GOAL = Goal(Bound.BELOW, 100, " MB (serving worker)")


def measure(memory: dict, under_api: dict | None) -> Row:
    fn, noop = memory["function"], memory["noop"]
    fn_total = fn["worker_peak"] + fn["master_peak"]
    noop_total = noop["worker_peak"] + noop["master_peak"]
    value = f"worker {fn['worker_peak']:.0f} MB + master {fn['master_peak']:.0f} MB (after figure 2's load)"
    peak = fn["worker_peak"]
    if under_api:
        value += (
            f"; worker {under_api['worker_peak']:.0f} MB + master {under_api['master_peak']:.0f} MB "
            "after figures 3-4 (kubernetes client loaded, real deletes)"
        )
        peak = max(peak, under_api["worker_peak"])
    row = Row(
        "6",
        "peak RSS (VmHWM) of a serving instance under load",
        value,
        f"no-op: worker {noop['worker_peak']:.0f} MB + master {noop['master_peak']:.0f} MB",
        f"{fn_total / noop_total:.2f}x no-op (worker + master)",
        **GOAL.judge(peak),
    )
    row.notes.append(
        "the worker is the process that serves; the master is gunicorn's arbiter, forked from the same "
        "interpreter, so most of its pages are shared with the worker and the container's charge is below "
        f"the sum (function sum {fn_total:.0f} MB)."
    )
    return row
