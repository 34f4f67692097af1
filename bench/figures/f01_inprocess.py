"""Figure 1: events per second in-process, against the json.loads floor.

Method: a synthetic churn stream (bench/stream.py: 1,000 jobs x 8 pods through their whole
life, ~37,000 events, 5 KB pod bodies) goes through the live function's path as the served
function runs it after the HTTP layer: the raw body bytes, as `podsweeper.web` hands them on,
then `Service.handle(attributes, data)` (intake, triage, and for events that call for a pass
the KubeCluster reads over an in-memory API (bench/memapi.py, answers parsed from JSON
bytes), engine, deletes, Events, metrics and the JSON decision log line, to /dev/null).

Baseline: `json.loads` of the same body bytes, timed per event beside it, chunk by chunk
(floor / function / floor: `bench.measure.run_live`).

Goal: at least half the floor's rate. The stream's expected deletes are checked too: a fast
but wrong pipeline does not meet it.
"""

from __future__ import annotations

from bench import profile as profiling
from bench import stream as streams
from bench.measure import LiveResult, run_live
from bench.report import Bound, Goal, Row, say

GOAL = Goal(
    Bound.AT_LEAST,
    0.50,
    " of floor",
    also="the contract's deletes",
    known_miss="0.3-0.5 of the floor: a pass's typed API answers and log lines (docs/benchmarks.md, figure 1)",
)


def measure(jobs: int = 1000) -> tuple[Row, LiveResult, streams.Stream]:
    say(f"figure 1: building the stream of {jobs} jobs x {streams.PODS_PER_JOB} pods")
    stream = streams.build(jobs)
    say(
        f"figure 1: {len(stream.events)} events, {stream.body_bytes / 1e6:.0f} MB, "
        f"pods {stream.pod_body_mean() / 1000:.1f} KB on average; running"
    )
    result = run_live(stream)
    n = result.events
    fn_rate, floor_rate = n / result.function_s, n / result.floor_s
    ok = result.deletes == result.expected_deletes
    row = Row(
        "1",
        f"in-process events/s, {jobs:,} jobs x 8 pods ({n:,} events, pod bodies "
        f"{stream.pod_body_mean() / 1000:.1f} KB), from the raw body bytes (decoding included)",
        f"{fn_rate:,.0f} ev/s ({1e6 / fn_rate:.0f} µs/event)",
        f"json.loads only: {floor_rate:,.0f} ev/s ({1e6 / floor_rate:.0f} µs/event)",
        f"{result.ratio:.2f} of floor",
        **GOAL.judge(result.ratio, ok),
    )
    quiet = n - result.api_events
    quiet_s = result.function_s - result.api_s
    quiet_floor = result.floor_s - result.api_floor_s
    row.notes.append(
        f"path: Service.handle(body) as function/web.py calls it (pydantic validates from bytes) (intake, triage, KubeCluster over an in-memory API, engine, "
        f"actions, metrics, decision log). {quiet:,} events needed no API call: "
        f"{1e6 * quiet_s / max(1, quiet):.0f} µs each, {quiet_floor / quiet_s:.2f} of their floor. "
        f"{result.api_events:,} events ({100 * result.api_events / n:.1f}%) ran a pass: "
        f"{1e6 * result.api_s / max(1, result.api_events):.0f} µs each (GET job, LIST pods and parsing their "
        f"answers, engine, deletes, Event, one log line per decision), "
        f"{100 * result.api_s / result.function_s:.0f}% of the function's time. "
        f"Deletes: {result.deletes:,} made, {result.expected_deletes:,} expected by the contract"
        + ("" if ok else " -- MISMATCH, the figure is not valid")
    )
    return row, result, stream


def profile_section(jobs: int = 200) -> str:
    """Where figure 1's time goes, by podsweeper module (a section of the report)."""
    return profiling.markdown(*profiling.where_time_goes(jobs))
