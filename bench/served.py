"""The function and the no-op served side by side, for figures 2 and 5 (and 6's memory).

Both run the production command (the harness's `Served`; the no-op with `--source
bench/noop_main.py`). The function is given a kubeconfig whose API server is a closed port:
the events used here must be answered without any API request (an accidental request
would answer 503 and fail the figure).
"""

from __future__ import annotations

import time
from pathlib import Path

from bench import stream as streams
from bench.harness import Served, serve_argv
from bench.harness import builders as b

ROOT = Path(__file__).resolve().parents[1]
NOOP_SOURCE = ROOT / "bench" / "noop_main.py"


def events() -> dict[str, dict]:
    """Figure 2's two pod events (and figure 5's second): neither needs the API."""
    at = b.at(700)
    return {
        "irrelevant": b.event("update", streams.irrelevant_pod(at), at),
        "relevant, no action": b.event("update", streams.relevant_no_action_pod(at), at),
    }


def serve(name: str, env: dict[str, str], workdir: Path, noop: bool = False) -> Served:
    """The function (or the no-op) started, not yet waited for: the caller times the start."""
    server = Served(env, workdir / f"{name}.log", name=name, source=NOOP_SOURCE if noop else None)
    server.started_at = time.perf_counter()  # as Served.start() sets it, just before the process starts
    return server.launch(serve_argv(server.port, server.source), env=server.environment(), cwd=ROOT)


def wait_healthy(server: Served, timeout: float = 30.0) -> None:
    """Until GET /healthz answers 200; the harness's error, with the log's tail, if it exits."""
    server.wait("answer /healthz", lambda: server.healthy(request_timeout=1), timeout, interval=0.05)


def check_answer(server: Served, name: str, status: int, body: bytes) -> None:
    if status != 200:
        raise RuntimeError(
            f"{server.name} answered {status} to the {name} event: {body[:300]!r}\n{server.tail()}"
        )
