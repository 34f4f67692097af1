"""The baseline for the HTTP figures: a CloudEvents function doing nothing.

Served by the same command as podsweeper (tests/support/harness/served.py's SERVE_COMMAND with
`--source bench/noop_main.py`): the framework's own serving (gunicorn, Flask routing,
reading the body) and the CloudEvent read that any CloudEvents function needs (the SDK's
`from_http`, which functions-framework's own CloudEvent signature also uses) are in the
baseline, and nothing else.

It counts the events it received (a GET answers the count): figure 10 reads how many
Knative's adapter delivered, as it reads podsweeper_events_total from the function.
"""

from __future__ import annotations

import threading

from cloudevents.http import from_http

_lock = threading.Lock()
_received = 0


def handle(request) -> str:
    global _received
    if request.method == "GET":
        return str(_received)
    from_http(dict(request.headers), request.get_data(), data_unmarshaller=lambda body: body)
    with _lock:
        _received += 1
    return ""
