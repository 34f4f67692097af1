"""The bench's shared measurement helpers: every figure measures with these.

- In-process (figures 1 and 7): `run_live` times the live function's path event by event
  against the `json.loads` floor of the same bodies, chunk by chunk (floor / function /
  floor), so machine noise hits both alike; `line_floor` is the replay's floor.
- Processes: CPU seconds from /proc/<pid>/stat, the control plane's processes.
- The API server's own counters (`apiserver_request_total`, `apiserver_response_sizes_sum`,
  from its /metrics as admin), a raw watch that stamps each pod's DELETED, a sink's count of
  delivered events.
- Small statistics: percentiles, the busiest second, a counter's difference.
"""

from __future__ import annotations

import gc
import io
import json
import logging
import os
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import requests

from bench import stream as streams
from bench.harness import Served, children
from bench.harness import builders as b
from bench.memapi import MemoryApi
from podsweeper.config import Settings
from podsweeper.report import decision_log
from podsweeper.service import Service

CHUNK = 1000
TRACKED = {"pods", "events", *b.PLURALS.values()}
_LABEL = re.compile(r'(\w+)="([^"]*)"')
_TICK = os.sysconf("SC_CLK_TCK")


def now() -> datetime:
    return datetime.now(UTC)


# -- in-process: the live path against the json.loads floor ------------------------------------


def settings() -> Settings:
    """Contract defaults, live (as overlays/live runs it), whatever PODSWEEPER_* the caller's
    shell has set."""
    for key in [k for k in os.environ if k.startswith("PODSWEEPER_")]:
        del os.environ[key]
    return Settings(dry_run=False, sweep_min_interval_seconds=0)  # each tick measured is a sweep


def quiet_logging() -> None:
    """Decision lines formatted and written as served, to /dev/null: their cost is measured,
    the benchmark's own output stays readable (a Service built later keeps this handler)."""
    handler = logging.StreamHandler(open(os.devnull, "w"))  # noqa: SIM115 - lives as long as the process
    handler.setFormatter(logging.Formatter("%(message)s"))
    decision_log.handlers[:] = [handler]
    decision_log.setLevel(logging.INFO)
    decision_log.propagate = False


@dataclass
class LiveResult:
    events: int
    function_s: float
    floor_s: float
    deletes: int
    expected_deletes: int
    calls: Counter
    api_events: int  # events that made at least one API call
    api_s: float  # function time spent on those events
    api_floor_s: float  # the floor's time for those events' bodies
    calls_by_class: dict

    @property
    def ratio(self) -> float:
        return self.floor_s / self.function_s


def _floor(bodies: list[bytes]) -> list[float]:
    loads, clock = json.loads, time.perf_counter
    times = []
    for body in bodies:
        t0 = clock()
        loads(body)
        times.append(clock() - t0)
    return times


def run_live(stream: streams.Stream, api: MemoryApi | None = None) -> LiveResult:
    """The stream through the live function's path, interleaved with the floor."""
    api = api or MemoryApi()
    service = Service(settings(), cluster=api.cluster())
    clock = time.perf_counter
    function_s = floor_s = api_s = api_floor_s = 0.0
    api_events = 0
    calls_by_class: dict[str, Counter] = {}
    events = stream.events
    gc.collect()
    for start in range(0, len(events), CHUNK):
        chunk = events[start : start + CHUNK]
        bodies = [e.body for e in chunk]
        floor_before = _floor(bodies)
        made_calls = []
        for e in chunk:
            api.apply(e.kind, e.verb, e.obj, e.body)
            before = sum(api.calls.values())
            t0 = clock()
            service.handle(e.attributes, e.body)  # what function/web.py hands over
            spent = clock() - t0
            function_s += spent
            made = sum(api.calls.values()) - before
            made_calls.append(made)
            if made:
                api_events += 1
                api_s += spent
            klass = _event_class(e)
            calls_by_class.setdefault(klass, Counter())["events"] += 1
            calls_by_class[klass]["calls"] += made
        for a, b_, made in zip(floor_before, _floor(bodies), made_calls):
            floor_s += (a + b_) / 2
            if made:
                api_floor_s += (a + b_) / 2
    return LiveResult(
        len(events),
        function_s,
        floor_s,
        api.deleted,
        stream.expected_deletes,
        api.calls,
        api_events,
        api_s,
        api_floor_s,
        calls_by_class,
    )


def _event_class(e: streams.Event) -> str:
    if e.kind == "job":
        if e.verb == "update" and b'"type": "Succeeded"' in e.body:
            return "job finished"
        return f"job {e.verb}"
    return f"pod {e.verb}"


def line_floor(text: str) -> float:
    loads = json.loads
    t0 = time.perf_counter()
    for line in io.StringIO(text):
        loads(line)
    return time.perf_counter() - t0


# -- processes ----------------------------------------------------------------------------------


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime
    return total


def control_plane_pids() -> dict[str, list[int]]:
    """etcd and kube-apiserver: this process's children by name (the harness's ControlPlane starts them)."""
    found: dict[str, list[int]] = {"kube-apiserver": [], "etcd": []}
    for pid in children(os.getpid()):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if comm in found:
            found[comm].append(pid)
    return found


# -- the API server's counters, a watch, a sink's count -----------------------------------------


def _samples(cp, metric: str) -> Counter:
    """(verb, resource[/subresource], code) -> the summed samples of one of kube-apiserver's
    counters (its /metrics), every resource."""
    pattern = re.compile(rf"^{metric}\{{([^}}]*)\}}\s+([0-9.e+]+)$")
    response = requests.get(
        f"{cp.url}/metrics",
        headers={"Authorization": f"Bearer {cp.tokens['admin']}"},
        verify=str(cp.ca_file),
        timeout=30,
    )
    response.raise_for_status()
    counts: Counter = Counter()
    for line in response.text.splitlines():
        match = pattern.match(line)
        if match:
            labels = dict(_LABEL.findall(match.group(1)))
            resource = labels.get("resource", "") + (
                f"/{labels['subresource']}" if labels.get("subresource") else ""
            )
            counts[(labels.get("verb", "?"), resource, labels.get("code", "?"))] += int(float(match.group(2)))
    return counts


def request_totals(cp) -> Counter:
    """(verb, resource[/subresource], code) -> requests so far, every resource."""
    return _samples(cp, "apiserver_request_total")


def response_bytes(cp) -> Counter:
    """(verb, resource) -> bytes of the answers so far (apiserver_response_sizes_sum), for the
    tracked resources."""
    sizes: Counter = Counter()
    for (verb, resource, _), number in _samples(cp, "apiserver_response_sizes_sum").items():
        if resource.split("/")[0] in TRACKED:
            sizes[(verb, resource)] += number
    return sizes


def request_counts(cp) -> Counter:
    """(verb, resource[/subresource]) -> requests so far, for the tracked resources."""
    counts: Counter = Counter()
    for (verb, resource, _code), number in request_totals(cp).items():
        if resource.split("/")[0] in TRACKED:
            counts[(verb, resource)] += number
    return counts


class PodWatch:
    """A raw watch on one namespace's pods: when each pod's DELETED arrived."""

    def __init__(self, admin, namespace: str):
        from kubernetes import client

        core = client.CoreV1Api(admin)
        listing = json.loads(core.list_namespaced_pod(namespace, limit=1, _preload_content=False).data)
        self.response = core.list_namespaced_pod(
            namespace,
            watch=True,
            resource_version=listing["metadata"]["resourceVersion"],
            timeout_seconds=3600,
            _preload_content=False,
        )
        self.gone: dict[str, float] = {}
        self.cond = threading.Condition()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from kubernetes.watch.watch import iter_resp_lines

        try:
            for line in iter_resp_lines(self.response):
                if '"DELETED"' not in line[:40]:
                    continue
                stamp = time.perf_counter()
                name = json.loads(line)["object"]["metadata"]["name"]
                with self.cond:
                    self.gone[name] = stamp
                    self.cond.notify_all()
        except BaseException as error:  # noqa: BLE001 - the connection closes when the run ends
            self.error = error

    def wait_gone(self, names: list[str], timeout: float = 30.0) -> float | None:
        """perf_counter time the last of `names` was seen deleted; None on timeout."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while not all(n in self.gone for n in names):
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)
            return max(self.gone[n] for n in names)

    def close(self) -> None:
        """Unblock the reading thread (shutdown, not close: close waits for the reader)."""
        try:
            self.response.shutdown()
        except Exception:  # noqa: BLE001 - best effort while stopping
            pass


def sink_count(server: Served, noop: bool = False) -> float:
    """Events a sink has received: podsweeper_events_total from the function's /metrics, or the
    no-op's count (a GET answers it)."""
    if noop:
        return float(requests.get(server.url, timeout=10).text)
    text = requests.get(f"{server.url}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("podsweeper_events_total{")
    )


def wait_count(
    server: Served, noop: bool, target: float, timeout: float, settle: float = 5.0
) -> tuple[float, float]:
    """Poll the sink's count until it reaches `target` (or stops moving for `settle` s):
    (count, perf_counter when it was first seen).

    Polls are spaced by the time the rest should take (20-250 ms): the function's /metrics
    costs it a few ms of CPU a call, which frequent polls would take from its events.
    """
    deadline = time.monotonic() + timeout
    start = time.perf_counter()
    last, seen_at, since, first = -1.0, start, time.monotonic(), None
    while time.monotonic() < deadline:
        count = sink_count(server, noop)
        first = count if first is None else first
        if count != last:
            last, seen_at, since = count, time.perf_counter(), time.monotonic()
        if count >= target or time.monotonic() - since >= settle:
            return count, seen_at
        rate = (count - first) / max(1e-3, time.perf_counter() - start)
        time.sleep(min(0.25, max(0.02, (target - count) / rate / 2)) if rate > 0 else 0.1)
    return last, seen_at


def wait_quiet(server: Served, noop: bool = False, settle: float = 1.0, timeout: float = 120.0) -> None:
    """Until the sink's count stops moving for `settle` s (an adapter has delivered a set-up's events)."""
    deadline = time.monotonic() + timeout
    last, since = -1.0, time.monotonic()
    while time.monotonic() < deadline:
        count = sink_count(server, noop)
        if count != last:
            last, since = count, time.monotonic()
        elif time.monotonic() - since >= settle:
            return
        time.sleep(0.1)


# -- small statistics ---------------------------------------------------------------------------


def percentiles(samples: list[float]) -> tuple[float, float]:
    data = sorted(samples)
    p = lambda q: data[min(len(data) - 1, int(round(q / 100 * (len(data) - 1))))]  # noqa: E731
    return p(50), p(99)


def minus(after: Counter, before: Counter) -> Counter:
    return Counter({k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)})


def busiest_second(stamps: list[float]) -> int:
    best, start = 0, 0
    for end, t in enumerate(stamps):
        while t - stamps[start] > 1.0:
            start += 1
        best = max(best, end - start + 1)
    return best
