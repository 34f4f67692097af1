"""The functions-framework entry point.

    functions-framework --source function/main.py --target handle --signature-type cloudevent

`handle` is the CloudEvent function. Loading this module inside functions-framework's app
context also puts `function.web.cloudevent_view` in front of the framework's CloudEvent
view (so malformed input gets 400 with a one-line reason, API failures 503, never a stack
trace) and adds /healthz and /metrics.
"""

from __future__ import annotations

import flask
from cloudevents.http import CloudEvent

from function.web import install
from function.service import get_service


def handle(event: CloudEvent) -> dict:
    """Handle one CloudEvent from Knative's ApiServerSource or PingSource."""
    outcome = get_service().handle(event.get_attributes(), event.data)
    return outcome.summary


# Settings are validated now: invalid configuration fails the server's start.
get_service()
if flask.has_app_context():
    install(flask.current_app, handle)
