"""Set-ups that more than one figure measures in: each starts what its figures need, yields it,
and tears it down. The runner (bench/__main__.py) opens a scene once for its figures.

- `function_on_control_plane`: figures 3 and 4 (and 6's second reading): etcd +
  kube-apiserver (the harness's ControlPlane) and the function served by the production
  command as its ServiceAccount user; the harness's Play plays the training
  operator and the kubelet with the admin client (`setup_job`, `finish_leader`, `succeed`).
- `big_jobs`: figures 8 and 10: one control plane, 8-, 512- and 1,024-worker jobs with their
  pods, the function and the no-op each behind Knative's real receive adapter.
"""

from __future__ import annotations

import json
import secrets
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench import loadgen
from bench.cluster import (
    RECEIVE_ADAPTER,
    ControlPlane,
    RawApi,
    ReceiveAdapter,
    ensure_built,
    install_source_rbac,
    source_config,
)
from bench.floor import ensure_floor
from bench.harness import Served
from bench.harness import builders as b
from bench.measure import now
from bench.report import say
from bench.served import NOOP_SOURCE

REPLICAS = {"Master": 1, "Worker": 7}
# Pause between measured jobs: kube-apiserver serves a consistent LIST from its watch cache
# once the cache has caught up with etcd; on an otherwise idle control plane, LISTs that
# follow writes back to back wait for its next progress tick (up to ~100 ms) instead.
SPACING = 0.3


# -- figures 3 and 4 ----------------------------------------------------------------------------


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


def api_client(kubeconfig: Path):
    """An ApiClient configured the way the function configures its own (podsweeper.cluster.kube).

    Not tests' `cp.api_client()`: that client re-reads its kubeconfig to refresh the token
    on every request, which costs ~1.5 ms of CPU per call and would slow the baseline.
    """
    from podsweeper.cluster.kube import load_api_client

    return load_api_client(str(kubeconfig))


def make_namespace(admin, prefix: str) -> str:
    from kubernetes import client

    name = f"{prefix}-{secrets.token_hex(3)}"
    client.CoreV1Api(admin).create_namespace({"metadata": {"name": name}})
    return name


def setup_job(
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


def finish_leader(op, entry: dict) -> dict:
    """The master's container exits 0: the kubelet writes Succeeded. Returns its event."""
    leader = entry["pods"][0]
    done = op.set_pod_status(
        leader, "Succeeded", [b.container_status(state="terminated", exit_code=0, at=now())]
    )
    entry["pods"][0] = done
    return b.event("update", done, now())


def succeed(op, entry: dict) -> dict:
    job = entry["job"]
    return op.set_job_conditions(job, [("Created", now()), ("Running", now()), ("Succeeded", now())])


def parallel(fn, items, workers: int = 4) -> list:
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(fn, items))


@dataclass
class FunctionOnControlPlane:
    cp: ControlPlane
    admin: object  # the admin's ApiClient
    server: Served


@contextmanager
def function_on_control_plane(workdir: Path) -> Iterator[FunctionOnControlPlane]:
    say("figures 3-4: starting the control plane (binaries are built on first use)")
    with ControlPlane(log=sys.stderr) as cp:
        admin = api_client(cp.admin_kubeconfig)
        # Figures 3b and 4 finish cleanPodPolicy All jobs and measure podsweeper deleting their
        # pods at once: no operator here, so no operator grace (PODSWEEPER_OPERATOR_GRACE_SECONDS).
        server = Served(
            {"KUBECONFIG": str(cp.function_kubeconfig), "PODSWEEPER_OPERATOR_GRACE_SECONDS": "0"},
            workdir / "function-cp.log",
            name="function-cp",
        )
        try:
            server.start()
            yield FunctionOnControlPlane(cp, admin, server)
        finally:
            server.stop()
            admin.close()


# -- figures 8 and 10 ---------------------------------------------------------------------------

SMALL = {"Master": 1, "Worker": 7}


@dataclass
class BigJobs:
    cp: ControlPlane
    admin: object
    raw: RawApi
    server: Served  # the function, behind the adapters of ns["big"] and ns["fn"]
    noop: Served  # the no-op, behind the adapter of ns["noop"]
    adapters: list[ReceiveAdapter]  # adapters[0] watches ns["big"]
    ns: dict[str, str]  # big, fn, noop, bare, floor, floor_huge -> namespace
    smalls: list[dict]  # 8-worker jobs in ns["big"]
    jobs: dict[str, dict]  # big, bare, floor, floor_huge, burst_fn, burst_noop -> job
    pods: dict[str, list[str]] = field(default_factory=dict)  # job uid -> its pods' names

    def pods_of(self, job: dict) -> list[str]:
        return self.pods[job["metadata"]["uid"]]


@contextmanager
def big_jobs(workdir: Path, small_jobs: int = 8) -> Iterator[BigJobs]:
    """Every job of figures 8 and 10 created with its pods (running, except the two 1,024-pod
    jobs figure 10 bursts on), the function and the no-op served, three adapters watching."""
    ensure_built(RECEIVE_ADAPTER, log=sys.stderr)
    ensure_floor(log=sys.stderr)  # figure 8's floor, built before the control plane starts
    say("figures 8, 10: starting a control plane")
    with ControlPlane(log=sys.stderr) as cp:
        admin = api_client(cp.admin_kubeconfig)
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
        adapters: list[ReceiveAdapter] = []
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

            yield BigJobs(
                cp,
                admin,
                raw,
                server,
                noop,
                adapters,
                {
                    "big": ns_big,
                    "fn": ns_fn,
                    "noop": ns_noop,
                    "bare": ns_bare,
                    "floor": ns_floor,
                    "floor_huge": ns_floor_huge,
                },
                smalls,
                {
                    "big": big,
                    "bare": bare,
                    "floor": floor_job,
                    "floor_huge": floor_huge_job,
                    "burst_fn": burst_fn,
                    "burst_noop": burst_noop,
                },
                pods,
            )
        finally:
            for adapter in adapters:
                adapter.stop()
            server.stop()
            noop.stop()
            for namespace in (ns_big, ns_fn, ns_noop, ns_bare, ns_floor, ns_floor_huge):
                raw.delete_namespace(namespace)
            admin.close()
