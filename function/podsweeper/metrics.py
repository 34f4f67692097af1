"""Prometheus metrics, served on /metrics of the function's own server."""

from prometheus_client import Counter, Histogram

EVENTS = Counter("podsweeper_events_total", "CloudEvents received", ["type", "outcome"])
DECISIONS = Counter("podsweeper_decisions_total", "Decisions made", ["rule", "action"])
DELETES = Counter("podsweeper_deletes_total", "Pod deletes by result", ["result"])
HANDLING = Histogram(
    "podsweeper_event_handling_seconds",
    "Time to handle one event",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
