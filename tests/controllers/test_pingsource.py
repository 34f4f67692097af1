"""The backstop sweep ticked by Knative's real PingSource dispatcher, mtping.

mtping (knative.dev/eventing/cmd/mtping, the receive adapter's eventing version) runs the
PingSource we ship, knative/source/pingsource.yaml, with only its schedule made fast
(every 2 seconds instead of 5 minutes); tests/support/adapter/ping.py has the set-up and what it
cannot do (no eventing controller: the test writes the PingSource's Ready status and sinkUri).

- test_mtping_sends_what_the_tests_hand_post: what mtping puts on the wire, caught by a
  recording sink, against the ping the other tests POST by hand (tests/fixtures/builders.ping).
- test_sweep_tick_removes_what_no_event_reports: a leftover the ApiServerSource can never
  report (a worker labelled only the pre-v1.6 way: the shipped pod watch selects
  training.kubeflow.org/job-name, and the finished job's pass lists by that label) is
  removed by the sweep a real tick started; nothing the rules do not name is touched. On
  the real world (tests/support/world: the training operator v1.9.4 runs the jobs, kwok the pods).
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

from tests.fixtures import builders
from tests.support.adapter.ping import (
    FAST_SCHEDULE,
    PING_TYPE,
    PingDispatcher,
    ce_source,
    install_pingsource,
    remove_pingsource,
    shipped_pingsource,
)
from tests.support.harness.waiting import wait_for
from tests.support.stack import observe
from tests.support.stack.users import FOREVER, User, pytorchjob, replica, running

EVENTUALLY = 30.0  # seconds: the only time bound asserted on a removal
SETTLE = 1.5  # seconds: time for a wrong (or a missing) delete to show


# -- what mtping sends ---------------------------------------------------------------------------


class _Recorder(BaseHTTPRequestHandler):
    """A sink that answers 202 and keeps every request: (time.time(), path, headers, body)."""

    seen: list[tuple[float, str, dict[str, str], bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.seen.append((time.time(), self.path, dict(self.headers.items()), body))
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def _rfc3339(text: str) -> datetime:
    """Go's RFC 3339 with nanoseconds (Python's fromisoformat takes microseconds at most)."""
    match = re.fullmatch(r"(.*T\d\d:\d\d:\d\d)(?:\.(\d+))?Z", text)
    assert match, text
    return datetime.fromisoformat(match[1] + "." + (match[2] or "0").ljust(6, "0")[:6] + "+00:00")


def test_mtping_sends_what_the_tests_hand_post(control_plane, admin_api, tmp_path):
    """Two ticks of the shipped PingSource, recorded: binary-mode CloudEvents whose
    attributes and data are those of builders.ping(), the ping the other tests hand-POST."""

    class Recorder(_Recorder):
        seen = []

    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sink = f"http://127.0.0.1:{server.server_port}/"
    try:
        with PingDispatcher(control_plane, workdir=tmp_path) as ping:
            source = install_pingsource(admin_api, sink, FAST_SCHEDULE)
            ping.wait_scheduled(source)
            deadline = time.monotonic() + 20
            while len(Recorder.seen) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            sent = ping.sent()
    finally:
        remove_pingsource(admin_api)
        server.shutdown()
    got = Recorder.seen[:2]
    assert len(got) == 2, f"mtping sent {len(Recorder.seen)} request(s) in 20 s:\n{ping.tail()}"
    for arrived, path, headers, body in got:
        print(f"\nmtping -> sink at {arrived:.3f}: POST {path} {headers} {body!r}")

    expected = builders.ping(datetime.now(UTC))
    ids = set()
    for arrived, path, headers, body in got:
        assert path == "/"
        # Binary content mode: the attributes in Ce-* headers, the data as the body.
        assert headers["Ce-Specversion"] == expected["specversion"] == "1.0"
        assert headers["Ce-Type"] == expected["type"] == PING_TYPE
        assert headers["Ce-Source"] == ce_source(source) == expected["source"]
        assert headers["Content-Type"] == expected["datacontenttype"] == "application/json"
        assert body == b"{}" and expected["data"] == {}
        assert str(uuid.UUID(headers["Ce-Id"])) == headers["Ce-Id"]
        ids.add(headers["Ce-Id"])
        # Ce-Time is when mtping sent it (after its random 0-500 ms spread), not the tick.
        sent_at = _rfc3339(headers["Ce-Time"]).timestamp()
        assert sent_at <= arrived + 0.5, (headers["Ce-Time"], arrived)
        # Nothing else a CloudEvent attribute: Kn-Namespace is a plain header (the source's
        # namespace); no Ce-Subject, no Ce-Dataschema, no extensions.
        extra = {k for k in headers if k.lower().startswith("ce-")} - {
            "Ce-Id",
            "Ce-Source",
            "Ce-Specversion",
            "Ce-Time",
            "Ce-Type",
        }
        assert not extra, extra
        assert headers.get("Kn-Namespace") == source["metadata"]["namespace"]
    assert len(ids) == 2, "each tick has its own id"
    assert {s["id"] for s in sent} >= ids, "its log names every event it sent"
    gap = _rfc3339(got[1][2]["Ce-Time"]).timestamp() - _rfc3339(got[0][2]["Ce-Time"]).timestamp()
    print(f"ticks {gap:.3f} s apart (schedule {FAST_SCHEDULE!r})")
    assert 1.0 < gap < 4.0, gap


# -- the sweep it starts -------------------------------------------------------------------------


def _ping_events(stack) -> dict[str, float]:
    """podsweeper_events_total for the ping type, by outcome (a sweep that finds nothing to
    do is "ignored", one that acted "processed")."""
    text = requests.get(f"{stack.function.url}/metrics", timeout=5).text
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("podsweeper_events_total{") and f'type="{PING_TYPE}"' in line:
            outcome = re.search(r'outcome="([^"]+)"', line)[1]
            counts[outcome] = counts.get(outcome, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


def _legacy_worker(made: dict, name: str, job_name: str, index: int) -> dict:
    """The worker the pre-upgrade operator made: what v1.9.4 made for worker-0 (ownerReference,
    annotations, spec), under its own name and with only the pre-v1.6 labels (no
    training.kubeflow.org/* label); unscheduled, so the scheduler places it."""
    spec = {k: v for k, v in made["spec"].items() if k != "nodeName"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {
                "group-name": "kubeflow.org",
                "job-name": job_name,
                "replica-type": "worker",
                "replica-index": str(index),
            },
            "annotations": made["metadata"].get("annotations") or {},
            "ownerReferences": made["metadata"]["ownerReferences"],
        },
        "spec": spec,
    }


def test_sweep_tick_removes_what_no_event_reports(make_stack, timings):
    """A PyTorchJob whose operator was upgraded mid-job: worker-1 carries only the pre-v1.6
    labels. When the job succeeds with both workers still running, the job's event removes
    worker-0, never worker-1 (the shipped pod watch does not select it, and the job's pass
    lists by the v1.6+ label); the next real PingSource tick does.

    World "real": the training operator v1.9.4 runs the job (master-0 and worker-0, its
    Succeeded), kwok the pods. worker-1 is the one pod the test makes, as the pre-upgrade
    operator made it (controller ownerReference to the job); v1.9.4 lists its pods by the
    v1.6+ labels, so it never sees it (the job declares one worker: a second would clash on
    the name when the upgraded operator re-creates the worker it cannot find)."""
    stack = make_stack(world="real")
    user, namespace = User(stack), stack.namespace
    core = user.core
    master, worker_0, legacy = "upgraded-master-0", "upgraded-worker-0", "upgraded-worker-1"
    # The master ends (exit 0) after 6 s: time to add worker-1 and see it Running first.
    job = user.submit(
        pytorchjob(
            "upgraded",
            {"Master": replica(1, {"exit-code": "0", "run-for": "6s"}), "Worker": replica(1, FOREVER)},
        )
    )
    # What the rules do not name: a job still running, and a pod no training job owns.
    busy = user.submit(pytorchjob("busy", {"Master": replica(1, FOREVER), "Worker": replica(1, FOREVER)}))
    made = user.wait_made("upgraded", [master, worker_0])
    user.create_pod(_legacy_worker(made[worker_0], legacy, "upgraded", 1))
    bystander = {k: v for k, v in made[worker_0]["spec"].items() if k != "nodeName"}
    user.create_pod(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "bystander",
                "annotations": made[worker_0]["metadata"].get("annotations") or {},
            },
            "spec": bystander,
        }
    )
    kept = dict(user.wait_running("busy", 2))
    every = wait_for(  # the master may already have ended: the rest run for good
        "every pod but the master Running",
        lambda: (p := user.pods()) and len(p) == 6 and all(running(p[n]) for n in p if n != master) and p,
    )
    kept["bystander"] = every["bystander"]
    pods = {name: every[name] for name in (master, worker_0, legacy)}
    assert job["metadata"]["uid"] and busy["metadata"]["uid"]

    _, finished = user.wait_condition("upgraded", "Succeeded")

    # The events alone: worker-0 goes, the legacy-labelled worker-1 stays.
    removal = observe.wait_gone(core, namespace, {pods[worker_0]["metadata"]["uid"]: worker_0}, finished)
    assert removal.all_gone, f"the job's event did not remove {worker_0}\n{stack.function.tail()}"
    stack.function.wait_settled()
    time.sleep(SETTLE)
    assert observe.present(core, namespace, pods[legacy]["metadata"]["uid"]), (
        "no ApiServerSource event may reach the legacy-labelled worker"
    )

    # The real PingSource's ticks from now on.
    ticks_from = time.time()
    started = time.monotonic()
    stack.start_ping(FAST_SCHEDULE)
    removal = observe.wait_gone(
        core, namespace, {pods[legacy]["metadata"]["uid"]: legacy}, started, timeout=EVENTUALLY
    )
    timings("pingsource: legacy-labelled worker (from mtping's start)", removal, f"schedule {FAST_SCHEDULE}")
    assert removal.all_gone, f"no tick removed {legacy}:\n{stack.ping.tail()}\n{stack.function.tail()}"

    # Two more whole sweeps, begun after the delete: they find nothing more to do.
    after = time.time()
    stack.wait_sweep(after)
    stack.wait_sweep(time.time())
    stack.stop_ping()  # no more ticks: the counts below hold still
    stack.function.wait_settled()

    delivered = {send["id"]: send for send in stack.ping.delivered(ticks_from)}
    assert not stack.ping.failed_sends(), stack.ping.failed_sends()
    assert len(delivered) >= 3, delivered
    # mtping's sends are what the function counted: the warm-up plus one per delivered tick,
    # each handled (none answered 4xx/5xx).
    counts = _ping_events(stack)
    assert set(counts) <= {"processed", "ignored"}, counts
    assert sum(counts.values()) == 1 + len(stack.ping.delivered()), (counts, stack.ping.delivered())
    assert counts.get("processed", 0) >= 1, counts  # at least the sweep that deleted

    deletes = [d for d in stack.function.decisions() if d.get("action") == "delete"]
    assert sorted(d["name"] for d in deletes) == [worker_0, legacy], deletes
    assert {d["rule"] for d in deletes} == {"finished-job-active-pod"}
    by_name = {d["name"]: d for d in deletes}
    assert by_name[worker_0]["event_id"] not in delivered, "worker-0 went on the job's event"
    tick = delivered.get(by_name[legacy]["event_id"])
    assert tick is not None, (by_name[legacy], sorted(delivered))
    # The event that started that sweep, as mtping logged sending it.
    assert tick["source"] == ce_source(shipped_pingsource())
    assert tick["source"] == "/apis/v1/namespaces/podsweeper/pingsources/podsweeper-sweep"
    assert tick["target"] == stack.function.url
    print(f"\nthe sweep that removed {legacy} was tick {tick}")

    # Nothing the rules do not name: the finished master, the running job, the bystander.
    for name, pod in [(master, pods[master]), *kept.items()]:
        assert observe.present(core, namespace, pod["metadata"]["uid"]), f"{name} must be kept"
    cleaned = [
        e["message"]
        for e in observe.events(core, namespace, reason="PodsCleanedUp", involved_name="upgraded")
    ]
    assert any(f"{legacy} [finished-job-active-pod]" in m for m in cleaned), cleaned
    assert not observe.events(core, namespace, reason="PodsCleanedUp", involved_name="busy")
