"""`python -m bench.passprofile`: where the CPU of one big cleanup pass goes, on the real API.

A control plane (tests/support/controlplane), one finished PyTorchJob with N running workers
(cleanPodPolicy None: rule finished-job-active-pod deletes them all at once), and the
function's Service handling that job's Succeeded event in this process, as the function's
ServiceAccount user, through the real cluster client:

1. timed: the settings' delete concurrency (16), wall time and this process's CPU per DELETE;
2. profiled: the same on a second job with deletes one at a time (so cProfile, which sees one
   thread, sees every call), timed by the thread's CPU clock (the wait for the API's answers
   is not the function's cost), each function's own time charged to the package it is in.

Not part of `make bench`'s table: the profile is for finding the cost, the figures are
figure 8's. Options: --workers N (default 512), --top N (functions listed, default 25).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import time
from collections import Counter
from datetime import UTC, datetime

from bench.cluster import ControlPlane, RawApi
from bench.harness import builders as b
from podsweeper.config import Settings

PACKAGES = (
    ("/podsweeper/", "podsweeper"),
    ("/kubernetes/", "kubernetes client"),
    ("/urllib3/", "urllib3"),
    ("/pydantic", "pydantic"),
    ("ssl.py", "ssl"),
    ("/json/", "json"),
    ("/logging/", "logging"),
    ("/http/client.py", "http.client"),
    ("/email/", "email (http headers)"),
    ("/concurrent/", "threads"),
    ("/threading.py", "threads"),
    ("/flask/", "flask"),
    ("/werkzeug/", "werkzeug"),
    ("/cloudevents/", "cloudevents"),
    ("/functions_framework/", "functions_framework"),
    ("/prometheus_client/", "prometheus_client"),
)


def _package(filename: str) -> str:
    if filename.startswith(("~", "<")):
        return "builtins (C: sockets, ssl, json, ...)"
    for marker, name in PACKAGES:
        if marker in filename:
            return name
    return "other python"


def _running_job(raw: RawApi, namespace: str, name: str, workers: int) -> dict:
    now = datetime.now(UTC)
    job = raw.create_job(namespace, name, {"Master": 1, "Worker": workers - 1})
    job = raw.job_conditions(job, [("Created", now), ("Running", now)])
    raw.pod_status(namespace, raw.create_pods(job), now)
    return job


def _finish(raw: RawApi, job: dict) -> dict:
    now = datetime.now(UTC)
    return raw.job_conditions(job, [("Created", now), ("Running", now), ("Succeeded", now)])


def _event(job: dict) -> tuple[dict, bytes]:
    return b.split(b.event("update", job, datetime.now(UTC)))


def _service(cp, namespace: str, concurrency: int):
    from podsweeper.cluster.kube import connect
    from podsweeper.service import Service

    for key in [k for k in os.environ if k.startswith("PODSWEEPER_")]:
        del os.environ[key]
    settings = Settings(
        dry_run=False,
        namespaces=namespace,
        delete_concurrency=concurrency,
        event_timeout_seconds=120,
        sweep_min_interval_seconds=0,  # every ping here is a pass to profile, not one to coalesce
    )
    return Service(settings, connect(settings, str(cp.function_kubeconfig)))


def _remaining(raw: RawApi, namespace: str) -> int:
    return len(raw.ok("GET", f"/api/v1/namespaces/{namespace}/pods?limit=5000")["items"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.passprofile", description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=512)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)

    from bench.measure import quiet_logging

    quiet_logging()
    with ControlPlane(log=sys.stderr) as cp:
        raw = RawApi(cp)
        timed_ns, profiled_ns = raw.namespace("pass-timed"), raw.namespace("pass-profiled")
        timed_job = _running_job(raw, timed_ns, "big", args.workers)
        profiled_job = _running_job(raw, profiled_ns, "big", args.workers)

        service = _service(cp, timed_ns, 16)
        _warm(service)
        event = _event(_finish(raw, timed_job))
        cpu0, t0 = time.process_time(), time.perf_counter()
        outcome = service.handle(*event)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        deleted = args.workers - _remaining(raw, timed_ns)
        print(
            json.dumps(
                {
                    "workers": args.workers,
                    "deleted": deleted,
                    "wall_s": round(wall, 3),
                    "cpu_s": round(cpu, 3),
                    "cpu_ms_per_delete": round(1000 * cpu / max(deleted, 1), 3),
                    "applied": len(outcome.applied),
                    "note": outcome.note,
                }
            )
        )

        service = _service(cp, profiled_ns, 1)
        _warm(service)
        event = _event(_finish(raw, profiled_job))
        profiler = cProfile.Profile(time.thread_time)  # CPU, not the wait for the API's answers
        profiler.enable()
        service.handle(*event)
        profiler.disable()
        deleted = args.workers - _remaining(raw, profiled_ns)
        _report(pstats.Stats(profiler), deleted, args.top)
    return 0


def _warm(service) -> None:
    """A sweep tick first: the client built and connected, as in service."""
    service.handle(*b.split(b.ping(datetime.now(UTC))))


def shares(stats: pstats.Stats) -> tuple[Counter, list[tuple[float, int, str]]]:
    """Own CPU by package, and (own CPU, calls, where) per function, from a cProfile run."""
    by_package: Counter = Counter()
    rows = []
    for (filename, line, function), (_cc, calls, own, _cum, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        by_package[_package(filename)] += own
        rows.append((own, calls, f"{filename.split('site-packages/')[-1]}:{line}({function})"))
    return by_package, rows


def _report(stats: pstats.Stats, deleted: int, top: int) -> None:
    by_package, rows = shares(stats)
    whole = sum(by_package.values()) or 1.0
    print(
        f"\nprofiled pass (deletes one at a time): {whole:.2f} s of CPU, {deleted} deletes, "
        f"{1000 * whole / max(deleted, 1):.2f} ms per delete (profiler overhead included)"
    )
    print("\nby package:")
    for name, own in by_package.most_common():
        print(f"  {100 * own / whole:5.1f}%  {1000 * own / max(deleted, 1):6.3f} ms/delete  {name}")
    print(f"\ntop {top} functions by own time:")
    for own, calls, where in sorted(rows, reverse=True)[:top]:
        print(f"  {100 * own / whole:5.1f}%  {calls:8d} calls  {where}")


if __name__ == "__main__":
    sys.exit(main())
