"""HTTP edge: CloudEvents over HTTP in, status codes out (400 bad input, 503 retry).

ApiServerSource retries 404, 413, 425, 429, 502, 503, 504 and drops everything else, so
bad input must be 400 (never retried) and an API failure 503 (retried); 500 is only for a
bug, and even then carries no stack trace.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import flask
import prometheus_client
from cloudevents.exceptions import GenericException
from cloudevents.http import CloudEvent, from_http

from function.errors import ApiUnavailable, BadEvent
from function.objects import RawJSON
from function.service import get_service

log = logging.getLogger("podsweeper.http")

CLOUDEVENT_ENDPOINT = "cloudevent"


def _keep_json(body: Any) -> RawJSON:
    """The data unmarshaller: keep the body as bytes; the intake validates it from there."""
    if body is None or body == b"" or body == "":
        raise BadEvent("empty body: the event data must be a JSON object")
    return RawJSON(body.encode() if isinstance(body, str) else bytes(body))


def _answer(status: int, message: str, headers: dict | None = None) -> flask.Response:
    one_line = message.replace("\n", " ")[:300]
    return flask.Response(one_line + "\n", status=status, mimetype="text/plain", headers=headers)


def _read_event(request: flask.Request, limit: int) -> CloudEvent:
    length = request.content_length
    if length is not None and length > limit:
        raise BadEvent(f"body of {length} bytes exceeds the {limit}-byte limit")
    body = request.stream.read(limit + 1)
    if len(body) > limit:
        raise BadEvent(f"body exceeds the {limit}-byte limit")
    try:
        return from_http(dict(request.headers), body, data_unmarshaller=_keep_json)
    except GenericException as error:
        cause = error.__cause__ if isinstance(error.__cause__, BadEvent) else error
        raise BadEvent(f"not a CloudEvent: {cause}") from None
    except RecursionError:
        raise BadEvent("body JSON is nested too deeply") from None
    except (TypeError, ValueError, AttributeError, KeyError) as error:
        # The SDK's parser trips over attributes of the wrong type in structured mode
        # (a list as specversion: TypeError; a null id: ValueError): still bad input.
        raise BadEvent(f"not a CloudEvent: {type(error).__name__}: {error}") from None


def cloudevent_view(function: Callable[[CloudEvent], dict]):
    def view(path: str = "") -> flask.Response:
        try:
            event = _read_event(flask.request, get_service().settings.max_body_bytes)
            summary = function(event)
        except BadEvent as error:
            return _answer(400, f"bad event: {error}")
        except ApiUnavailable as error:
            headers = {"Retry-After": str(int(error.retry_after))} if error.retry_after else None
            log.warning("Kubernetes API unavailable, asking for a retry: %s", error)
            return _answer(503, f"kubernetes api unavailable: {error}", headers)
        except Exception:  # a bug: log it here, answer without a stack trace
            log.exception("unexpected error while handling an event")
            return _answer(500, "internal error (see the function's log)")
        return flask.Response(json.dumps(summary) + "\n", status=200, mimetype="application/json")

    return view


def install(app: flask.Flask, function: Callable[[CloudEvent], dict]) -> None:
    """Wire podsweeper's views into functions-framework's Flask app.

    The framework registers its own CloudEvent view only after loading this module, so
    ours runs as a before_request hook for that endpoint: returning a response there ends
    the request before the framework's view (and its 500s) is reached.
    """
    view = cloudevent_view(function)

    def own_cloudevents() -> flask.Response | None:
        if flask.request.endpoint == CLOUDEVENT_ENDPOINT:
            return view()
        return None

    app.before_request(own_cloudevents)
    app.add_url_rule("/healthz", "healthz", lambda: "ok\n", methods=["GET"])
    app.add_url_rule("/metrics", "metrics", _metrics, methods=["GET"])


def _metrics() -> flask.Response:
    return flask.Response(prometheus_client.generate_latest(),
                          mimetype=prometheus_client.CONTENT_TYPE_LATEST)
