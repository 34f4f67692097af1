"""One address in front of several function instances, as a Kubernetes Service (or Knative's
activator) spreads requests over a Deployment's pods: each request to the next instance in
turn. An instance that refuses the connection (killed, not yet restarted) is answered 502,
as a Service's dead endpoint fails a client; the sender (the adapter, mtping) retries.

Every answer relayed is counted by status, so a test can say which 5xx came from the
function (503: the API was unavailable) and which from an instance being gone (502); and every
CloudEvent answered 2xx by its subject, so a test can say which objects' events all reached a
function.
"""

from __future__ import annotations

import http.client
import itertools
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

REFUSED = 502
_HOP = {"connection", "keep-alive", "transfer-encoding", "host", "content-length"}


class Spread:
    """A round-robin HTTP front over `upstreams` (base URLs); `url` once started."""

    def __init__(self, upstreams: list[str], timeout: float = 60.0):
        self.upstreams = [urlsplit(u) for u in upstreams]
        self.timeout = timeout
        self.answers: Counter[tuple[int, int]] = Counter()  # (instance index, status) -> count
        self.handled: Counter[str] = Counter()  # ce-subject -> CloudEvents a function answered 2xx
        self._turn = itertools.count()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self.url = ""

    def start(self) -> Spread:
        front = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                front._relay(self)

            def do_POST(self) -> None:
                front._relay(self)

            def log_message(self, *args) -> None:
                pass

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address) -> None:
                pass  # a sender that hung up (the adapter timing out): it retries on its own

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, name="spread", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def by_status(self) -> Counter[int]:
        with self._lock:
            found: Counter[int] = Counter()
            for (_, status), count in self.answers.items():
                found[status] += count
            return found

    def answered_subjects(self) -> set[str]:
        """The subjects of every CloudEvent a function answered 2xx so far."""
        with self._lock:
            return set(self.handled)

    def _relay(self, request: BaseHTTPRequestHandler) -> None:
        index = next(self._turn) % len(self.upstreams)
        target = self.upstreams[index]
        body = request.rfile.read(int(request.headers.get("Content-Length") or 0))
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        try:
            connection = http.client.HTTPConnection(target.hostname, target.port, timeout=self.timeout)
            try:
                connection.request(request.command, request.path, body=body, headers=headers)
                answer = connection.getresponse()
                status, reply = answer.status, answer.read()
                kind = answer.getheader("Content-Type", "text/plain")
            finally:
                connection.close()
        except OSError as error:
            status, reply, kind = REFUSED, f"instance {index} unreachable: {error}".encode(), "text/plain"
        subject = request.headers.get("ce-subject")
        with self._lock:
            self.answers[(index, status)] += 1
            if subject and 200 <= status < 300:
                self.handled[subject] += 1
        try:
            request.send_response(status)
            request.send_header("Content-Type", kind)
            request.send_header("Content-Length", str(len(reply)))
            request.end_headers()
            request.wfile.write(reply)
        except OSError:
            pass  # the sender gave up: it retries on its own
