"""The figures, one module each: its method (the module's docstring), its baseline and its goal.

Figures never import each other (an import-linter contract in pyproject.toml holds it): what
one needs from another (figure 6 reads the memory figures 2 and 3-4 saw; figure 8 runs after
figure 10 in the same scene) is handed over by the runner, bench/__main__.py.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    number: str
    module: str  # bench.figures.<module>
    title: str
    needs: tuple[str, ...] = ()  # figures run with it: their readings or their scene come first


FIGURES = (
    Figure("1", "f01_inprocess", "in-process events/s, against json.loads of the same bodies"),
    Figure("2", "f02_http", "HTTP throughput, against a no-op function on the same server"),
    Figure("3", "f03_api_cost", "API requests per event, against the contract's count"),
    Figure("4", "f04_cleanup_latency", "cleanup latency, against a bare client's same calls"),
    Figure("5", "f05_cold_start", "cold start, against a no-op function"),
    Figure("6", "f06_memory", "peak RSS of a serving instance, against a no-op", needs=("2",)),
    Figure("7", "f07_scale", "events/s as the cluster holds more jobs, in json.loads units"),
    Figure("8", "f08_big_jobs", "512 and 1,024 workers cleaned, against a client-go floor", needs=("10",)),
    Figure("9", "f09_sweep", "the sweep over 50,000 and 200,000 pods, against its time bound"),
    Figure("10", "f10_adapter_events", "events/s through Knative's adapter, against a no-op"),
)
NUMBERS = tuple(f.number for f in FIGURES)


def closure(chosen: set[str]) -> set[str]:
    """The chosen figures and those they need."""
    by_number = {f.number: f for f in FIGURES}
    out = set(chosen)
    while True:
        more = {n for c in out for n in by_number[c].needs} - out
        if not more:
            return out
        out |= more
