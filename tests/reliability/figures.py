"""Counters the reliability tests fill in (inputs fuzzed, faults injected, orders tried).

Printed at the end of the pytest run and written to out/reliability-figures.json, so the
numbers in README.md ("Guarantees") can be checked against a real run.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

_lock = threading.Lock()
FIGURES: Counter = Counter()
OUT = Path(__file__).resolve().parents[2] / "out" / "reliability-figures.json"


def add(name: str, amount: int = 1) -> None:
    with _lock:
        FIGURES[name] += amount


def write() -> None:
    if not FIGURES:
        return
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(dict(sorted(FIGURES.items())), indent=2) + "\n")
