"""The baseline for the HTTP figures: a functions-framework CloudEvent function doing nothing.

Served by the same command as podsweeper (`functions-framework --source bench/noop_main.py
--target handle --signature-type cloudevent`), so the framework's own CloudEvent parsing
(including json.loads of the body) is in the baseline, and nothing else.
"""

from __future__ import annotations


def handle(event) -> None:
    return None
