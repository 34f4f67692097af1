"""Figures 3 and 4 on the real control plane (tests/support/controlplane: etcd + kube-apiserver).

The function is served by the production command as the ServiceAccount user RBAC binds
(`cp.function_kubeconfig`). tests/support/k8s.py's Operator plays the training
operator and the kubelet with the admin client.

Figure 3 counts the API requests the function makes, from kube-apiserver's own
`apiserver_request_total` (read from /metrics as admin) before and after each batch of
events of one class, with nothing else writing in between; pods, events and the training
kinds are counted (the API server's own lease traffic is not the function's).

Figure 4 times "job status written -> last pod gone" per job, from a raw watch on the
namespace's pods: without the adapter the benchmark POSTs the job's event itself (as the
adapter would), with the adapter Knative's receive adapter (tests/support/adapter/launcher.py)
watches the namespace and sends it. The baseline is the same API work done by a bare
in-process client (GET job, LIST pods, DELETE each with its uid precondition): the floor
of any cleanup that reads fresh state, without podsweeper's HTTP hop and server.
"""

from __future__ import annotations

import json
import re
import secrets
import statistics
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import requests

from bench import loadgen
from bench.report import Row, say
from tests.fixtures import builders as b
from tests.support.harness.served import Served

TRACKED = {"pods", "events", *b.PLURALS.values()}
REPLICAS = {"Master": 1, "Worker": 7}
# Pause between measured jobs: kube-apiserver serves a consistent LIST from its watch cache
# once the cache has caught up with etcd; on an otherwise idle control plane, LISTs that
# follow writes back to back wait for its next progress tick (up to ~100 ms) instead.
SPACING = 0.3
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def now() -> datetime:
    return datetime.now(UTC)


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


class Poster:
    """Sends ApiServerSource-style CloudEvents (binary mode) to the function, keep-alive."""

    def __init__(self, server: Served):
        self.server = server
        self.conn = loadgen.Connection(server.port)

    def post(self, raw_event: dict) -> dict:
        status, body = self.conn.request(loadgen.binary_request(self.server.port, raw_event))
        if status != 200:
            raise RuntimeError(f"function answered {status}: {body[:300]!r}\n{self.server.tail()}")
        return json.loads(body) if body else {}  # empty: set aside by triage (no decision)


def _client(kubeconfig: Path):
    """An ApiClient configured the way the function configures its own (podsweeper.cluster.kube).

    Not tests' `cp.api_client()`: that client re-reads its kubeconfig to refresh the token
    on every request, which costs ~1.5 ms of CPU per call and would slow the baseline.
    """
    from podsweeper.cluster.kube import load_api_client

    return load_api_client(str(kubeconfig))


def _make_namespace(admin, prefix: str) -> str:
    from kubernetes import client

    name = f"{prefix}-{secrets.token_hex(3)}"
    client.CoreV1Api(admin).create_namespace({"metadata": {"name": name}})
    return name


def _setup_job(
    op, name: str, *, backoff_limit: int | None = 3, policy: str = "All", pods: bool = True
) -> dict:
    """Create a job and its 8 running pods; returns the objects and the events they caused."""
    events = []
    job = op.create_job(
        "PyTorchJob", name, clean_pod_policy=policy, backoff_limit=backoff_limit, replicas=REPLICAS
    )
    events.append(b.event("add", job, now()))
    created = []
    if pods:
        for rtype, count in REPLICAS.items():
            for index in range(count):
                pod = op.create_pod(job, rtype, index, phase="Pending")
                events.append(b.event("add", pod, now()))
                created.append(pod)
        running = []
        for pod in created:
            updated = op.set_pod_status(pod, "Running", [b.container_status(at=now())])
            events.append(b.event("update", updated, now()))
            running.append(updated)
        created = running
        job = op.set_job_conditions(job, [("Created", now()), ("Running", now())])
        events.append(b.event("update", job, now()))
    return {"job": job, "pods": created, "events": events}


def _finish_leader(op, entry: dict) -> dict:
    """The master's container exits 0: the kubelet writes Succeeded. Returns its event."""
    leader = entry["pods"][0]
    done = op.set_pod_status(
        leader, "Succeeded", [b.container_status(state="terminated", exit_code=0, at=now())]
    )
    entry["pods"][0] = done
    return b.event("update", done, now())


def _succeed(op, entry: dict) -> dict:
    job = entry["job"]
    return op.set_job_conditions(job, [("Created", now()), ("Running", now()), ("Succeeded", now())])


def _parallel(fn, items, workers: int = 4) -> list:
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(fn, items))


# -- figure 3 -------------------------------------------------------------------------------------


def _delta(cp, action) -> tuple[Counter, object]:
    before = request_counts(cp)
    result = action()
    time.sleep(0.5)  # let the API server finish recording the last request's metric
    after = request_counts(cp)
    delta = Counter({k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)})
    return delta, result


def _fmt(counts: Counter, per: int) -> str:
    if not counts:
        return "none"
    return ", ".join(f"{verb} {res} {n / per:.2f}" for (verb, res), n in sorted(counts.items()))


def api_cost(cp, admin, server: Served, jobs: int = 30, no_limit_jobs: int = 10) -> list[Row]:
    from tests.support.k8s import Operator

    namespace = _make_namespace(admin, "bench-cost")
    op = Operator(admin, namespace)
    poster = Poster(server)
    say(f"figure 3: creating {jobs} jobs x 8 pods (+{no_limit_jobs} without backoffLimit) in {namespace}")
    entries = _parallel(lambda i: _setup_job(op, f"churn-{i:03d}"), range(jobs))
    bare = _parallel(
        lambda i: _setup_job(op, f"nolimit-{i:03d}", backoff_limit=None, pods=False), range(no_limit_jobs)
    )
    quiet = [e for entry in entries for e in entry["events"]]
    quiet += _parallel(lambda entry: _finish_leader(op, entry), entries)
    finished = _parallel(lambda entry: _succeed(op, entry), entries)

    quiet_delta, _ = _delta(cp, lambda: [poster.post(e) for e in quiet])

    def timed_posts(events):
        out = []
        for event in events:
            t0 = time.perf_counter()
            poster.post(event)
            out.append(time.perf_counter() - t0)
        return out

    # The first events needing the API since the server started: the first one pays for
    # importing and configuring the kubernetes client (lazily, see function/service.py).
    warn_delta, warn_times = _delta(cp, lambda: timed_posts([e["events"][0] for e in bare]))
    done_delta, done_answers = _delta(
        cp, lambda: [poster.post(b.event("update", job, now())) for job in finished]
    )
    deleted = sum(a.get("deleted", 0) for a in done_answers)
    gone_events = [b.event("delete", pod, now()) for entry in entries for pod in entry["pods"]]
    gone_delta, _ = _delta(cp, lambda: [poster.post(e) for e in gone_events])
    quiet_total = quiet_delta + gone_delta
    n_quiet = len(quiet) + len(gone_events)

    pods_per_job = sum(REPLICAS.values())
    expected_done = Counter(
        {
            ("GET", "pytorchjobs"): jobs,
            ("LIST", "pods"): jobs,
            ("DELETE", "pods"): jobs * pods_per_job,
            ("POST", "events"): jobs,
        }
    )
    expected_warn = Counter({("GET", "pytorchjobs"): no_limit_jobs, ("POST", "events"): no_limit_jobs})
    say(f"figure 3: no-action {dict(quiet_total)}, finished {dict(done_delta)}, warn {dict(warn_delta)}")
    rows = [
        Row(
            "3a",
            f"API requests per no-action event ({n_quiet} events: job add/update, pod add/update/delete)",
            f"{sum(quiet_total.values()) / n_quiet:.2f} ({_fmt(quiet_total, n_quiet)})",
            "contract: 0",
            f"{sum(quiet_total.values())} requests in all",
            "0",
            not quiet_total,
        ),
        Row(
            "3b",
            f"API requests per finished-job event ({jobs} PyTorchJobs, cleanPodPolicy All, 8 pods each)",
            _fmt(done_delta, jobs),
            f"contract: {_fmt(expected_done, jobs)}",
            f"{sum(done_delta.values()) / sum(expected_done.values()):.2f} of contract",
            "1 GET + 1 LIST + 1 DELETE/pod + 1 Event",
            done_delta == expected_done and deleted == jobs * pods_per_job,
        ),
        Row(
            "3c",
            f"API requests per new job without backoffLimit ({no_limit_jobs} jobs: no-backoff-limit warning)",
            _fmt(warn_delta, no_limit_jobs),
            f"contract: {_fmt(expected_warn, no_limit_jobs)}",
            f"{sum(warn_delta.values()) / max(1, sum(expected_warn.values())):.2f} of contract",
            "1 GET + 1 Event",
            warn_delta == expected_warn,
        ),
    ]
    rows[2].notes.append(
        f"these are the server's first events needing the API: the very first took {warn_times[0] * 1e3:.0f} ms "
        f"(it imports and configures the kubernetes client on first use), the next ones "
        f"{statistics.median(warn_times[1:]) * 1e3:.0f} ms (median)."
    )
    rows[0].notes.append(
        "counted from kube-apiserver's apiserver_request_total (verb, resource) before and after each batch, "
        "with no other client active; each LIST is one page (limit 500). Events are POSTed by the "
        "benchmark, each built from the object the API returned for the write that caused it. "
        "Figures 3 and 4 serve the function with PODSWEEPER_OPERATOR_GRACE_SECONDS=0: their jobs use "
        "cleanPodPolicy All and no operator runs here, so the finished-job path is measured at once "
        "(by default podsweeper leaves such pods to the operator for 30 s)."
    )
    lists = done_delta.get(("LIST", "pods"), 0) / jobs
    if lists == 2:
        rows[1].notes.append(
            "the second LIST per pass is the pre-v1.6 label selector (group-name=kubeflow.org,job-name=<job>), "
            "added so legacy-labelled pods are found too: a label selector cannot OR two label sets. "
            "Suggested: LIST by the legacy labels only when the v1.6+ LIST finds no pod (one operator labels "
            "all of a job's pods alike), which brings the common case back to the contract's one LIST."
        )
    if deleted != jobs * pods_per_job:
        rows[1].notes.append(f"the function reported {deleted} deletes, expected {jobs * pods_per_job}")
    return rows


# -- figure 4 -------------------------------------------------------------------------------------


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


def _bare_cleanup(function_api, namespace: str, name: str) -> None:
    """The floor: the reads and deletes the contract requires, from an in-process client."""
    from kubernetes import client

    core, custom = client.CoreV1Api(function_api), client.CustomObjectsApi(function_api)
    json.loads(
        custom.get_namespaced_custom_object(
            "kubeflow.org", "v1", namespace, "pytorchjobs", name, _preload_content=False
        ).data
    )
    listing = json.loads(
        core.list_namespaced_pod(
            namespace,
            label_selector=f"training.kubeflow.org/job-name={name}",
            limit=500,
            _preload_content=False,
        ).data
    )
    for pod in listing["items"]:
        body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=pod["metadata"]["uid"]))
        # Reading the answer returns the connection to the pool (else the next call opens a new one).
        _ = core.delete_namespaced_pod(
            pod["metadata"]["name"], namespace, body=body, _preload_content=False
        ).data


def _list_freshness(op, entry: dict, function_api, namespace: str, samples: int = 5) -> tuple[float, float]:
    """Median ms of a job's pod LIST right after a write to the job: with the writes 0.3 s
    apart, and back to back."""
    from kubernetes import client

    core = client.CoreV1Api(function_api)
    name = entry["job"]["metadata"]["name"]

    def write_then_list() -> float:
        op.custom.patch_namespaced_custom_object(
            "kubeflow.org",
            "v1",
            namespace,
            "pytorchjobs",
            name,
            {"metadata": {"annotations": {"bench.podsweeper.dev/probe": str(time.time_ns())}}},
        )
        t0 = time.perf_counter()
        _ = core.list_namespaced_pod(
            namespace,
            label_selector=f"training.kubeflow.org/job-name={name}",
            limit=500,
            _preload_content=False,
        ).data
        return (time.perf_counter() - t0) * 1e3

    spaced, packed = [], []
    for _ in range(samples):
        time.sleep(SPACING)
        spaced.append(write_then_list())
    write_then_list()
    for _ in range(samples):
        packed.append(write_then_list())
    return statistics.median(spaced), statistics.median(packed)


def _percentiles(samples: list[float]) -> tuple[float, float]:
    data = sorted(samples)
    p = lambda q: data[min(len(data) - 1, int(round(q / 100 * (len(data) - 1))))]  # noqa: E731
    return p(50), p(99)


def latency(cp, admin, server: Served, jobs: int = 50, workdir: Path | None = None) -> list[Row]:
    from tests.support.k8s import Operator

    namespace = _make_namespace(admin, "bench-lat")
    op = Operator(admin, namespace)
    function_api = _client(cp.function_kubeconfig)
    say(f"figure 4: creating {2 * jobs} jobs x 8 pods in {namespace}")
    entries = _parallel(lambda i: _setup_job(op, f"lat-{i:03d}"), range(2 * jobs + 1))
    probe = entries.pop()
    _parallel(lambda entry: _finish_leader(op, entry), entries)
    spaced_ms, packed_ms = _list_freshness(op, probe, function_api, namespace)
    watch = PodWatch(admin, namespace)
    poster = Poster(server)
    samples: dict[str, list[float]] = {"function": [], "bare": []}
    try:
        for n, entry in enumerate(entries):
            variant = "function" if n % 2 == 0 else "bare"
            names = [p["metadata"]["name"] for p in entry["pods"]]
            time.sleep(SPACING)
            t0 = time.perf_counter()
            job = _succeed(op, entry)
            if variant == "function":
                answer = poster.post(b.event("update", job, now()))
                if answer.get("deleted") != len(names):
                    raise RuntimeError(f"function deleted {answer} of {len(names)} pods")
            else:
                _bare_cleanup(function_api, namespace, job["metadata"]["name"])
            last = watch.wait_gone(names)
            if last is None:
                raise RuntimeError(f"pods of {job['metadata']['name']} not gone: {watch.error!r}")
            samples[variant].append(last - t0)
    finally:
        watch.close()
        function_api.close()
    fn50, fn99 = _percentiles(samples["function"])
    bare50, bare99 = _percentiles(samples["bare"])
    say(
        f"figure 4: without adapter p50 {fn50 * 1e3:.0f} ms p99 {fn99 * 1e3:.0f} ms; "
        f"bare client p50 {bare50 * 1e3:.0f} ms p99 {bare99 * 1e3:.0f} ms"
    )
    rows = [
        Row(
            "4a",
            f"cleanup latency, job status written -> last of 8 pods gone, without adapter "
            f"(benchmark POSTs the event), {jobs} jobs",
            f"p50 {fn50 * 1e3:.0f} ms, p99 {fn99 * 1e3:.0f} ms",
            f"bare in-process client making the same calls (GET, LIST, 8 DELETE) right after the status "
            f"write: p50 {bare50 * 1e3:.0f} ms, p99 {bare99 * 1e3:.0f} ms",
            f"p50 {fn50 / bare50:.2f}x, p99 {fn99 / bare99:.2f}x bare client",
            "",
            None,
        )
    ]
    rows[0].notes.append(
        "both include writing the job status (PATCH /status) and the watch delivering the last DELETED; "
        f"jobs alternate between the two variants; p99 of {jobs} samples is their maximum but one at most. "
        f"Jobs finish {SPACING} s apart. kube-apiserver answers a consistent LIST (no resourceVersion) from its "
        "watch cache once the cache has caught up with etcd; measured here, a job's pod LIST right after a write "
        f"to the job takes {spaced_ms:.0f} ms when writes are {SPACING} s apart but {packed_ms:.0f} ms when they "
        "come back to back (medians of 5): on an otherwise idle control plane the cache then waits for its next "
        "progress tick. A busy cluster's pod cache sees events all the time."
    )
    what = f"cleanup latency with Knative's ApiServerSource receive adapter in the path, {jobs} jobs"
    try:
        rows.append(_with_adapter(cp, admin, server, jobs, bare50, bare99, workdir, what))
    except Exception as error:  # noqa: BLE001 - the rest of the figures stand without it
        import traceback

        traceback.print_exc()
        rows.append(
            Row(
                "4b",
                what,
                "not measured",
                "-",
                "-",
                "",
                None,
                [f"the adapter run failed: {type(error).__name__}: {str(error).splitlines()[0][:300]}"],
            )
        )
    return rows


def _with_adapter(
    cp, admin, server: Served, jobs: int, bare50: float, bare99: float, workdir: Path | None, what: str
) -> Row:
    from tests.support.adapter.launcher import ReceiveAdapter, install_source_rbac, source_config
    from tests.support.controlplane.build import RECEIVE_ADAPTER, ensure_built
    from tests.support.k8s import Operator

    ensure_built(RECEIVE_ADAPTER, log=sys.stderr)  # cached by version outside the clone

    install_source_rbac(admin)
    namespace = _make_namespace(admin, "bench-adapter")
    op = Operator(admin, namespace)
    adapter = ReceiveAdapter(
        cp.kubeconfig("source"), source_config([namespace]), server.url, log=sys.stderr, workdir=workdir
    )
    samples: list[float] = []
    with adapter:
        say(f"figure 4: adapter watching {namespace}; creating {jobs} jobs x 8 pods")
        entries = _parallel(lambda i: _setup_job(op, f"ad-{i:03d}"), range(jobs))
        _parallel(lambda entry: _finish_leader(op, entry), entries)
        _wait_quiet(server)
        watch = PodWatch(admin, namespace)
        try:
            for entry in entries:
                names = [p["metadata"]["name"] for p in entry["pods"]]
                time.sleep(SPACING)
                t0 = time.perf_counter()
                _succeed(op, entry)
                last = watch.wait_gone(names)
                if last is None:
                    raise RuntimeError(f"pods not gone through the adapter: {adapter.tail()}")
                samples.append(last - t0)
        finally:
            watch.close()
    p50, p99 = _percentiles(samples)
    say(f"figure 4: with adapter p50 {p50 * 1e3:.0f} ms p99 {p99 * 1e3:.0f} ms")
    row = Row(
        "4b",
        what,
        f"p50 {p50 * 1e3:.0f} ms, p99 {p99 * 1e3:.0f} ms",
        f"bare in-process client (4a): p50 {bare50 * 1e3:.0f} ms, p99 {bare99 * 1e3:.0f} ms",
        f"p50 {p50 / bare50:.2f}x, p99 {p99 / bare99:.2f}x bare client",
        "",
        None,
    )
    row.notes.append(
        "the adapter runs the shipped ApiServerSource (rendered from knative/, Resource mode) for the "
        "namespace, as its own ServiceAccount; the clock starts before the job's status write."
    )
    return row


def _function_events_total(server: Served) -> float:
    text = requests.get(f"{server.url}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("podsweeper_events_total{")
    )


def _wait_quiet(server: Served, settle: float = 1.0, timeout: float = 60.0) -> None:
    """Until the adapter has delivered the set-up's events: the function's count stops moving."""
    deadline = time.monotonic() + timeout
    last, since = -1.0, time.monotonic()
    while time.monotonic() < deadline:
        count = _function_events_total(server)
        if count != last:
            last, since = count, time.monotonic()
        elif time.monotonic() - since >= settle:
            return
        time.sleep(0.1)


def run_all(workdir: Path, cost_jobs: int = 30, latency_jobs: int = 50) -> tuple[list[Row], dict | None]:
    from tests.support.controlplane.launcher import ControlPlane

    say("figures 3-4: starting the control plane (binaries are built on first use)")
    with ControlPlane(log=sys.stderr) as cp:
        admin = _client(cp.admin_kubeconfig)
        # Figures 3b and 4 finish cleanPodPolicy All jobs and measure podsweeper deleting their
        # pods at once: no operator here, so no operator grace (PODSWEEPER_OPERATOR_GRACE_SECONDS).
        server = Served(
            {"KUBECONFIG": str(cp.function_kubeconfig), "PODSWEEPER_OPERATOR_GRACE_SECONDS": "0"},
            workdir / "function-cp.log",
            name="function-cp",
        )
        try:
            server.start()
            rows = api_cost(cp, admin, server, cost_jobs)
            rows += latency(cp, admin, server, latency_jobs, workdir)
            memory = server.peak_memory_mb()
        finally:
            server.stop()
            admin.close()
    return rows, memory
