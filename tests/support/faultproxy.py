"""A fault-injecting HTTPS proxy between the function and the real kube-apiserver.

It terminates TLS with the API server's own serving certificate (so the function's
kubeconfig keeps its CA and token and only its `server:` changes), reads each HTTP/1.1
request, and either forwards it over TLS to the API server or injects a fault:

* ``reset``  -- close the connection with a TCP RST, no answer;
* ``drop``   -- close it cleanly (FIN), no answer;
* ``hang``   -- answer nothing until the proxy stops (or ``seconds``);
* ``slow``   -- wait ``seconds``, then forward;
* ``status`` -- answer ``code`` (429, 500, 502, 503, 504, ...) with a Kubernetes Status
  body and optional ``Retry-After``;
* ``pass``   -- forward (with a ``hook``: change the cluster just before the request lands).

A request whose client died before all of its body came is never forwarded, whatever the
rules: a real API server does not act on it either.

Rules are tried in order; the first whose method/path match and whose count is not used
up applies (count None = always). Every request is logged with the time it arrived and
what was done, so tests can check retries and their timing.
"""

from __future__ import annotations

import http.client
import json
import random
import re
import socket
import ssl
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.support import seeds

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "proxy-connection"}


@dataclass
class Rule:
    action: str  # reset | drop | hang | slow | status | pass
    method: str | None = None  # None = any
    path: str | None = None  # regex searched in the request path (with query)
    count: int | None = None  # None = unlimited
    code: int = 503
    retry_after: str | None = None
    seconds: float = 0.0
    probability: float = 1.0
    hook: Callable[[str, str], None] | None = None  # called with (method, path) as the request arrives
    used: int = 0

    def matches(self, method: str, path: str, rng: random.Random) -> bool:
        if self.count is not None and self.used >= self.count:
            return False
        if self.method is not None and self.method != method:
            return False
        if self.path is not None and not re.search(self.path, path):
            return False
        return self.probability >= 1.0 or rng.random() < self.probability


@dataclass
class LogEntry:
    at: float
    method: str
    path: str
    action: str
    status: int | None


@dataclass
class FaultProxy:
    upstream: str  # https://127.0.0.1:port
    ca_file: Path
    cert_file: Path
    key_file: Path
    seed: int = 1
    rules: list[Rule] = field(default_factory=list)
    log: list[LogEntry] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._rng = random.Random(self.seed)
        host, _, port = self.upstream.removeprefix("https://").partition(":")
        self._upstream = (host, int(port))
        self._client_ctx = ssl.create_default_context(cafile=str(self.ca_file))
        self._server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._server_ctx.load_cert_chain(str(self.cert_file), str(self.key_file))
        self._server: ThreadingHTTPServer | None = None
        self.url = ""

    # -- control ----------------------------------------------------------------------------
    def set_rules(self, *rules: Rule) -> None:
        with self._lock:
            self.rules = list(rules)

    def clear(self) -> None:
        self.set_rules()

    def entries(self, since: float = 0.0) -> list[LogEntry]:
        with self._lock:
            return [e for e in self.log if e.at >= since]

    def faults(self) -> int:
        with self._lock:
            return sum(1 for e in self.log if e.action != "pass")

    def _decide(self, method: str, path: str) -> Rule | None:
        with self._lock:
            for rule in self.rules:
                if rule.matches(method, path, self._rng):
                    rule.used += 1
                    return rule
        return None

    def _record(self, method: str, path: str, action: str, status: int | None) -> None:
        with self._lock:
            self.log.append(LogEntry(time.monotonic(), method, path, action, status))

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> FaultProxy:
        proxy = self

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def finish_request(self, request, client_address):
                try:  # the TLS handshake happens in the request's own thread
                    request = proxy._server_ctx.wrap_socket(request, server_side=True)
                except (ssl.SSLError, OSError):
                    return
                super().finish_request(request, client_address)

            def handle_error(self, request, client_address):
                # A client that died mid-request (the disruption tests kill the function as its
                # request arrives) leaves an answer with nowhere to go: expected, not an error.
                if isinstance(sys.exc_info()[1], OSError):
                    return
                super().handle_error(request, client_address)

        self._server = Server(("127.0.0.1", 0), _handler(self))
        self.url = f"https://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def upstream_connection(self) -> http.client.HTTPSConnection:
        host, port = self._upstream
        return http.client.HTTPSConnection(host, port, context=self._client_ctx, timeout=60)


def _status_body(code: int) -> bytes:
    reason = {
        429: "TooManyRequests",
        500: "InternalError",
        502: "BadGateway",
        503: "ServiceUnavailable",
        504: "Timeout",
    }.get(code, "Unknown")
    return json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": f"injected by the fault proxy: {code}",
            "reason": reason,
            "code": code,
        }
    ).encode()


def _handler(proxy: FaultProxy):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        upstream: http.client.HTTPSConnection | None = None

        def log_message(self, *args) -> None:  # quiet
            pass

        def _body(self) -> bytes | None:
            """The request's body; None if its client died before all of it came (a real
            API server never acts on a request cut short: neither may the proxy)."""
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            return body if len(body) == length else None

        def _handle(self) -> None:
            body = self._body()
            if body is None:
                # A killed client's DELETE forwarded without its body would delete with no
                # preconditions: the disruption tests kill the function between its request's
                # headers and its body (urllib3 sends them apart).
                proxy._record(self.command, self.path, "cut-short", None)
                self.close_connection = True
                return
            rule = proxy._decide(self.command, self.path)
            action = rule.action if rule is not None else "pass"
            if rule is not None and rule.hook is not None:
                rule.hook(self.command, self.path)
            if action == "reset":
                proxy._record(self.command, self.path, action, None)
                raw = self.connection
                try:
                    raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
                raw.close()
                self.close_connection = True
                return
            if action == "drop":
                proxy._record(self.command, self.path, action, None)
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return
            if action == "hang":
                proxy._record(self.command, self.path, action, None)
                proxy._stopping.wait(rule.seconds or 120)
                self.close_connection = True
                return
            if action == "status":
                proxy._record(self.command, self.path, action, rule.code)
                payload = _status_body(rule.code)
                self.send_response(rule.code)
                self.send_header("Content-Type", "application/json")
                if rule.retry_after is not None:
                    self.send_header("Retry-After", rule.retry_after)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return
            if action == "slow":
                time.sleep(rule.seconds)
            self._forward(body, action)

        def _forward(self, body: bytes, action: str) -> None:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            for attempt in (1, 2):
                if self.upstream is None:
                    self.upstream = proxy.upstream_connection()
                try:
                    self.upstream.request(self.command, self.path, body=body or None, headers=headers)
                    response = self.upstream.getresponse()
                    payload = response.read()
                    break
                except (http.client.HTTPException, OSError):
                    self.upstream.close()
                    self.upstream = None
                    if attempt == 2:
                        raise
            proxy._record(self.command, self.path, action, response.status)
            self.send_response(response.status)
            for key, value in response.getheaders():
                if key.lower() not in HOP_BY_HOP:
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle

        def finish(self) -> None:
            try:
                super().finish()
            except (OSError, ValueError):
                pass
            if self.upstream is not None:
                self.upstream.close()

    return Handler


def proxy_for(control_plane, seed: int | None = None) -> FaultProxy:
    pki = Path(control_plane.workdir) / "pki"
    return FaultProxy(
        control_plane.url,
        control_plane.ca_file,
        pki / "apiserver.crt",
        pki / "apiserver.key",
        seed=seeds.or_fixed(1) if seed is None else seed,
    )


def kubeconfig_through(control_plane, proxy: FaultProxy, path: Path, user: str = "function") -> Path:
    """The user's kubeconfig with the proxy as its server (same CA, same token)."""
    import yaml

    config = control_plane.kubeconfig_dict(user)
    config["clusters"][0]["cluster"]["server"] = proxy.url
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
