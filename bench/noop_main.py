"""The baseline for the HTTP figures: a CloudEvents function doing nothing.

Served by the same command as podsweeper (tests/harness/served.py's SERVE_COMMAND with
`--source bench/noop_main.py`): the framework's own serving (gunicorn, Flask routing,
reading the body) and the CloudEvent read that any CloudEvents function needs (the SDK's
`from_http`, which functions-framework's own CloudEvent signature also uses) are in the
baseline, and nothing else.
"""

from __future__ import annotations

from cloudevents.http import from_http


def handle(request) -> str:
    from_http(dict(request.headers), request.get_data(), data_unmarshaller=lambda body: body)
    return ""
