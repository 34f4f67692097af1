"""The baseline for the HTTP figures: a functions-framework HTTP function doing nothing.

Served by the same command as podsweeper (tests/harness/served.py's SERVE_COMMAND with
`--source bench/noop_main.py`), so the framework's own serving (gunicorn, Flask routing,
reading the body) is in the baseline, and nothing else.
"""

from __future__ import annotations


def handle(request) -> str:
    request.get_data()
    return ""
