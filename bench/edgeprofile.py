"""`python -m bench.edgeprofile`: what one event costs at the HTTP edge beyond a no-op function.

Both functions are loaded by functions-framework's own `create_app` (the app gunicorn serves)
and called through their WSGI entry in this process, so the server's socket work, the same
for both, is left out. Each event kind (figure 2's: an irrelevant pod event, a relevant one
that needs no action, a sweep tick on an empty namespace needs the API and is not here) is
sent N times to each; the CPU per request of each and their difference are printed, then a
profile of podsweeper's requests, each function's own CPU charged to the package it is in.

Options: --requests N (default 3000), --top N (default 25).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from bench import stream as streams
from bench.harness import binary_headers
from bench.harness import builders as b
from bench.passprofile import shares

ROOT = Path(__file__).resolve().parents[1]
NOOP = ROOT / "bench" / "noop_main.py"
FUNCTION = ROOT / "function" / "main.py"


def _app(source: Path):
    import functions_framework

    return functions_framework.create_app(target="handle", source=str(source), signature_type="http")


def _environ(headers: dict[str, str], body: bytes) -> dict:
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/",
        "SERVER_NAME": "localhost",
        "SERVER_PORT": "8080",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
        "CONTENT_LENGTH": str(len(body)),
    }
    for name, value in headers.items():
        key = name.upper().replace("-", "_")
        environ[key if key == "CONTENT_TYPE" else f"HTTP_{key}"] = value
    return environ


def _send(app, request: tuple[dict[str, str], bytes], count: int) -> None:
    def start_response(status, headers, exc_info=None):
        if not status.startswith("2"):
            raise RuntimeError(f"answered {status}")

    for _ in range(count):
        for _chunk in app(_environ(*request), start_response):
            pass


def events() -> dict[str, tuple[dict[str, str], bytes]]:
    """Figure 2's events in binary content mode, as Knative's adapter sends them."""

    at = datetime.now(UTC)
    raw = {
        "irrelevant pod event": b.event("update", streams.irrelevant_pod(at), at),
        "relevant pod event, no action": b.event("update", streams.relevant_no_action_pod(at), at),
    }
    return {what: (binary_headers(e), json.dumps(e["data"]).encode()) for what, e in raw.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.edgeprofile", description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    for key in [k for k in os.environ if k.startswith("PODSWEEPER_")]:
        del os.environ[key]
    os.environ["KUBECONFIG"] = os.devnull  # never read: these events need no API
    os.environ["PODSWEEPER_AUTH"] = "none"  # unsigned events, as the no-op takes them
    noop, function = _app(NOOP), _app(FUNCTION)
    from bench.measure import quiet_logging

    quiet_logging()
    for what, request in events().items():
        costs = {}
        for name, app in (("no-op", noop), ("podsweeper", function)):
            _send(app, request, 200)  # warm
            cpu0 = time.thread_time()
            _send(app, request, args.requests)
            costs[name] = (time.thread_time() - cpu0) / args.requests * 1e6
        print(
            f"{what}: no-op {costs['no-op']:.0f} us, podsweeper {costs['podsweeper']:.0f} us per request "
            f"(+{costs['podsweeper'] - costs['no-op']:.0f} us, ratio {costs['no-op'] / costs['podsweeper']:.2f})"
        )
        profiler = cProfile.Profile(time.thread_time)
        profiler.enable()
        _send(function, request, args.requests)
        profiler.disable()
        _report(pstats.Stats(profiler), args.requests, args.top)
    return 0


def _report(stats: pstats.Stats, requests: int, top: int) -> None:
    by_package, rows = shares(stats)
    whole = sum(by_package.values()) or 1.0
    print(f"  profiled: {whole / requests * 1e6:.0f} us per request (profiler overhead included)")
    for name, own in by_package.most_common():
        print(f"    {100 * own / whole:5.1f}%  {own / requests * 1e6:6.1f} us  {name}")
    print(f"  top {top} functions by own time:")
    for own, calls, where in sorted(rows, reverse=True)[:top]:
        print(f"    {100 * own / whole:5.1f}%  {calls // requests:4d}/req  {where}")


if __name__ == "__main__":
    sys.exit(main())
