"""The cluster's Service network, for processes the test world runs for pods (kubelet.py).

In a cluster, Knative resolves a sink to `http://<service>.<namespace>.svc.cluster.local`, and
cluster DNS plus kube-proxy carry a request there to a ready pod of the Service. Here no pod
has a network of its own: the processes run on this host. So they get `HTTP_PROXY` pointing at
this forward proxy, which plays DNS and kube-proxy: it takes the Service from the host name,
the Service's selector and target port from the API, and sends the request on to the local
port of a ready pod's process (round robin), as kube-proxy would. Anything that is not a
cluster Service host gets a 502, so a wrong address fails loudly instead of leaving the host.

Go's HTTP client (the receive adapter's and mtping's CloudEvents senders clone
`http.DefaultTransport`) honours `HTTP_PROXY` and never proxies loopback, so the API server
at 127.0.0.1 is reached directly and the generated `K_SINK` / `status.sinkUri` are used as
the controller wrote them.
"""

from __future__ import annotations

import http.client
import itertools
import re
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

SERVICE_HOST = re.compile(r"^(?P<service>[a-z0-9-]+)\.(?P<namespace>[a-z0-9-]+)\.svc(\.cluster\.local)?$")
# Hop-by-hop headers (RFC 9110 7.6.1) are not forwarded.
_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer", "upgrade"}

# (namespace, service, port) -> the local ports of its ready endpoints.
Endpoints = Callable[[str, str, int], list[int]]


class ClusterNetwork:
    """A forward proxy on 127.0.0.1 that routes Service hosts to local processes.

    `endpoints(namespace, service, port)` answers which local ports serve that Service port
    now (kubelet.Kubelet.endpoints). `requests` counts what was forwarded, per Service.
    """

    def __init__(self, endpoints: Endpoints):
        self.endpoints = endpoints
        self.requests: dict[tuple[str, str], int] = {}
        self.refused: list[str] = []
        self._turn = itertools.count()
        self._lock = threading.Lock()
        network = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet: the test's log is the processes'
                pass

            def _forward(self) -> None:
                network.forward(self)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _forward

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address) -> None:
                # A client that hangs up (a process stopped mid-keep-alive) is not an error.
                if not isinstance(sys.exc_info()[1], ConnectionError):
                    super().handle_error(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="cluster-network", daemon=True)

    def start(self) -> ClusterNetwork:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> ClusterNetwork:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def proxy_env(self) -> dict[str, str]:
        """What a pod's process gets so that its HTTP requests reach cluster Services."""
        return {"HTTP_PROXY": self.url, "http_proxy": self.url, "NO_PROXY": "127.0.0.1,localhost"}

    def forward(self, handler: BaseHTTPRequestHandler) -> None:
        url = urlsplit(handler.path)
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        match = SERVICE_HOST.match(url.hostname or "")
        if match is None:
            self._answer(handler, 502, f"not a cluster Service host: {url.hostname}")
            return
        namespace, service = match["namespace"], match["service"]
        ports = self.endpoints(namespace, service, url.port or 80)
        if not ports:
            self._answer(handler, 503, f"no ready endpoints for {namespace}/{service}")
            return
        with self._lock:
            port = ports[next(self._turn) % len(ports)]
            self.requests[(namespace, service)] = self.requests.get((namespace, service), 0) + 1
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in _HOP}
        target = url.path + (f"?{url.query}" if url.query else "")
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            conn.request(handler.command, target or "/", body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except OSError as error:
            self._answer(handler, 502, f"{namespace}/{service} at :{port}: {error}")
            return
        finally:
            conn.close()
        handler.send_response(resp.status, resp.reason)
        for key, value in resp.getheaders():
            if key.lower() not in _HOP and key.lower() != "content-length":
                handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _answer(self, handler: BaseHTTPRequestHandler, status: int, text: str) -> None:
        with self._lock:
            self.refused.append(text)
        data = text.encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "text/plain")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
