"""Figures 2, 5 and 6: the served function against a no-op function on the same server.

Both run the production command (tests/support/harness/served.py; the no-op with `--source
bench/noop_main.py`) side by side; load comes from
bench/loadgen.py on loopback, alternating between the two servers in rounds, so a noisy
neighbour hits both. The function is given a kubeconfig whose API server is a closed port:
the events used here must be answered without any API request (an accidental request
would answer 503 and fail the figure).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench import loadgen
from bench import stream as streams
from bench.report import Row, say
from tests.fixtures import builders as b
from tests.support.harness.served import Served, unreachable_kubeconfig

ROOT = Path(__file__).resolve().parents[1]
NOOP_SOURCE = ROOT / "bench" / "noop_main.py"
CONCURRENCY = 4
ROUNDS = 8


@dataclass
class Pair:
    function: loadgen.LoadResult
    noop: loadgen.LoadResult


def _events() -> dict[str, dict]:
    at = b.at(700)
    return {
        "irrelevant": b.event("update", streams.irrelevant_pod(at), at),
        "relevant, no action": b.event("update", streams.relevant_no_action_pod(at), at),
    }


def serve(name: str, env: dict[str, str], workdir: Path, noop: bool = False) -> Served:
    """The function (or the no-op) started, not yet waited for: the caller times the start."""
    return Served(env, workdir / f"{name}.log", name=name, source=NOOP_SOURCE if noop else None).launch()


def _check_answer(server: Served, name: str, status: int, body: bytes) -> None:
    if status != 200:
        raise RuntimeError(
            f"{server.name} answered {status} to the {name} event: {body[:300]!r}\n{server.tail()}"
        )


def _first_answer(server: Served, payload: bytes, timeout: float = 30.0) -> float:
    """Seconds from process start until an event is answered 200."""
    deadline = time.monotonic() + timeout
    while True:
        server.check_alive()
        try:
            status, body = loadgen.one(server.port, payload)
            _check_answer(server, "cold-start", status, body)
            return time.perf_counter() - server.started_at
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{server.name} never answered; log:\n{server.tail()}") from None
            time.sleep(0.005)


def _compile_as_installed() -> None:
    """Bytecode for the checkout's own modules, as the image's install writes it for the
    package: the serve command runs under PYTHONDONTWRITEBYTECODE (the Dockerfile's), so
    without it every start would compile podsweeper from source (~85 ms on the bench
    machine), a cost no deployed instance pays. The no-op's file is compiled alike."""
    for target in (ROOT / "function", NOOP_SOURCE):
        compileall = [sys.executable, "-m", "compileall", "-q", str(target)]
        subprocess.run(compileall, check=True, stdout=subprocess.DEVNULL)


def cold_start(workdir: Path, kubeconfig: Path, runs: int = 5) -> Row:
    event = _events()["relevant, no action"]
    _compile_as_installed()
    times: dict[str, list[float]] = {"function": [], "noop": []}
    for run in range(runs):
        for kind in ("function", "noop"):
            server = serve(f"cold-{kind}-{run}", {"KUBECONFIG": str(kubeconfig)}, workdir, kind == "noop")
            try:
                times[kind].append(_first_answer(server, loadgen.binary_request(server.port, event)))
            finally:
                server.stop()
    fn, noop = statistics.median(times["function"]), statistics.median(times["noop"])
    say(f"figure 5: cold start function {fn:.2f} s, no-op {noop:.2f} s")
    row = Row(
        "5",
        "cold start: process start -> first event answered (200), production command",
        f"{fn:.2f} s (median of {runs}; {min(times['function']):.2f}-{max(times['function']):.2f})",
        f"no-op function: {noop:.2f} s ({min(times['noop']):.2f}-{max(times['noop']):.2f})",
        f"{fn / noop:.2f}x no-op",
        "<= 1.5x no-op",
        fn <= 1.5 * noop,
    )
    row.notes.append(
        "the event is a relevant-but-no-action pod update; the clock starts just before "
        "Popen and the client retries the connection every 5 ms until the server listens. "
        "Both start with their modules' bytecode compiled, as the image installs them (the "
        "checkout's function/ and the no-op's file are compiled first)."
    )
    return row


def throughput(workdir: Path, kubeconfig: Path, duration: float = 1.5) -> tuple[list[Row], dict]:
    events = _events()
    env = {"KUBECONFIG": str(kubeconfig)}
    fn = serve("function", env, workdir)
    noop = serve("noop", env, workdir, noop=True)
    parts: dict[tuple[str, str], list[loadgen.LoadResult]] = {}
    try:
        fn.wait_healthy()
        noop.wait_healthy()
        payloads = {
            (s.name, k): loadgen.binary_request(s.port, e) for s in (fn, noop) for k, e in events.items()
        }
        for (name, kind), payload in payloads.items():
            server = fn if name == "function" else noop
            for _ in range(50):  # warm: first requests import lazily-loaded code
                status, body = loadgen.one(server.port, payload)
                _check_answer(server, kind, status, body)
            if name == "function":
                summary = json.loads(body) if body else {}  # empty: set aside by triage
                if summary.get("decisions"):
                    raise RuntimeError(f"the {kind} event made decisions: {summary}")
        for round_ in range(ROUNDS):
            for kind in events:
                # Pairs run back to back, first one then the other, so drift cancels out.
                for server in (fn, noop) if round_ % 2 == 0 else (noop, fn):
                    result = loadgen.run(
                        server.port,
                        payloads[(server.name, kind)],
                        concurrency=CONCURRENCY,
                        duration=duration,
                        warmup=0.2,
                    )
                    if not result.ok:
                        raise RuntimeError(
                            f"{server.name} {kind}: statuses {result.statuses}\n{server.tail()}"
                        )
                    parts.setdefault((server.name, kind), []).append(result)
            say(
                f"figure 2: round {round_ + 1}/{ROUNDS}: "
                + ", ".join(
                    f"{name} {kind} {parts[(name, kind)][-1].rate:.0f}/s"
                    for kind in events
                    for name in ("function", "noop")
                )
            )
        memory = {"function": fn.peak_memory_mb(), "noop": noop.peak_memory_mb()}
    finally:
        fn.stop()
        noop.stop()
    best = {key: loadgen.merge(results) for key, results in parts.items()}
    rows = []
    for n, kind in enumerate(events):
        f, o = best[("function", kind)], best[("noop", kind)]
        # Each round's function and no-op loads ran back to back: the median of those paired
        # ratios shrugs off a burst from a neighbour that hit only one side of one pair.
        ratio = statistics.median(
            a.rate / z.rate for a, z in zip(parts[("function", kind)], parts[("noop", kind)])
        )
        row = Row(
            f"2{'ab'[n]}",
            f"HTTP, {kind} pod event (5 KB, binary mode), {CONCURRENCY} keep-alive connections on loopback",
            f"{f.rate:,.0f} req/s, p50 {1e3 * f.percentile(50):.1f} ms, p99 {1e3 * f.percentile(99):.1f} ms",
            f"no-op: {o.rate:,.0f} req/s, p50 {1e3 * o.percentile(50):.1f} ms, "
            f"p99 {1e3 * o.percentile(99):.1f} ms",
            f"{ratio:.2f} of no-op throughput (median of {ROUNDS} paired rounds)",
            ">= 0.90 of no-op",
            ratio >= 0.9,
        )
        rows.append(row)
    rows[0].notes.append(
        f"{ROUNDS} rounds of {duration:.1f} s per server and event, function and no-op back to back in "
        "alternating order; req/s and latencies are over all rounds, the ratio is the median of the rounds' "
        "paired ratios; "
        "latency is per request under that closed-loop load (queueing in gunicorn's 8 threads included). "
        "Irrelevant = a Deployment's pod; relevant = a running worker of a running PyTorchJob."
    )
    return rows, memory


def memory_row(memory: dict, under_api: dict | None) -> Row:
    fn, noop = memory["function"], memory["noop"]
    fn_total = fn["worker_peak"] + fn["master_peak"]
    noop_total = noop["worker_peak"] + noop["master_peak"]
    value = f"worker {fn['worker_peak']:.0f} MB + master {fn['master_peak']:.0f} MB (after figure 2's load)"
    peak = fn["worker_peak"]
    if under_api:
        value += (
            f"; worker {under_api['worker_peak']:.0f} MB + master {under_api['master_peak']:.0f} MB "
            "after figures 3-4 (kubernetes client loaded, real deletes)"
        )
        peak = max(peak, under_api["worker_peak"])
    row = Row(
        "6",
        "peak RSS (VmHWM) of a serving instance under load",
        value,
        f"no-op: worker {noop['worker_peak']:.0f} MB + master {noop['master_peak']:.0f} MB",
        f"{fn_total / noop_total:.2f}x no-op (worker + master)",
        "< 100 MB (serving worker)",
        peak < 100,
    )
    row.notes.append(
        "the worker is the process that serves; the master is gunicorn's arbiter, forked from the same "
        "interpreter, so most of its pages are shared with the worker and the container's charge is below "
        f"the sum (function sum {fn_total:.0f} MB)."
    )
    return row


def run_all(workdir: Path | None = None, duration: float = 1.5) -> tuple[list[Row], dict]:
    workdir = workdir or Path(tempfile.mkdtemp(prefix="podsweeper-bench-"))
    kubeconfig = unreachable_kubeconfig(workdir)
    rows = [cold_start(workdir, kubeconfig)]
    load_rows, memory = throughput(workdir, kubeconfig, duration)
    return load_rows + rows, memory
