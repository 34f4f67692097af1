"""A CloudEvents sink for tests: an HTTP server on loopback that keeps what it receives.

Point K_SINK at `sink.url` (or a SinkBinding's sink at it, through a Service) and read back
`sink.events` (each: the ce- attributes, the JSON data). `delay` makes it slow, `status` makes
it answer an error, `close()` makes it down: the tests of podsweeper.notify use all three, and
an end-to-end test can use it to wait for the events a decision made (`wait_for`).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"


@dataclass(frozen=True)
class Received:
    attributes: dict[str, str]  # ce-* headers without the prefix
    data: Any


@dataclass
class CloudEventSink:
    delay: float = 0.0
    status: int = 202
    events: list[Received] = field(default_factory=list)
    posts: int = 0  # every POST, answered or not (retries included)
    events_kept: int = 0  # how many of `events` close() handed to the end-of-run check

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with sink._lock:
                    sink.posts += 1
                    delay, status = sink.delay, sink.status
                if delay:
                    time.sleep(delay)
                if status < 300:
                    attributes = {
                        k[3:].lower(): v for k, v in self.headers.items() if k.lower().startswith("ce-")
                    }
                    with sink._changed:
                        sink.events.append(Received(attributes, json.loads(body or b"null")))
                        sink._changed.notify_all()
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/"

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Received]:
        """The events received, once there are at least `count` (or the timeout passed)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self.events) < count and time.monotonic() < deadline:
                self._changed.wait(max(0.0, deadline - time.monotonic()))
            return list(self.events)

    def close(self) -> None:
        """Stop serving; what was received is kept for the run's end-of-run secrets check."""
        from tests.support import leaks

        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            received, already = list(self.events), self.events_kept
            self.events_kept = len(received)
        leaks.keep(
            [
                {
                    "kind": leaks.Output.CLOUDEVENT,
                    "where": f"{event.attributes.get('type')} {event.attributes.get('subject', '')}",
                    "text": json.dumps({"attributes": event.attributes, "data": event.data}),
                    "logs_allowed": False,
                }
                for event in received[already:]
            ]
        )

    def __enter__(self) -> CloudEventSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def validator(event_type: str) -> Draft202012Validator:
    resources = [
        (schema["$id"], Resource.from_contents(schema))
        for schema in (json.loads(p.read_text()) for p in SCHEMAS.glob("*.json"))
    ]
    registry = Registry().with_resources(resources)
    schema = json.loads((SCHEMAS / f"{event_type}.schema.json").read_text())
    return Draft202012Validator(schema, registry=registry)


def assert_valid(received: list[Received]) -> None:
    for item in received:
        kind = item.attributes["type"]
        errors = list(validator(kind).iter_errors(item.data))
        assert not errors, (kind, [e.message for e in errors])
        data = item.data
        assert item.attributes["subject"] == f"{data['namespace']}/{data['job']['name']}"
        assert (item.attributes["namespace"], item.attributes["rule"]) == (data["namespace"], data["rule"])
        assert item.attributes["mode"] == data["mode"] and item.attributes["source"]
