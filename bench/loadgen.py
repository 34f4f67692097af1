"""A small HTTP/1.1 keep-alive load generator: threads, one socket each, pre-encoded requests.

Pure standard library (no wrk to install). Each thread sends a request, reads the whole
response (status line, headers, Content-Length body), records the latency and sends the
next one, for a fixed time. Requests cost the generator a few microseconds each, far below
what a Python web server spends per request, so the server is what is measured.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field

from bench.harness import binary_headers


def encode_request(port: int, headers: dict[str, str], body: bytes, path: str = "/") -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in headers.items() if k.lower() not in ("content-length", "host")]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def binary_request(port: int, raw_event: dict) -> bytes:
    """A CloudEvent in binary content mode, as ApiServerSource sends it."""
    return encode_request(port, binary_headers(raw_event), json.dumps(raw_event["data"]).encode())


class Connection:
    def __init__(self, port: int):
        self.port = port
        self.sock: socket.socket | None = None
        self.buffer = b""

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""
        return sock

    def request(self, payload: bytes) -> tuple[int, bytes]:
        for attempt in (1, 2):
            if self.sock is None:
                self.sock = self._connect()
            try:
                self.sock.sendall(payload)
                return self._response()
            except (TimeoutError, ConnectionError, OSError):
                self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _response(self) -> tuple[int, bytes]:
        assert self.sock is not None
        while b"\r\n\r\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buffer += chunk
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        length = 0
        close = False
        for line in lines[1:]:
            key, _, value = line.partition(b":")
            key = key.strip().lower()
            if key == b"content-length":
                length = int(value)
            elif key == b"connection" and value.strip().lower() == b"close":
                close = True
        while len(rest) < length:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection mid-body")
            rest += chunk
        body, self.buffer = rest[:length], rest[length:]
        if close:
            self.close()
        return status, body

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None


@dataclass
class LoadResult:
    requests: int
    seconds: float
    latencies: list[float] = field(repr=False)
    statuses: dict[int, int]
    concurrency: int

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    def percentile(self, q: float) -> float:
        data = sorted(self.latencies)
        if not data:
            return float("nan")
        return data[min(len(data) - 1, int(round(q / 100 * (len(data) - 1))))]

    @property
    def ok(self) -> bool:
        return set(self.statuses) <= {200}


def run(port: int, payload: bytes, *, concurrency: int, duration: float, warmup: float = 0.5) -> LoadResult:
    """Closed-loop load: `concurrency` connections, each sending back to back, for `duration` s."""
    start = time.perf_counter()
    measure_from = start + warmup
    stop_at = measure_from + duration
    lock = threading.Lock()
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    errors: list[BaseException] = []

    def worker() -> None:
        conn = Connection(port)
        mine: list[float] = []
        codes: dict[int, int] = {}
        clock = time.perf_counter
        try:
            while True:
                t0 = clock()
                if t0 >= stop_at:
                    break
                status, _ = conn.request(payload)
                t1 = clock()
                if t0 >= measure_from:
                    mine.append(t1 - t0)
                    codes[status] = codes.get(status, 0) + 1
        except BaseException as error:  # noqa: BLE001 - reported by the caller
            errors.append(error)
        finally:
            conn.close()
            with lock:
                latencies.extend(mine)
                for k, v in codes.items():
                    statuses[k] = statuses.get(k, 0) + v

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"load generator: {errors[0]!r}")
    # Requests that started in the window; the window ends when the last of them is answered.
    elapsed = max(duration, time.perf_counter() - measure_from) if latencies else duration
    return LoadResult(len(latencies), elapsed, latencies, statuses, concurrency)


def one(port: int, payload: bytes, timeout: float = 10.0) -> tuple[int, bytes]:
    conn = Connection(port)
    try:
        return conn.request(payload)
    finally:
        conn.close()


def merge(results: list[LoadResult]) -> LoadResult:
    """Several runs as one: requests and seconds summed, latencies pooled."""
    statuses: dict[int, int] = {}
    for r in results:
        for k, v in r.statuses.items():
            statuses[k] = statuses.get(k, 0) + v
    return LoadResult(
        sum(r.requests for r in results),
        sum(r.seconds for r in results),
        [x for r in results for x in r.latencies],
        statuses,
        results[0].concurrency,
    )
