"""HTTP edge: CloudEvents over HTTP in, status codes out (401 unknown sender, 400 bad input,
503 retry).

A POST is first asked who sent it (Service.authenticate: a Knative source's bearer token,
docs/deploy.md, Sender identity), before its body is read: a request of no allowed sender
is answered 401 and causes nothing else, no API request. GET /healthz and /metrics stay open
(probes, Prometheus); the NetworkPolicy bounds who reaches them.

ApiServerSource retries 404, 413, 425, 429, 502, 503, 504 and drops everything else, so
bad input must be 400 (never retried) and an API failure 503 (retried); 500 is only for a
bug, and even then carries no stack trace.

Served by functions-framework as an HTTP function (its public signature: a Flask request in,
a response out); the CloudEvent is read here, so no detail of the framework's own CloudEvent
route decides what a malformed event gets. What Knative's sources send (binary content mode,
ordinary attribute names) is read straight from the request's headers; everything else goes
through the CloudEvents SDK, whose answer the direct read is held to (tests/unit/http/test_binary_read.py).
"""

from __future__ import annotations

import functools
import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import flask
import prometheus_client
from cloudevents.exceptions import GenericException
from cloudevents.http import from_http

from podsweeper.auth import Denied
from podsweeper.errors import ApiUnavailable, BadEvent
from podsweeper.service import Service

log = logging.getLogger("podsweeper.http")

Handler = Callable[[flask.Request], flask.Response]

# A body over the limit is still read (and dropped) up to this many times the limit, so a
# client that sends it all before reading the answer gets its 400 instead of a reset
# connection; beyond that the connection is closed after the answer.
DRAIN_FACTOR = 4
_CHUNK = 64 * 1024

# Binary mode read directly: the WSGI names of ce-* headers ("HTTP_CE_" + the attribute name,
# upper-cased). A name outside [A-Z0-9] (a header with "_" or "-" in it) or one the SDK treats
# specially goes the SDK's way, as does a structured or batched event.
_CE_HEADER = "HTTP_CE_"
_CE_LENGTH = len(_CE_HEADER)
_PLAIN_NAME = re.compile(r"[A-Z0-9]+")
_SDK_NAMES = frozenset({"DATA", "DATACONTENTTYPE", "EXTENSIONS"})
_REQUIRED = ("id", "source", "type")
# The answer to an event set aside without reading anything: empty, this header says why.
IGNORED_HEADER = "Podsweeper-Ignored"


class _TooLarge(BadEvent):
    def __init__(self, message: str, close: bool):
        super().__init__(message)
        self.close = close


def _keep_bytes(body: Any) -> bytes:
    """The SDK's data unmarshaller: keep the data as sent; the intake validates it from there."""
    if body is None:
        return b""
    return body.encode() if isinstance(body, str) else bytes(body)


def _header_text(text: str, limit: int = 200) -> str:
    """Text fit for a header value: printable ASCII (what else an event put in it is escaped)."""
    if text.isascii() and text.isprintable():  # the reasons triage writes
        return text[:limit]
    escaped = text.encode("ascii", "backslashreplace").decode("ascii")
    return "".join(c if " " <= c <= "~" else " " for c in escaped)[:limit]


def _answer(status: int, message: str, headers: dict[str, str] | None = None) -> flask.Response:
    one_line = message.replace("\n", " ")[:300]
    return flask.Response(one_line + "\n", status=status, mimetype="text/plain", headers=headers)


def _drain(stream: Any, amount: int) -> int:
    """Read and drop up to `amount` bytes; returns how many there were."""
    seen = 0
    while seen < amount:
        chunk = stream.read(min(_CHUNK, amount - seen))
        if not chunk:
            break
        seen += len(chunk)
    return seen


def read_body(request: flask.Request, limit: int) -> bytes:
    """The request body, at most `limit` bytes; _TooLarge (-> 400) beyond that."""
    drain_bound = DRAIN_FACTOR * limit
    length = request.content_length
    if length is not None and length > limit:
        if length > drain_bound:
            raise _TooLarge(f"body of {length} bytes exceeds the {limit}-byte limit", close=True)
        _drain(request.stream, length)
        raise _TooLarge(f"body of {length} bytes exceeds the {limit}-byte limit", close=False)
    body = request.stream.read(limit + 1)
    if len(body) > limit:  # no (or a false) Content-Length: read on to the bound
        rest = _drain(request.stream, drain_bound - len(body) + 1)
        raise _TooLarge(f"body exceeds the {limit}-byte limit", close=len(body) + rest > drain_bound)
    return body


@functools.lru_cache(maxsize=256)  # the same dozen header names on every event
def _attribute_name(key: str) -> str | None:
    """The attribute a ce-* header's WSGI name carries; None if the SDK must read it."""
    name = key[_CE_LENGTH:]
    if name in _SDK_NAMES or _PLAIN_NAME.fullmatch(name) is None:
        return None
    return name.lower()


def binary_attributes(environ: Mapping[str, Any]) -> dict[str, Any] | None:
    """A binary-mode CloudEvent's attributes as the SDK reads them, from the WSGI environ;
    None for any other request (the SDK reads those). Skips the SDK's copy of every header
    and its event object: most events are irrelevant, and this is most of what they cost."""
    content_type = environ.get("CONTENT_TYPE") or ""
    if content_type[:23].lower() == "application/cloudevents":
        return None
    attributes: dict[str, Any] = {}
    # (A slice compare, not str.startswith: this loop runs over every header of every event.)
    for key in [key for key in environ if key[:_CE_LENGTH] == _CE_HEADER]:
        name = _attribute_name(key)
        if name is None:
            return None
        attributes[name] = environ[key]
    if attributes.get("specversion") != "1.0" or not all(attributes.get(k) for k in _REQUIRED):
        return None
    if content_type:
        attributes["datacontenttype"] = content_type
    if "time" not in attributes:  # the SDK's default
        attributes["time"] = datetime.now(UTC).isoformat()
    return attributes


def read_cloudevent(request: flask.Request, limit: int) -> tuple[Mapping[str, Any], bytes]:
    """The CloudEvent's attributes and its data as sent (binary or structured mode)."""
    body = read_body(request, limit)
    attributes = binary_attributes(request.environ)
    if attributes is not None:
        return attributes, body
    try:
        event = from_http(dict(request.headers), body, data_unmarshaller=_keep_bytes)
    except GenericException as error:
        raise BadEvent(f"not a CloudEvent: {error}") from None
    except RecursionError:
        raise BadEvent("body JSON is nested too deeply") from None
    except (TypeError, ValueError, AttributeError, KeyError) as error:
        # The SDK's parser trips over attributes of the wrong type in structured mode
        # (a list as specversion: TypeError; a null id: ValueError): still bad input.
        raise BadEvent(f"not a CloudEvent: {type(error).__name__}: {error}") from None
    data = event.data
    return event.get_attributes(), data if isinstance(data, bytes) else _keep_bytes(data)


_REFUSAL_LOG_SECONDS = 10.0  # a flood of 401s is a metric, not a flood of log lines
_refusal_logged = [float("-inf")]


def _log_refusal(denied: Denied) -> None:
    now = time.monotonic()
    if now - _refusal_logged[0] >= _REFUSAL_LOG_SECONDS:
        _refusal_logged[0] = now
        log.warning(
            "refused a request (401, %s): %s (at most one such line every %gs; "
            "podsweeper_auth_refusals_total counts them all)",
            denied.reason.value,
            denied.detail,
            _REFUSAL_LOG_SECONDS,
        )


def _metrics() -> flask.Response:
    return flask.Response(prometheus_client.generate_latest(), mimetype=prometheus_client.CONTENT_TYPE_LATEST)


def make_handler(service: Service) -> Handler:
    """The HTTP function: POST a CloudEvent to any path; GET /healthz and /metrics."""

    def handle(request: flask.Request) -> flask.Response:
        if request.path == "/healthz" and request.method == "GET":
            return _answer(200, "ok")
        if request.path == "/metrics" and request.method == "GET":
            return _metrics()
        if request.method != "POST":
            return _answer(405, "POST a CloudEvent; GET /healthz or /metrics", {"Allow": "POST"})
        try:
            denied = service.authenticate(request.headers.get("Authorization"))
            if denied is not None:
                _log_refusal(denied)
                return _answer(401, f"unauthorized: {denied.detail}", {"WWW-Authenticate": "Bearer"})
            attributes, data = read_cloudevent(request, service.settings.max_body_bytes)
            outcome = service.handle(attributes, data)
        except _TooLarge as error:
            return _answer(400, f"bad event: {error}", {"Connection": "close"} if error.close else None)
        except BadEvent as error:
            return _answer(400, f"bad event: {error}")
        except ApiUnavailable as error:
            headers = {"Retry-After": str(int(error.retry_after))} if error.retry_after else None
            log.warning("Kubernetes API unavailable, asking for a retry: %s", error)
            return _answer(503, f"kubernetes api unavailable: {error}", headers)
        except Exception:  # a bug: log it here, answer without a stack trace
            log.exception("unexpected error while handling an event")
            return _answer(500, "internal error (see the function's log)")
        if outcome.set_aside:
            # Most events (an irrelevant pod, a running job's pod): the source reads only the
            # status, so the answer is headers alone, as a no-op function's; the reason is
            # still there for a person asking with curl -i.
            return flask.Response(status=200, headers={IGNORED_HEADER: _header_text(outcome.note or "")})
        body = json.dumps(outcome.summary) + "\n"
        if outcome.deferred:
            # Deletes left over by the bound: the source retries 429 soon, and the retry
            # (a fresh read) goes on where this pass stopped.
            return flask.Response(body, status=429, mimetype="application/json", headers={"Retry-After": "1"})
        return flask.Response(body, status=200, mimetype="application/json")

    return handle


def create_app(service: Service) -> flask.Flask:
    """A Flask app routing every path to the handler, as functions-framework does for an HTTP
    function: for in-process tests (Flask's test client) and embedding."""
    app = flask.Flask("podsweeper")
    handler = make_handler(service)

    def view(path: str = "") -> flask.Response:
        return handler(flask.request)

    methods = ["GET", "POST", "PUT", "DELETE", "PATCH"]
    app.add_url_rule("/", "handle", view, methods=methods)
    app.add_url_rule("/<path:path>", "handle", view, methods=methods)
    return app
