"""Figures 8-10: big jobs and big clusters, on the real control plane (tests/support/controlplane).

Figure 8 (one control plane, the function served by tests/support/harness/served.py as its
ServiceAccount user, Knative's real receive adapter in the path):

- 8a: a finished PyTorchJob with 512 running workers, "job status written -> last pod
  gone" from a raw watch, against the floor (bench/floor.py): a client-go program making
  the same calls as the function's user right after the status write, in a namespace no
  adapter watches. Beside them, a bare in-process Python client making the same calls, and
  8-worker jobs finished in the function's namespace before and after the big one.
  cleanPodPolicy None: the operator leaves the pods, so podsweeper acts at once (no
  operator grace) through rule finished-job-active-pod.
- 8b: the same for a 1,024-worker job (the one figure 10 bursts on), against the floor on
  1,024 pods.
- 8c: what the 512-worker cleanup asked of the API server: kube-apiserver's
  apiserver_request_total by verb, resource and code before and after, and the deletes'
  rate from the watch (busiest second), against the client's QPS/burst.
- 8d: CPU per DELETE during 8a: the CPU time of kube-apiserver, etcd, the function, the
  adapter and this process from /proc/<pid>/stat (what bounds the time), the floor's from
  its own getrusage.

Figure 9 (its own control plane, torn down with its etcd data afterwards): the backstop
sweep over N training pods of N/10 PyTorchJobs in one namespace, 1% of the jobs finished
with their pods still running. Pods are created directly through the API (no kubelet) by
concurrent raw HTTPS requests. PingSource ticks are POSTed until the pods are gone:
ticks, seconds and API requests (apiserver_request_total) per tick, and the serving
worker's peak RSS beside an idle instance's.

Figure 10: Knative's adapter -> podsweeper vs the same adapter -> the no-op function
(bench/noop_main.py, served the same way), each watching its own namespace holding one
1,024-pod job; a burst of 1,024 pod status writes (16 concurrent writers) per round, rounds
alternating between the two. Delivered events are counted at the sink
(podsweeper_events_total; the no-op answers its count to GET).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import requests

from bench.apiserver import request_totals
from bench.report import Row, say
from podsweeper.config import Settings
from tests.fixtures import builders as b
from tests.support.bulk import RawApi
from tests.support.harness.processes import children
from tests.support.harness.served import Served
from tests.support.k8s import for_create

NOOP_SOURCE = Path(__file__).resolve().parent / "noop_main.py"
SMALL = {"Master": 1, "Worker": 7}
SPACING = 0.3  # between measured jobs, as figure 4 (see its note on the watch cache)
# The function's defaults (PODSWEEPER_KUBE_API_QPS / _BURST), which the floor uses too.
QPS = float(Settings.model_fields["kube_api_qps"].default)
BURST = int(Settings.model_fields["kube_api_burst"].default)
_TICK = os.sysconf("SC_CLK_TCK")


def now() -> datetime:
    return datetime.now(UTC)


# -- plumbing ---------------------------------------------------------------------------------


def _minus(after: Counter, before: Counter) -> Counter:
    return Counter({k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)})


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
    """etcd and kube-apiserver: this process's children by name (tests/support/controlplane starts them)."""
    found: dict[str, list[int]] = {"kube-apiserver": [], "etcd": []}
    for pid in children(os.getpid()):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if comm in found:
            found[comm].append(pid)
    return found


def sink_count(server: Served, noop: bool) -> float:
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
    deadline = time.monotonic() + timeout
    last, since = -1.0, time.monotonic()
    while time.monotonic() < deadline:
        count = sink_count(server, noop)
        if count != last:
            last, since = count, time.monotonic()
        elif time.monotonic() - since >= settle:
            return
        time.sleep(0.1)


def _admin_client(cp):
    from podsweeper.cluster.kube import load_api_client

    return load_api_client(str(cp.admin_kubeconfig))


# -- figures 8 and 10 -------------------------------------------------------------------------


def _events_per_second(raw: RawApi, sinks: dict, rounds: int) -> Row:
    """Figure 10: paired bursts of pod status writes, adapter -> function vs adapter -> no-op."""
    rates: dict[str, list[float]] = {"function": [], "noop": []}
    lost: dict[str, int] = {"function": 0, "noop": 0}
    writes: list[float] = []
    cpu: dict[str, list[float]] = {"function": [], "noop": []}
    for round_ in range(rounds):
        order = ("function", "noop") if round_ % 2 == 0 else ("noop", "function")
        for name in order:
            server, namespace, pods = sinks[name]
            noop = name == "noop"
            wait_quiet(server, noop, settle=0.5)
            before = sink_count(server, noop)
            workers = [server.proc.pid, *server.worker_pids]
            cpu0 = cpu_seconds(workers)
            t0 = time.perf_counter()
            raw.pod_status(namespace, pods, now() + timedelta(seconds=round_ + 1))
            writes.append(len(pods) / (time.perf_counter() - t0))
            count, last = wait_count(server, noop, before + len(pods), timeout=120)
            delivered = count - before
            cpu[name].append((cpu_seconds(workers) - cpu0) / max(1, delivered))
            lost[name] += int(len(pods) - delivered)
            rates[name].append(delivered / (last - t0))
        say(
            f"figure 10: round {round_ + 1}/{rounds}: adapter -> function {rates['function'][-1]:.0f} ev/s, "
            f"-> no-op {rates['noop'][-1]:.0f} ev/s (writes {writes[-1]:.0f}/s)"
        )
    ratio = statistics.median(f / n for f, n in zip(rates["function"], rates["noop"]))
    fn, noop = statistics.median(rates["function"]), statistics.median(rates["noop"])
    cpu_ratio = statistics.median(f / n for f, n in zip(cpu["function"], cpu["noop"]))
    row = Row(
        "10",
        f"Knative adapter -> sink events/s under a burst of 1,024 pod status writes (a 1,024-pod job "
        f"starting), {rounds} rounds per sink",
        f"{fn:,.0f} ev/s (median; {min(rates['function']):,.0f}-{max(rates['function']):,.0f})",
        f"adapter -> no-op function: {noop:,.0f} ev/s ({min(rates['noop']):,.0f}-{max(rates['noop']):,.0f})",
        f"{ratio:.2f} of no-op (median of {rounds} paired rounds); CPU per event {cpu_ratio:.2f}x the no-op's",
        ">= 0.95 of no-op; CPU per event <= 1.3x the no-op's",
        ratio >= 0.95 and cpu_ratio <= 1.3,
    )
    row.notes.append(
        "rate = events delivered / (first status write -> sink count reaches the burst; polled every 20-250 ms, closer near the end); "
        f"the writes themselves ran at {statistics.median(writes):,.0f}/s (16 concurrent writers). The adapter "
        "sends one event at a time (its reflector blocks on each POST), so its rate is 1 / (per-event round "
        "trip) once the writes outrun it. The events are updates of running pods of a running job: relevant, "
        "no API call. CPU per event delivered (the sink's processes, /proc/<pid>/stat, sink-count polls "
        f"included): function {statistics.median(cpu['function']) * 1e3:.2f} ms, no-op "
        f"{statistics.median(cpu['noop']) * 1e3:.2f} ms. "
        + (
            f"Events not delivered: function {lost['function']}, no-op {lost['noop']}."
            if any(lost.values())
            else "Every write was delivered to both sinks."
        )
    )
    return row


def _cleanup(raw, admin, server, namespace: str, job: dict, pods: list[str], timeout: float = 90.0) -> float:
    """Seconds from just before the job's Succeeded status write to its last pod's DELETED."""
    from bench.apiserver import PodWatch

    watch = PodWatch(admin, namespace)
    try:
        t0 = time.perf_counter()
        raw.job_conditions(job, [("Created", now()), ("Running", now()), ("Succeeded", now())])
        last = watch.wait_gone(pods, timeout)
        if last is None:
            raise RuntimeError(
                f"{len(pods) - sum(p in watch.gone for p in pods)} pods of {job['metadata']['name']} not gone "
                f"after {timeout:.0f} s\n{server.tail()}"
            )
        return last - t0
    finally:
        watch.close()


def _events_for(server: Served, job_name: str) -> tuple[set[str], Counter]:
    """Which events deleted (or deferred) pods of the job, and the results, from the decision log."""
    ids: set[str] = set()
    results: Counter = Counter()
    for line in server.decisions():
        if f'"{job_name}' in json.dumps(line) and line.get("result") in ("deleted", "deferred", "gone"):
            ids.add(line["event_id"])
            results[line["result"]] += 1
    return ids, results


def _timed_big_cleanup(cp, raw, admin, server, adapter, namespace, job, pods) -> dict:
    """The 512-worker cleanup with CPU time per process and the API server's request counts."""
    from bench.apiserver import PodWatch

    pids = control_plane_pids()
    pids["function"] = [server.proc.pid, *server.worker_pids]
    pids["adapter"] = [adapter.proc.pid]
    pids["bench (watch, this process)"] = [os.getpid()]
    watch = PodWatch(admin, namespace)
    try:
        before = request_totals(cp)
        cpu0 = {k: cpu_seconds(v) for k, v in pids.items()}
        t0 = time.perf_counter()
        raw.job_conditions(job, [("Created", now()), ("Running", now()), ("Succeeded", now())])
        last = watch.wait_gone(pods, 90)
        t1 = time.perf_counter()
        cpu1 = {k: cpu_seconds(v) for k, v in pids.items()}
        if last is None:
            raise RuntimeError(f"pods of the 512-worker job not gone after 90 s\n{server.tail()}")
        stamps = sorted(watch.gone[p] for p in pods)
    finally:
        watch.close()
    wait_quiet(server, settle=1.0)
    after = request_totals(cp)
    return {
        "seconds": last - t0,
        "wall": t1 - t0,
        "cpu": {k: cpu1[k] - cpu0[k] for k in pids},
        "requests": _minus(after, before),
        "stamps": [s - t0 for s in stamps],
    }


def _bare_cleanup(cp, raw, admin, namespace: str, job: dict, pods: list[str]) -> dict:
    """The floor of the 512-worker cleanup: a bare in-process client (the kubernetes client as
    the function configures it, as the function's user) makes the same calls right after the
    status write (GET job, LIST pods by page, DELETE each with its uid precondition, 16 at once):
    no adapter, no HTTP hop, no engine. No adapter watches its namespace."""
    from kubernetes import client

    from bench.apiserver import PodWatch
    from podsweeper.cluster.kube import load_api_client

    api = load_api_client(str(cp.function_kubeconfig), connections=20)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    name = job["metadata"]["name"]
    pids = control_plane_pids()
    watch = PodWatch(admin, namespace)

    def delete(pod: dict) -> None:
        body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=pod["metadata"]["uid"]))
        _ = core.delete_namespaced_pod(
            pod["metadata"]["name"], namespace, body=body, _preload_content=False
        ).data

    try:
        custom.get_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", name)  # warm
        cpu0 = {k: cpu_seconds(v) for k, v in pids.items()}
        own0 = time.process_time()
        t0 = time.perf_counter()
        raw.job_conditions(job, [("Created", now()), ("Running", now()), ("Succeeded", now())])
        _ = custom.get_namespaced_custom_object(
            "kubeflow.org", "v1", namespace, "pytorchjobs", name, _preload_content=False
        ).data
        found, token = [], None
        while True:
            page = json.loads(
                core.list_namespaced_pod(
                    namespace,
                    label_selector=f"training.kubeflow.org/job-name={name}",
                    limit=500,
                    _continue=token,
                    _preload_content=False,
                ).data
            )
            found += page["items"]
            token = page["metadata"].get("continue")
            if not token:
                break
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(delete, found))
        last = watch.wait_gone(pods, 90)
        own = time.process_time() - own0
        cpu = {k: cpu_seconds(v) - cpu0[k] for k, v in pids.items()}
        if last is None:
            raise RuntimeError("the bare client's pods not gone after 90 s")
    finally:
        watch.close()
        api.close()
    cpu["Python bare client + watch (this process)"] = own
    return {"seconds": last - t0, "cpu": cpu}


def _optional(what: str, fn):
    """A reference measurement: its failure is reported in the row, not the figure's end."""
    try:
        return fn()
    except Exception as error:  # noqa: BLE001 - figure 8 stands without its floor, saying so
        import traceback

        traceback.print_exc()
        say(f"figure 8: {what} failed: {error!r}"[:500])
        return None


def _busiest_second(stamps: list[float]) -> int:
    best, start = 0, 0
    for end, t in enumerate(stamps):
        while t - stamps[start] > 1.0:
            start += 1
        best = max(best, end - start + 1)
    return best


def cleanup_figures(workdir: Path, small_jobs: int = 8, rounds: int = 3) -> list[Row]:
    from bench.floor import ensure_floor, floor_cleanup
    from tests.support.adapter.launcher import ReceiveAdapter, install_source_rbac, source_config
    from tests.support.controlplane.build import RECEIVE_ADAPTER, ensure_built
    from tests.support.controlplane.launcher import ControlPlane

    ensure_built(RECEIVE_ADAPTER, log=sys.stderr)
    ensure_floor(log=sys.stderr)  # figure 8's floor, built before the control plane starts
    rows: list[Row] = []
    say("figures 8, 10: starting a control plane")
    with ControlPlane(log=sys.stderr) as cp:
        admin = _admin_client(cp)
        install_source_rbac(admin)
        raw = RawApi(cp)
        ns_big, ns_fn, ns_noop, ns_bare, ns_floor, ns_floor_huge = (
            raw.namespace(p)
            for p in (
                "bench-big",
                "bench-burst-fn",
                "bench-burst-noop",
                "bench-bare",
                "bench-floor",
                "bench-floor-huge",
            )
        )
        t_setup = time.perf_counter()
        smalls = [raw.create_job(ns_big, f"small-{i:02d}", SMALL) for i in range(small_jobs)]
        big = raw.create_job(ns_big, "big-512", {"Master": 1, "Worker": 511})
        bare = raw.create_job(ns_bare, "bare-512", {"Master": 1, "Worker": 511})
        floor_job = raw.create_job(ns_floor, "floor-512", {"Master": 1, "Worker": 511})
        floor_huge_job = raw.create_job(ns_floor_huge, "floor-1024", {"Master": 1, "Worker": 1023})
        burst_fn = raw.create_job(ns_fn, "burst-1024", {"Master": 1, "Worker": 1023})
        burst_noop = raw.create_job(ns_noop, "burst-1024", {"Master": 1, "Worker": 1023})
        every = [*smalls, big, bare, floor_job, floor_huge_job, burst_fn, burst_noop]
        for job in every:
            raw.job_conditions(job, [("Created", now()), ("Running", now())])
        pods = {job["metadata"]["uid"]: raw.create_pods(job) for job in every}
        raw.pod_status(ns_big, [p for job in [*smalls, big] for p in pods[job["metadata"]["uid"]]], now())
        for job in (bare, floor_job, floor_huge_job):
            raw.pod_status(job["metadata"]["namespace"], pods[job["metadata"]["uid"]], now())
        say(
            f"figures 8, 10: set up {sum(map(len, pods.values()))} pods in {time.perf_counter() - t_setup:.0f} s"
        )

        env = {"KUBECONFIG": str(cp.function_kubeconfig)}
        server = Served(env, workdir / "function-big.log", name="function-big")
        noop = Served({}, workdir / "noop-sink.log", name="noop-sink", source=NOOP_SOURCE)
        adapters = []
        try:
            server.start()
            noop.start()
            for name, namespace, sink in (
                ("big", ns_big, server),
                ("fn", ns_fn, server),
                ("noop", ns_noop, noop),
            ):
                adapters.append(
                    ReceiveAdapter(
                        cp.kubeconfig("source"),
                        source_config([namespace]),
                        sink.url,
                        sink_timeout=60,
                        log=sys.stderr,
                        workdir=workdir / f"adapter-{name}",
                    ).start()
                )
            warm = server.post(b.ping(now()), timeout=60)  # the kubernetes client loaded, as in service
            if warm.status_code != 200:
                raise RuntimeError(f"warm-up sweep answered {warm.status_code}: {warm.text[:300]}")

            # Figure 10 first: the bursts leave the 1,024 pods of ns_fn running for 8b.
            sinks = {
                "function": (server, ns_fn, pods[burst_fn["metadata"]["uid"]]),
                "noop": (noop, ns_noop, pods[burst_noop["metadata"]["uid"]]),
            }
            rows.append(_events_per_second(raw, sinks, rounds))

            # Figure 8a: 8-worker jobs before and after the 512-worker one, one at a time.
            wait_quiet(server)
            small_times: list[float] = []
            half = len(smalls) // 2
            for job in smalls[:half]:
                time.sleep(SPACING)
                small_times.append(_cleanup(raw, admin, server, ns_big, job, pods[job["metadata"]["uid"]]))
            wait_quiet(server)
            time.sleep(BURST / QPS)  # the client's bucket full again
            big_pods = pods[big["metadata"]["uid"]]
            measured = _timed_big_cleanup(cp, raw, admin, server, adapters[0], ns_big, big, big_pods)
            say(f"figure 8a: 512-worker job cleaned in {measured['seconds']:.2f} s; CPU {measured['cpu']}")
            wait_quiet(server)
            floor = _optional(
                "the Go floor (512 pods)",
                lambda: floor_cleanup(
                    cp, raw, admin, ns_floor, floor_job, pods[floor_job["metadata"]["uid"]]
                ),
            )
            if floor:
                say(
                    f"figure 8a: Go floor cleaned 512 pods in {floor['seconds']:.2f} s; {floor['result']}; "
                    f"CPU {floor['cpu']}"
                )
            bare_client = _bare_cleanup(cp, raw, admin, ns_bare, bare, pods[bare["metadata"]["uid"]])
            say(
                f"figure 8a: Python bare client cleaned 512 pods in {bare_client['seconds']:.2f} s; "
                f"CPU {bare_client['cpu']}"
            )
            time.sleep(BURST / QPS)
            for job in smalls[half:]:
                time.sleep(SPACING)
                small_times.append(_cleanup(raw, admin, server, ns_big, job, pods[job["metadata"]["uid"]]))
            wait_quiet(server)
            big_events, big_results = _events_for(server, "big-512")

            # Figure 8b: the 1,024-worker job, after the bucket refilled.
            time.sleep(BURST / QPS)
            huge_pods = pods[burst_fn["metadata"]["uid"]]
            huge = _cleanup(raw, admin, server, ns_fn, burst_fn, huge_pods, timeout=120)
            wait_quiet(server)
            huge_events, huge_results = _events_for(server, "burst-1024")
            say(f"figure 8b: 1,024-worker job cleaned in {huge:.2f} s")
            function_peak = server.peak_memory_mb()
            huge_floor = _optional(
                "the Go floor (1,024 pods)",
                lambda: floor_cleanup(
                    cp, raw, admin, ns_floor_huge, floor_huge_job, pods[floor_huge_job["metadata"]["uid"]]
                ),
            )
            if huge_floor:
                say(f"figure 8b: Go floor cleaned 1,024 pods in {huge_floor['seconds']:.2f} s")
        finally:
            for adapter in adapters:
                adapter.stop()
            server.stop()
            noop.stop()
            for namespace in (ns_big, ns_fn, ns_noop, ns_bare, ns_floor, ns_floor_huge):
                raw.delete_namespace(namespace)
            admin.close()

    small = statistics.median(small_times)
    rows += _cleanup_rows(
        measured,
        floor,
        bare_client,
        small,
        small_times,
        big_events,
        big_results,
        len(big_pods),
        huge,
        huge_floor,
        huge_events,
        huge_results,
    )
    rows[-1].notes.append(
        f"the function's serving worker peaked at {function_peak['worker_peak']:.0f} MB over figures 8 and 10."
    )
    return rows


FLOOR_GOAL = 1.25  # podsweeper's wall time / the floor's
CPU_GOAL_MS = 0.5  # the function's CPU per DELETE


def _per_delete_ms(seconds: float, deletes: int) -> str:
    return f"{seconds / deletes * 1e3:.2f} ms"


def _cleanup_rows(
    measured,
    floor,
    bare_client,
    small,
    small_times,
    big_events,
    big_results,
    deletes,
    huge,
    huge_floor,
    huge_events,
    huge_results,
) -> list[Row]:
    big = measured["seconds"]
    one_event = len(big_events) == 1 and not big_results.get("deferred")
    events = f"deleted by {len(big_events)} event(s), {big_results.get('deferred', 0)} deferred"
    if floor:
        floor_s = floor["seconds"]
        result = floor["result"]
        a = Row(
            "8a",
            "finished job with 512 running workers -> last worker gone, through Knative's adapter "
            "(job status write -> last pod DELETED seen by a watch)",
            f"{big:.2f} s; {events}",
            f"floor: client-go making the same calls (GET, LIST, 512 DELETE 16 at once, QPS {QPS:.0f} / burst "
            f"{BURST}), no adapter: {floor_s:.2f} s",
            f"{big / floor_s:.2f}x the floor",
            f"<= {FLOOR_GOAL}x the floor, one event",
            big / floor_s <= FLOOR_GOAL and one_event,
        )
        floor_note = (
            f"Floor (bench/floor/, client-go's REST client with JSON, HTTP/1.1 keep-alive, as the "
            f"function's user, in a namespace no adapter watches): listed {result['listed']}, deleted "
            f"{result['deleted']}, {result['not_found']} 404, {result['conflict']} 409 in {result['seconds']:.2f} s "
            f"of its own; CPU " + ", ".join(f"{k} {v:.2f} s" for k, v in floor["cpu"].items()) + ". "
        )
    else:
        a = Row(
            "8a",
            "finished job with 512 running workers -> last worker gone, through Knative's adapter "
            "(job status write -> last pod DELETED seen by a watch)",
            f"{big:.2f} s; {events}",
            "floor (client-go): not measured",
            "-",
            f"<= {FLOOR_GOAL}x the floor, one event",
            None,
        )
        floor_note = "The Go floor failed (see the run's output). "
    cpu = measured["cpu"]
    wall = measured["wall"]
    share = ", ".join(f"{name} {sec:.2f} s ({sec / wall:.2f} cores)" for name, sec in cpu.items())
    bare_s = bare_client["seconds"]
    a.notes.append(
        f"cleanPodPolicy None, so podsweeper acts at once (no operator grace). CPU time during the {wall:.2f} s "
        f"of the 512-worker cleanup (/proc/<pid>/stat): {share}; total {sum(cpu.values()):.2f} s on 2 cores "
        f"({sum(cpu.values()) / wall:.2f} cores busy). "
        + floor_note
        + f"Second reference, as in earlier runs: a bare in-process Python client (the kubernetes client as the "
        f"function configures it) making the same calls took {bare_s:.2f} s"
        + (f" ({bare_s / floor['seconds']:.2f}x the Go floor)" if floor else "")
        + ", CPU "
        + ", ".join(f"{k} {v:.2f} s" for k, v in bare_client["cpu"].items())
        + f"; podsweeper {big / bare_s:.2f}x it. 8-worker jobs through the same stack and namespace, "
        f"{SPACING} s apart, half before and half after the big one: {small * 1e3:.0f} ms (median of "
        f"{len(small_times)}; {min(small_times) * 1e3:.0f}-{max(small_times) * 1e3:.0f}); the 512-worker job "
        f"took {big / small:.1f}x that (the baseline before the floor; target was <= 6x). "
        "See 'What bounds the 512-worker time' below."
    )
    huge_ok = len(huge_events) == 1 and not huge_results.get("deferred")
    huge_events_text = f"deleted by {len(huge_events)} event(s), {huge_results.get('deferred', 0)} deferred"
    if huge_floor:
        b_row = Row(
            "8b",
            "finished job with 1,024 running workers -> last worker gone, through the adapter",
            f"{huge:.2f} s; {huge_events_text}",
            f"floor (client-go) on 1,024 pods: {huge_floor['seconds']:.2f} s; 512 workers (8a) {big:.2f} s",
            f"{huge / huge_floor['seconds']:.2f}x the floor; {huge / big:.2f}x the 512-worker time",
            f"<= {FLOOR_GOAL}x the floor, cleaned by its own event",
            huge / huge_floor["seconds"] <= FLOOR_GOAL and huge_ok,
        )
    else:
        b_row = Row(
            "8b",
            "finished job with 1,024 running workers -> last worker gone, through the adapter",
            f"{huge:.2f} s; {huge_events_text}",
            f"512 workers (8a): {big:.2f} s; floor on 1,024 pods not measured",
            f"{huge / big:.2f}x the 512-worker time, {huge / small:.0f}x the 8-worker time",
            "cleaned by its own event",
            huge_ok,
        )
    b_row.notes.append(
        "1,024 deletes + GET + 3 LIST pages + 1 Event exceed the client's burst (600): the rest go at "
        f"{QPS:.0f}/s, so about {(1024 + 5 - BURST) / QPS:.1f} s of this is the client-side rate limit by design; "
        "the floor runs under the same limit (its own bucket, full at the start)."
    )
    function_ms = cpu["function"] / deletes * 1e3
    d = Row(
        "8d",
        f"CPU per DELETE during the 512-worker cleanup (CPU over status write -> last pod gone / {deletes})",
        f"function {function_ms:.2f} ms",
        f"kube-apiserver {_per_delete_ms(cpu['kube-apiserver'], deletes)}"
        + (
            f" (during the floor's run {_per_delete_ms(floor['cpu']['kube-apiserver'], deletes)}); "
            f"floor client {_per_delete_ms(floor['cpu']['floor (client-go)'], deletes)}"
            if floor
            else ""
        )
        + f"; Python bare client {_per_delete_ms(bare_client['cpu']['Python bare client + watch (this process)'], deletes)}",
        f"function {cpu['function'] / cpu['kube-apiserver']:.2f}x kube-apiserver's",
        f"<= {CPU_GOAL_MS} ms function CPU per DELETE",
        function_ms <= CPU_GOAL_MS,
    )
    d.notes.append(
        "The function's CPU (its serving processes, /proc/<pid>/stat) covers everything it did meanwhile: the "
        "job's event and its calls, and the adapter's events about the pods being deleted, which arrive while "
        "it deletes. kube-apiserver's covers every request and watch it served meanwhile (the adapter's and this "
        "benchmark's watches included). The floor's is its own getrusage over its calls; the Python bare "
        "client's includes this process's watch thread."
    )
    requests_ = measured["requests"]
    codes = Counter()
    for (_verb, _res, code), n in requests_.items():
        codes[code] += n
    function_calls = Counter(
        {
            (verb, res): n
            for (verb, res, _code), n in requests_.items()
            if res in ("pods", "pytorchjobs", "events") and verb in ("GET", "LIST", "DELETE", "POST")
        }
    )
    total = sum(function_calls.values())
    busiest = _busiest_second(measured["stamps"])
    throttled = sum(n for (_v, _r, code), n in requests_.items() if code == "429")
    envelope = busiest <= BURST + QPS
    c = Row(
        "8c",
        "API server load during the 512-worker cleanup (function at its defaults: QPS 100, burst 600)",
        f"{total} requests by the function in {big:.2f} s ({total / big:.0f}/s average; busiest second "
        f"{busiest} DELETEs); 429 answers: {throttled}",
        f"client-side limit: {QPS:.0f}/s sustained after a burst of {BURST} "
        f"(<= {BURST + QPS:.0f} in any second)",
        f"busiest second {busiest / (BURST + QPS):.2f} of the limit's envelope; {total / big / QPS:.1f}x "
        f"the sustained QPS on average",
        "within the client's QPS/burst; no 429",
        envelope and throttled == 0,
    )
    c.notes.append(
        "from kube-apiserver's apiserver_request_total before and after (codes over every request the API "
        f"server served meanwhile: {', '.join(f'{k} {v}' for k, v in sorted(codes.items()))}); the function's "
        f"own: {', '.join(f'{v} {r} {n}' for (v, r), n in sorted(function_calls.items()))}. "
        "The average is above 100/s because the 512 deletes fit in the client's burst (600 tokens): "
        "PODSWEEPER_KUBE_API_QPS bounds the sustained rate, PODSWEEPER_KUBE_API_BURST what a single "
        "event may send at once. The busiest second is from the watch's DELETED times."
    )
    return [a, b_row, c, d]


# -- figure 9 ---------------------------------------------------------------------------------


def sweep_figure(
    workdir: Path,
    pods: int = 50_000,
    jobs: int = 5_000,
    max_ticks: int = 60,
    figures=("9a", "9b"),
    tick_share: float = 0.3,
) -> list[Row]:
    """`tick_share`: the goal for the longest tick, as a share of the time bound (the issue's:
    0.3 at 50,000 pods; at 200,000, within the bound, resumed without starving)."""
    from tests.support.controlplane.launcher import ControlPlane

    per_job = pods // jobs
    named = max(1, jobs // 100)
    say(f"figure 9: starting a control plane for {pods:,} pods / {jobs:,} jobs")
    with ControlPlane(log=sys.stderr) as cp:
        raw = RawApi(cp, threads=16)
        namespace, idle_ns = raw.namespace("bench-sweep"), raw.namespace("bench-idle")
        try:
            t0 = time.perf_counter()
            replicas = {"Master": 1, "Worker": per_job - 1}
            created = raw.many(lambda i: raw.create_job(namespace, f"train-{i:05d}", replicas), range(jobs))
            finished = created[:: jobs // named][:named]  # the others never wrote a status: running
            t_jobs = time.perf_counter() - t0
            bodies = [
                json.dumps(for_create(b.pod(job, rtype, index, node=None))).encode()
                for job in created
                for rtype, count in replicas.items()
                for index in range(count)
            ]
            path = f"/api/v1/namespaces/{namespace}/pods"
            t1 = time.perf_counter()
            for start in range(0, len(bodies), 5000):
                raw.many(lambda body: raw.request("POST", path, body), bodies[start : start + 5000])
                say(f"figure 9: {min(start + 5000, len(bodies)):,} pods created")
            t_pods = time.perf_counter() - t1
            del bodies
            raw.many(
                lambda j: raw.job_conditions(
                    j, [("Created", now()), ("Running", now()), ("Succeeded", now())]
                ),
                finished,
            )
            count = _count_pods(raw, namespace)
            say(
                f"figure 9: {count:,} pods in {t_pods:.0f} s ({count / t_pods:.0f}/s), {jobs:,} jobs in "
                f"{t_jobs:.0f} s; {named} finished"
            )
            return _sweep_ticks(
                cp,
                workdir,
                namespace,
                idle_ns,
                count,
                jobs,
                named,
                per_job,
                max_ticks,
                t_pods,
                figures,
                tick_share,
            )
        finally:
            raw.delete_namespace(namespace)
            raw.delete_namespace(idle_ns)


def _count_pods(raw: RawApi, namespace: str) -> int:
    total, token = 0, ""
    while True:
        page = raw.ok(
            "GET",
            f"/api/v1/namespaces/{namespace}/pods?limit=5000" + (f"&continue={token}" if token else ""),
        )
        total += len(page["items"])
        token = page["metadata"].get("continue")
        if not token:
            return total


LISTED = re.compile(r"listed (\d+) training pod")


def _sweep_ticks(
    cp, workdir, namespace, idle_ns, pods, jobs, named, per_job, max_ticks, t_pods, figures, tick_share
) -> list[Row]:
    """PingSource ticks back to back until every named pod is gone and a whole round of the
    sweep (one listing of everything) has found nothing more to delete."""
    from bench.apiserver import request_counts, response_bytes

    env = {"KUBECONFIG": str(cp.function_kubeconfig)}
    server = Served({**env, "PODSWEEPER_NAMESPACES": namespace}, workdir / "function-sweep.log", name="sweep")
    idle = Served({**env, "PODSWEEPER_NAMESPACES": idle_ns}, workdir / "function-idle.log", name="idle")
    ticks: list[dict] = []
    try:
        server.start()
        idle.start()
        fresh = server.peak_memory_mb()["worker_peak"]
        answer = idle.post(b.ping(now()), timeout=60)
        if answer.status_code != 200:
            raise RuntimeError(f"idle instance's sweep answered {answer.status_code}: {answer.text[:300]}")
        idle_peak = idle.peak_memory_mb()["worker_peak"]
        timeout = float(Settings.model_fields["event_timeout_seconds"].default)  # served with defaults
        deleted, quiet_rounds = 0, 0
        for tick in range(1, max_ticks + 1):
            before, bytes_before = request_counts(cp), response_bytes(cp)
            started = time.perf_counter()
            response = server.post(b.ping(now(), event_id=f"tick-{tick}-{time.time_ns()}"), timeout=330)
            seconds = time.perf_counter() - started
            time.sleep(0.5)
            after, bytes_after = request_counts(cp), response_bytes(cp)
            delta = Counter({k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)})
            read = sum(bytes_after.values()) - sum(bytes_before.values())
            try:
                summary = response.json()
            except ValueError:
                summary = {"body": response.text[:300]}
            listed = LISTED.search(summary.get("note", ""))
            deleted += int(summary.get("deleted", 0))
            ticks.append(
                {
                    "status": response.status_code,
                    "seconds": seconds,
                    "summary": summary,
                    "requests": delta,
                    "bytes": read,
                    "listed": int(listed.group(1)) if listed else None,
                    "round_done": summary.get("sweep") == "done",
                }
            )
            say(
                f"figure 9: tick {tick}: {response.status_code} in {seconds:.2f} s, {summary}, "
                f"{sum(delta.values())} API requests, {read / 1e6:.1f} MB read"
            )
            if deleted >= named * per_job and ticks[-1]["round_done"]:
                quiet_rounds += not summary.get("deleted")
                if quiet_rounds:
                    break
            if response.status_code >= 500 and tick >= 3 and deleted == 0:
                break  # no progress: stop and report why
        peak = server.peak_memory_mb()["worker_peak"]
    finally:
        server.stop()
        idle.stop()
    return _sweep_rows(
        ticks,
        pods,
        jobs,
        named,
        per_job,
        deleted,
        peak,
        idle_peak,
        fresh,
        timeout,
        t_pods,
        figures,
        tick_share,
    )


def _sweep_rows(
    ticks,
    pods,
    jobs,
    named,
    per_job,
    deleted,
    peak,
    idle_peak,
    fresh,
    timeout,
    t_pods,
    figures=("9a", "9b"),
    tick_share=0.3,
) -> list[Row]:
    target = named * per_job
    done_at = None
    running = 0
    for n, t in enumerate(ticks, 1):
        running += int(t["summary"].get("deleted", 0))
        if running >= target and done_at is None:
            done_at = n
    seconds = [t["seconds"] for t in ticks]
    per_tick = [sum(t["requests"].values()) for t in ticks]
    lists = [t["requests"].get(("LIST", "pods"), 0) for t in ticks]
    read = [t["bytes"] for t in ticks]
    listed = [t["listed"] for t in ticks if t["listed"] is not None]
    rounds = sum(1 for t in ticks if t["round_done"])
    statuses = Counter(t["status"] for t in ticks)
    share = max(seconds) / timeout
    longest = seconds.index(max(seconds)) + 1
    later = max(seconds[1:], default=0.0) / timeout  # the first tick also loads the API client
    a = Row(
        figures[0],
        f"backstop sweep over {pods:,} training pods / {jobs:,} PyTorchJobs in one namespace, {named} jobs "
        f"({target} pods) finished with pods running",
        (
            f"all {target} pods deleted after {done_at} tick(s)"
            if done_at
            else f"{deleted} of {target} deleted"
        )
        + f"; {len(ticks)} ticks of {min(seconds):.1f}-{max(seconds):.1f} s (median "
        f"{statistics.median(seconds):.1f} s), {rounds} round(s) of listing complete; per tick "
        f"{statistics.median(listed) if listed else 0:,.0f} pods listed, "
        f"{statistics.median(read) / 1e6:.1f} MB read, {statistics.median(per_tick):.0f} API requests (medians); "
        f"answers {dict(statuses)}",
        f"PODSWEEPER_EVENT_TIMEOUT_SECONDS {timeout:.0f} s; delete cap per sweep 100 -> at least "
        f"{-(-target // 100)} ticks for {target} deletes",
        f"longest tick {share:.2f} of the time bound (tick {longest}); slowest tick after the first "
        f"{later:.2f}",
        (
            f"each tick <= {tick_share:g} of its time bound; all named pods deleted"
            if tick_share < 1
            else "each tick within its time bound (resumed, not starved); all named pods deleted"
        ),
        bool(done_at) and share <= tick_share and all(t["status"] == 200 for t in ticks),
    )
    a.notes.append(
        f"per tick: API requests (kube-apiserver's apiserver_request_total, pods/events/pytorchjobs) "
        f"{', '.join(str(n) for n in per_tick)}; pod LIST pages {', '.join(str(n) for n in lists)} "
        f"(500 pods a page); MB read (apiserver_response_sizes_sum) "
        f"{', '.join(f'{n / 1e6:.1f}' for n in read)}; pods listed {', '.join(str(n) for n in listed)}; last "
        f"tick's requests: {', '.join(f'{v} {r} {n}' for (v, r), n in sorted(ticks[-1]['requests'].items()))}. "
        f"Pods created directly through the API by 16 concurrent raw HTTPS writers in {t_pods:.0f} s "
        f"({pods / t_pods:.0f}/s), Pending, no kubelet; the namespace is deleted and the control plane "
        "(etcd data included) removed afterwards. Ticks are POSTed back to back (a PingSource ticks every "
        "minute) until every named pod is gone and a whole round has found nothing more."
    )
    notes = [t["summary"].get("note", "") for t in ticks if t["summary"].get("note")]
    if notes:
        a.notes.append(f"the sweep's notes, first and last: {notes[0]!r}; {notes[-1]!r}")
    b_row = Row(
        figures[1],
        f"peak RSS (VmHWM) of the serving worker across the sweeps over {pods:,} pods",
        f"{peak:.0f} MB",
        f"idle instance (one sweep of an empty namespace: kubernetes client loaded): {idle_peak:.0f} MB; "
        f"before its first event {fresh:.0f} MB",
        f"{peak / idle_peak:.2f}x idle",
        "<= 1.5x idle",
        peak <= 1.5 * idle_peak,
    )
    return [a, b_row]


def run_all(workdir: Path, quick: bool = False, cleanup: bool = True, sweep: bool = True) -> list[Row]:
    """Figures 8 and 10 (`cleanup`, one control plane) and figure 9 (`sweep`, its own)."""
    rows: list[Row] = []
    try:
        if cleanup:
            rows += cleanup_figures(workdir, small_jobs=6 if quick else 8, rounds=2 if quick else 3)
    except Exception as error:  # noqa: BLE001 - figure 9 stands without 8 and 10
        import traceback

        traceback.print_exc()
        rows.append(
            Row(
                "8-10",
                "big jobs through the adapter",
                "not measured",
                "-",
                "-",
                "",
                None,
                [f"failed: {error!r}"[:300]],
            )
        )
    if sweep:
        pods, jobs = (5_000, 500) if quick else (50_000, 5_000)
        rows += sweep_figure(workdir, pods, jobs)
        if not quick:  # the same shape at four times the size: a round of many ticks
            rows += sweep_figure(
                workdir, 200_000, 20_000, max_ticks=240, figures=("9c", "9d"), tick_share=1.0
            )
    return rows
