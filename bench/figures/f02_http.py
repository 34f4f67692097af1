"""Figure 2: HTTP throughput of the served function against a no-op function.

Method: the function and the no-op (bench/served.py: both by the production command) serve
two pod events of 5 KB in binary mode (an irrelevant pod, a relevant one needing no action);
load comes from bench/loadgen.py on loopback, 4 keep-alive connections, in 8 rounds of 1.5 s
per server and event, function and no-op back to back in alternating order, so a noisy
neighbour hits both.

Baseline: the no-op function on the same server, in the same rounds.

Goal: at least 0.90 of the no-op's throughput (median of the rounds' paired ratios).
The servers' peak memory is what figure 6 reads.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from bench import loadgen, served
from bench.report import Bound, Goal, Row, say
from bench.served import check_answer, serve, wait_healthy

GOAL = Goal(
    Bound.AT_LEAST,
    0.90,
    " of no-op",
    known_miss="0.8-0.9: the typed read of every 5 KB pod (docs/benchmarks.md, figure 2)",
)
CONCURRENCY = 4
ROUNDS = 8


def measure(workdir: Path, kubeconfig: Path, duration: float = 1.5) -> tuple[list[Row], dict]:
    events = served.events()
    env = {"KUBECONFIG": str(kubeconfig)}
    fn = serve("function", env, workdir)
    noop = serve("noop", env, workdir, noop=True)
    parts: dict[tuple[str, str], list[loadgen.LoadResult]] = {}
    try:
        wait_healthy(fn)
        wait_healthy(noop)
        payloads = {
            (s.name, k): loadgen.binary_request(s.port, e) for s in (fn, noop) for k, e in events.items()
        }
        for (name, kind), payload in payloads.items():
            server = fn if name == "function" else noop
            for _ in range(50):  # warm: first requests import lazily-loaded code
                status, body = loadgen.one(server.port, payload)
                check_answer(server, kind, status, body)
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
            **GOAL.judge(ratio),
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
