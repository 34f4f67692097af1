"""Decisions out as CloudEvents and policy per namespace, on the real world: the training
operator v1.9.4, the garbage collector, the scheduler and kwok GPU nodes, through Knative's real
receive adapter to the served function (functions-framework under gunicorn, which forks its
worker after the app, and so the notifier, is built), sending to a sink this test serves
(tests/support/sink.py). Knative's Broker is not run here: K_SINK is set as a SinkBinding
sets it (docs/notifications.md).

The function runs with the global setting dry-run and PODSWEEPER_NAMESPACE_LIVE_ALLOWED=true;
the examples/pytorchjob-seed.yaml job (master succeeds, three workers crash-loop) runs in
(a) a namespace annotated podsweeper.dev/mode: live, (b) one left at the global dry-run, at
once, then (c) in another live namespace of a second instance whose sink is down.
"""

from __future__ import annotations

import secrets
import socket
import sys
import time
from pathlib import Path

import pytest
import requests
import yaml

from tests.support import figures
from tests.support.sink import CloudEventSink, assert_valid
from tests.support.stack.users import KINDS, condition

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "examples" / "pytorchjob-seed.yaml"
GROUP, VERSION, PLURAL = "kubeflow.org", "v1", KINDS["PyTorchJob"][0]
MODE = "podsweeper.dev/mode"
GLOBAL_DRY_RUN = {"PODSWEEPER_DRY_RUN": "true", "PODSWEEPER_NAMESPACE_LIVE_ALLOWED": "true"}
UP_BOUND = 5.0  # s from Succeeded seen to the last worker gone (the seed test's bound is 1 s)
DOWN_LATER_BOUND = 2.0  # s the last worker may go later with the sink down than up
MEASURED: dict[str, float] = {}  # test a's time, for test c to compare with


def say(text: str) -> None:
    print(f"\nnotifications: {text}", file=sys.stderr, flush=True)


class Seed:
    """The seed job in one namespace, watched by polling every 50 ms: when Succeeded was first
    seen, and each worker's uid and when it was seen gone."""

    def __init__(self, api, namespace: str):
        from kubernetes import client

        self.core, self.custom, self.namespace = (
            client.CoreV1Api(api),
            client.CustomObjectsApi(api),
            namespace,
        )
        (job,) = [d for d in yaml.safe_load_all(SEED.read_text()) if d]
        self.job = self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, job)
        self.name = self.job["metadata"]["name"]
        self.succeeded: float | None = None
        self.workers: dict[str, dict] = {}  # uid -> {"name", "gone"}

    def poll(self) -> None:
        job = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name)
        pods = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"training.kubeflow.org/job-name={self.name}"
        ).items
        now = time.time()
        if self.succeeded is None and condition(job, "Succeeded"):
            self.succeeded = now
        live = set()
        for pod in pods:
            if "-worker-" in pod.metadata.name:
                live.add(pod.metadata.uid)
                self.workers.setdefault(pod.metadata.uid, {"name": pod.metadata.name, "gone": None})
        for uid, worker in self.workers.items():
            if worker["gone"] is None and uid not in live:
                worker["gone"] = now

    def worker_names(self) -> set[str]:
        return {w["name"] for w in self.workers.values()}

    def all_gone(self) -> bool:
        return len(self.workers) == 3 and all(w["gone"] for w in self.workers.values())

    def last_gone_after_succeeded(self) -> float:
        assert self.succeeded is not None
        return max(w["gone"] for w in self.workers.values()) - self.succeeded


def poll_until(seeds: list[Seed], done, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for seed in seeds:
            seed.poll()
        if done():
            return
        time.sleep(0.05)
    pytest.fail(f"not done after {timeout:.0f}s: " + "; ".join(f"{s.namespace}: {s.workers}" for s in seeds))


def notifications(function, outcome: str) -> float:
    text = requests.get(f"{function.url}/metrics", timeout=5).text
    prefix = f'podsweeper_notifications_total{{outcome="{outcome}"}} '
    return sum(float(line[len(prefix) :]) for line in text.splitlines() if line.startswith(prefix))


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released): a sink that is down."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def admin(real_world):
    api = real_world.control_plane.api_client("admin")
    yield api
    api.close()


@pytest.fixture
def namespaces(admin):
    """`make(annotations) -> name`: namespaces made before the function reads them (its policy
    cache would otherwise keep the first reading for 30 s), deleted at the end."""
    from kubernetes import client

    core, made = client.CoreV1Api(admin), []

    def make(annotations: dict[str, str] | None = None) -> str:
        name = f"n-{secrets.token_hex(4)}"
        core.create_namespace({"metadata": {"name": name, "annotations": annotations or {}}})
        made.append(name)
        return name

    yield make
    for name in made:
        core.delete_namespace(name)


def test_a_b_live_namespace_cleaned_and_told_global_dry_run_namespace_only_dry_run_told(
    real_world, admin, namespaces
):
    from tests.support.stack import Stack

    live, dry = namespaces({MODE: "live"}), namespaces()
    with CloudEventSink() as sink:
        env = {**GLOBAL_DRY_RUN, "K_SINK": sink.url}
        with Stack(real_world.control_plane, [live, dry], world=real_world, function_env=env):
            in_live, in_dry = Seed(admin, live), Seed(admin, dry)
            poll_until([in_live, in_dry], lambda: in_live.all_gone() and in_dry.succeeded is not None)
            took = in_live.last_gone_after_succeeded()
            MEASURED["up"] = took
            say(f"live namespace: last worker gone {took:.3f}s after Succeeded was seen (sink up)")
            assert figures.within(
                "notifications: s from Succeeded seen to the last worker gone, sink up", took, "<=", UP_BOUND
            )

            def told(namespace: str) -> list:
                return [e for e in sink.events if e.attributes.get("namespace") == namespace]

            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not (
                {
                    o["name"]
                    for e in told(live)
                    if e.attributes["type"] == "dev.podsweeper.pods.cleaned"
                    for o in e.data["objects"]
                }
                >= in_live.worker_names()
                # Wait for the claim (b) checks, not any dry-run event: a crash-loop dry-run
                # about a worker can come first (the landing run of stop 48 stopped there).
                and {
                    o["name"]
                    for e in told(dry)
                    if e.attributes["type"] == "dev.podsweeper.decision.dryrun"
                    and e.data.get("rule") == "finished-job-active-pod"
                    for o in e.data["objects"]
                }
                >= in_dry.worker_names()
                and len(in_dry.workers) == 3
            ):
                sink.wait_for(len(sink.events) + 1, 1)
                in_dry.poll()
            in_dry.poll()
            assert_valid(sink.events)

            # (a) the live namespace: every worker in a pods.cleaned event, with its evidence (one
            # event per pass: a delete that met a changed pod (409) goes on the next event's pass).
            cleaned = [e for e in told(live) if e.attributes["type"] == "dev.podsweeper.pods.cleaned"]
            for each in cleaned:
                assert each.attributes["subject"] == f"{live}/{in_live.name}"
                assert each.data["mode"] == "live" and each.attributes["mode"] == "live"
                assert each.data["settings"]["mode"] == {
                    "value": "live",
                    "from": f"namespace annotation {MODE}",
                }
                assert each.data["rule"] == "finished-job-active-pod"
                assert each.data["job"]["uid"] == in_live.job["metadata"]["uid"]
                assert each.data["gpus"] == len(each.data["objects"])
            objects = [o for each in cleaned for o in each.data["objects"]]
            assert sorted(o["name"] for o in objects) == sorted(in_live.worker_names()), objects
            for item in objects:
                assert item["result"] == "deleted" and item["gpus"] == 1
                assert [(c["name"], c["exitCode"]) for c in item["containers"]] == [("pytorch", 1)], item
            assert not [e for e in told(live) if e.attributes["mode"] != "live"]

            # (b) the namespace left at the global dry-run: nothing deleted, only dry-run told.
            assert len(in_dry.workers) == 3 and not any(w["gone"] for w in in_dry.workers.values())
            dry_told = told(dry)
            assert {e.attributes["type"] for e in dry_told} == {"dev.podsweeper.decision.dryrun"}, [
                e.attributes for e in dry_told
            ]
            would = [e for e in dry_told if e.data["rule"] == "finished-job-active-pod"]
            assert would and {o["name"] for e in would for o in e.data["objects"]} == in_dry.worker_names()
            assert all(o["result"] == "dry-run" for e in would for o in e.data["objects"])
            assert all(e.data["settings"]["mode"] == {"value": "dry-run", "from": "global"} for e in would)
            say(
                f"CloudEvents received: {sorted((e.attributes['namespace'] == live, e.attributes['type']) for e in sink.events)}"
            )


def test_c_a_sink_that_is_down_delays_no_delete_and_the_loss_is_counted(real_world, admin, namespaces):
    from tests.support.stack import Stack

    if "up" not in MEASURED:
        pytest.fail("test a measures the time with the sink up; run the module, not test c alone")
    live = namespaces({MODE: "live"})
    env = {**GLOBAL_DRY_RUN, "K_SINK": f"http://127.0.0.1:{closed_port()}"}
    with Stack(real_world.control_plane, [live], world=real_world, function_env=env) as stack:
        seed = Seed(admin, live)
        poll_until([seed], seed.all_gone)
        took = seed.last_gone_after_succeeded()
        later = took - MEASURED["up"]
        say(f"sink down: last worker gone {took:.3f}s after Succeeded was seen ({later:+.3f}s against up)")
        assert figures.within(
            "notifications: s the last worker went later with the sink down than up",
            later,
            "<=",
            DOWN_LATER_BOUND,
        )
        # The sender tries PODSWEEPER_NOTIFY_ATTEMPTS (4) times with back-off, then counts the loss.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and notifications(stack.function, "failed") < 1:
            time.sleep(0.2)
        lost = notifications(stack.function, "failed")
        assert figures.within("notifications: CloudEvents counted lost with the sink down", lost, ">=", 1)
        assert notifications(stack.function, "sent") == 0
        assert [d for d in stack.function.decisions() if d.get("result") == "deleted"], (
            "the deletes were logged"
        )
