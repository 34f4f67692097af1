"""Where figure 1's time goes: pyinstrument over the live path, grouped by podsweeper module.

Every sampled frame's own time is charged to the innermost podsweeper module on its stack,
so json.loads called by function/podsweeper/cluster/kube/calls.py counts as calls.py's,
pydantic called by function/podsweeper/objects/pods.py as pods.py's, logging called by
function/podsweeper/report.py as report.py's. The bench's own in-memory API (which stands in
for HTTP round trips) and the harness are reported apart; json.loads of the event bodies (the
floor) is its own line.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from bench import stream as streams
from bench.measure import run_live
from bench.memapi import MemoryApi

ROOT = Path(__file__).resolve().parents[1]
FUNCTION_DIR = str(ROOT / "function") + "/"
BODY_LOADS = "json.loads of the event bodies (the floor's work)"
IN_MEMORY_API = "bench's in-memory API (stands in for the HTTP round trips)"
HARNESS = "bench harness"


def _owner(frame, owner: str) -> str:
    path = frame.file_path or ""
    if path.startswith(FUNCTION_DIR):
        return path[len(str(ROOT)) + 1 :]
    if path.endswith("bench/memapi.py"):
        return IN_MEMORY_API
    if path.endswith("bench/measure.py"):
        return HARNESS
    if owner == HARNESS and frame.function in ("loads", "decode", "raw_decode"):
        return BODY_LOADS
    return owner


def _walk(frame, owner: str, totals: Counter) -> None:
    if frame.function == "_floor":
        return  # the floor's own loop, interleaved with the function's
    owner = _owner(frame, owner)
    own = frame.time - sum(child.time for child in frame.children)
    totals[owner] += max(0.0, own)
    for child in frame.children:
        _walk(child, owner, totals)


def where_time_goes(jobs: int = 200) -> tuple[list[tuple[str, float]], int, int]:
    """(module, share of the function's time) largest first, over a whole stream of `jobs`
    jobs (the same mix as figure 1's, so passes weigh as much); harness excluded."""
    from pyinstrument import Profiler

    stream = streams.build(jobs)
    profiler = Profiler(interval=0.0005)
    profiler.start()
    run_live(stream, MemoryApi())
    session = profiler.stop()
    totals: Counter = Counter()
    _walk(session.root_frame(), HARNESS, totals)
    for key in (HARNESS, IN_MEMORY_API):
        totals.pop(key, None)
    whole = sum(totals.values()) or 1.0
    return [(name, t / whole) for name, t in totals.most_common()], jobs, len(stream.events)


def markdown(shares: list[tuple[str, float]], jobs: int, events: int) -> str:
    lines = [
        f"## Where figure 1's time goes (pyinstrument over a whole stream of {jobs} jobs, {events:,} events)",
        "",
        "Each sample's own time is charged to the innermost podsweeper module on its stack "
        "(so JSON decoding of API answers counts as `function/podsweeper/cluster/kube/*.py`, pydantic as "
        "`function/podsweeper/objects/*.py`, the decision log as `function/podsweeper/report.py`). "
        "The bench's in-memory API and harness are left out; shares are of the function's time.",
        "",
        "| where | share |",
        "|---|---|",
    ]
    lines += [f"| {name} | {share * 100:.1f}% |" for name, share in shares if share >= 0.005]
    return "\n".join(lines)
