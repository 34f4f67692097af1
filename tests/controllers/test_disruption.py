"""When the cluster misbehaves: the function killed in the middle of its work, kube-apiserver
and etcd killed and restarted. Nothing wrong is deleted, nothing named is left.

One real world for the module (training operator v1.9.4, controller manager, scheduler, kwok
on 6 GPU nodes: room for a 512-worker job) on a control plane that audits the function's
writes (tests/support/audit.py). Each test ends with the same two judgements:

- **nothing deleted that the rules did not name**: every DELETE the API server saw from the
  function, with its uid precondition, against the uids the rules name. The named set is fixed
  by construction: the workers of a finished job (its operator never makes them again), never
  the master that finished it (rule finished-job-active-pod keeps it) nor a running bystander
  job's pods;
- **everything named is gone** within RECOVERY seconds of the fault's end.

A killed function is started again on the same port, as a Deployment or Knative would start a
new pod behind the same Service; Knative's real adapter retries the event it was sending, and
where its retries (about 3 s) run out, the PingSource's backstop sweep (real mtping, ticks
every 2 s) is what is left: that is what a deployment has too.
"""

from __future__ import annotations

import json
import random
import secrets
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.controllers.disruption import deletes, finish, job_and_bystander, judged, uids, wait_deletes
from tests.support import audit, figures
from tests.support.adapter.ping import FAST_SCHEDULE
from tests.support.faultproxy import Rule, kubeconfig_through, proxy_for
from tests.support.harness.waiting import wait_for
from tests.support.stack import Stack
from tests.support.stack.users import FOREVER, User, condition, pytorchjob, replica

WORKERS = 512
NODES = 6  # 110 pods each: the big job, a bystander, room to spare
RECOVERY = 60.0  # seconds from the fault's end to the last named pod gone: asserted (see the docs)
KILL_AFTER = WORKERS // 4  # workers deleted before the fault
SPREAD_WORKERS = 128  # the job whose pass the instances share
OUTAGE = 3.0  # seconds the API server (or etcd) stays down
EVENT_BOUND = 10.0  # PODSWEEPER_EVENT_TIMEOUT_SECONDS (the default): an answer within it, plus
ANSWER_SLACK = 2.0  # the time to answer once the bound is hit
SUSPEND_RBAC = (
    Path(__file__).resolve().parents[2] / "knative" / "overlays" / "crashloop-suspend" / "suspend-rbac.yaml"
)
CRASHING = {"exit-code": "1", "run-for": "1s", "back-off": "1s"}


# -- killed ---------------------------------------------------------------------------------


def test_killed_mid_pass_every_worker_goes_and_nothing_else(audited_stack):
    """SIGKILL the served function while the pass of a finished 512-worker job is deleting;
    a new instance starts on the same Service. The adapter's retry of the job's event (or a
    sweep) finishes the job's workers; the master and the bystander stay."""
    stack = audited_stack(ping_schedule=FAST_SCHEDULE)
    user = User(stack)
    kept, master, workers = job_and_bystander(user, "big", WORKERS)
    finish(user, "big")
    wait_deletes(user, "training.kubeflow.org/job-name=big", KILL_AFTER)
    stack.function.kill()
    before = len([w for w in deletes(stack) if w.code == 200])
    restarted_in = stack.function.restart()
    gone = judged(stack, uids(workers), {**uids(kept), **uids(master)}, time.monotonic(), RECOVERY + 30)
    assert figures.within(
        "disruption: function killed mid-pass, s to the last named pod gone", gone, "<=", RECOVERY
    )
    deleted = Counter(d["event_id"] for d in stack.function.decisions() if d.get("result") == "deleted")
    codes = Counter(w.code for w in deletes(stack))
    print(
        f"killed after {before} deletes; new instance up in {restarted_in:.2f}s; deletes logged "
        f"per event {sorted(deleted.values())}; DELETE answers {dict(codes)}",
        flush=True,
    )
    assert before < WORKERS, "the kill came after the pass: it proves nothing"
    figures.add("disruption: workers deleted by the killed instance before the kill", before)


def _through_proxy(make, world, **kwargs):
    """A stack whose function reaches the API server through the fault proxy (which only
    forwards, but can run a hook as a request arrives): (stack, proxy)."""
    cp = world.control_plane
    proxy = proxy_for(cp).start()
    try:
        kubeconfig = kubeconfig_through(cp, proxy, cp.workdir / f"kubeconfig-proxy-{secrets.token_hex(3)}")
        return make(function_kubeconfig=kubeconfig, **kwargs), proxy
    except BaseException:
        proxy.stop()
        raise


def _kill_on(stack: Stack, proxy, method: str, path: str) -> threading.Event:
    """Kill the function as the next `method` request to `path` reaches the proxy; the proxy
    then forwards it: the request lands with its client dead. Set once the kill is done."""
    done = threading.Event()

    def kill(_method: str, _path: str) -> None:
        stack.function.kill()
        done.set()

    proxy.set_rules(Rule("pass", method=method, path=path, count=1, hook=kill))
    return done


def _restart_when(stack: Stack, done: threading.Event, timeout: float = 60.0) -> float:
    assert done.wait(timeout), f"the hooked request never came\n{stack.function.tail()}"
    return stack.function.restart()


def test_killed_while_writing_the_evidence_store(audited_stack, audited_world):
    """The function is killed as its write of a finished job's evidence ConfigMap reaches the
    API server (the write lands, its writer is gone). The store stays valid JSON, every run
    kept before the kill is still there, none twice; every worker goes."""
    from kubernetes.client.rest import ApiException

    from podsweeper.cluster.kube.records import EVIDENCE_KEY
    from podsweeper.evidence import decode, store_name

    stack, proxy = _through_proxy(audited_stack, audited_world, ping_schedule=FAST_SCHEDULE)
    try:
        user = User(stack)
        user.submit(pytorchjob("ev", {"Master": replica(1, FOREVER), "Worker": replica(8, CRASHING)}))
        workers = {
            n: p
            for n, p in user.wait_made("ev", [f"ev-worker-{i}" for i in range(8)]).items()
            if "worker" in n
        }
        store = store_name("ev")

        def records() -> list[dict]:
            """The store's records; its text must be valid JSON whenever it exists."""
            try:
                found = user.core.read_namespaced_config_map(store, user.namespace, _preload_content=False)
            except ApiException as error:
                if error.status == 404:
                    return []
                raise
            text = (json.loads(found.data).get("data") or {})[EVIDENCE_KEY]
            json.loads(text)  # raises on a torn write
            return decode(text)

        wait_for("evidence of the crash-looping workers kept", lambda: len(records()) >= 8, 60)
        done = _kill_on(stack, proxy, "PUT", rf"/configmaps/{store}$")
        before = records()
        finish(user, "ev")
        restarted_in = _restart_when(stack, done)
        gone = judged(stack, uids(workers), {}, time.monotonic(), RECOVERY + 30)
        assert figures.within(
            "disruption: function killed writing evidence, s to the last named pod gone", gone, "<=", RECOVERY
        )
        stack.function.wait_settled()
        after = records()
        keys = [_run(r) for r in after]
        assert len(keys) == len(set(keys)), f"a run recorded twice: {keys}"
        lost = {_run(r) for r in before} - set(keys)
        assert not lost, f"runs kept before the kill are gone: {lost}"
        sources = sorted({str(r.get("source")) for r in after})
        print(f"new instance up in {restarted_in:.2f}s; {len(after)} records; sources {sources}", flush=True)
        figures.add("disruption: evidence records checked after a kill mid-write", len(after))
    finally:
        proxy.stop()


def _run(record: dict) -> tuple:
    """What identifies one run in the store (evidence.Failure.key)."""
    return tuple(record.get(k) for k in ("pod_uid", "container", "restart_count", "finished_at"))


def test_killed_while_suspending_a_job(audited_stack, audited_world):
    """crash-loop action `suspend`: the function is killed as its PATCH of the job reaches the
    API server. The job is suspended once (the operator then removes its pods), no second
    suspend Event is written, and podsweeper itself deletes nothing."""
    from tests.support.controlplane.manifests import apply_manifest

    env = {"PODSWEEPER_CRASHLOOP_ACTION": "suspend", "PODSWEEPER_CRASHLOOP_RESTARTS": "2"}
    with audited_world.control_plane.api_client("admin") as api:
        apply_manifest(api, SUSPEND_RBAC)  # the opt-in power, as its overlay grants it
    stack, proxy = _through_proxy(audited_stack, audited_world, function_env=env)
    try:
        user = User(stack)
        done = _kill_on(stack, proxy, "PATCH", r"/pytorchjobs/loop$")
        user.submit(pytorchjob("loop", {"Master": replica(1, FOREVER), "Worker": replica(2, CRASHING)}))
        restarted_in = _restart_when(stack, done)
        wait_for("job suspended", lambda: condition(user.job("loop"), "Suspended"), 30)
        wait_for("its pods removed by the operator", lambda: not user.pods("loop"), 30)
        time.sleep(3.0)  # crash loops would have re-suspended by now: a second Event would show
        stack.function.wait_settled()
        events = json.loads(user.core.list_namespaced_event(user.namespace, _preload_content=False).data)[
            "items"
        ]
        suspends = [e for e in events if e.get("reason") == "CrashLoopSuspended"]
        patches = [
            w
            for w in audit.writes(stack.cp.audit_log, namespace=user.namespace)
            if w.resource == "pytorchjobs"
        ]
        assert [w.code for w in patches] == [200], f"the job was patched {patches}"
        assert len(suspends) <= 1, f"suspend Events: {suspends}"
        assert not audit.wrong_deletes(stack.cp.audit_log, user.namespace, {})
        assert not deletes(stack), "podsweeper deleted pods itself"
        print(f"new instance up in {restarted_in:.2f}s; suspend Events {len(suspends)}", flush=True)
        figures.add("disruption: suspend Events lost with the killed instance", 1 - len(suspends))
    finally:
        proxy.stop()


# -- several instances ------------------------------------------------------------------------


def _warning_writes(stack: Stack) -> Counter:
    """(Event name, restart count it records) -> how many times the function wrote it (created
    or patched), for its crash-loop warnings, from the audit log."""
    from podsweeper.cluster.kube.writes import PROGRESS_ANNOTATION

    writes = [
        w for w in audit.writes(stack.cp.audit_log, namespace=stack.namespace) if w.resource == "events"
    ]
    warnings = {
        w.name
        for w in writes
        if w.verb == "create" and (w.body or {}).get("reason") == "CrashLoopWithoutLimit"
    }
    found: Counter = Counter()
    for write in writes:
        if write.name in warnings and write.code in (200, 201) and write.verb in ("create", "patch"):
            progress = (((write.body or {}).get("metadata") or {}).get("annotations") or {}).get(
                PROGRESS_ANNOTATION
            )
            found[(write.name, progress)] += 1
    return found


# Three, not two: with the warning's resourceVersion precondition dropped by hand this failed
# for three instances (58 writes for 55 restart counts) and passed for two, whose events for
# one pod rarely overlap; a case that cannot fail on the regression it names is weight only.
@pytest.mark.parametrize("instances", [3])
def test_instances_one_killed_each_pod_deleted_once_each_warning_once(audited_stack, instances):
    """`instances` function instances behind one front, as a Service spreads a Deployment's pods:
    the adapter's events and the ticks go round-robin. A finished job's workers and three
    crash-looping jobs' warnings are handled across them while one instance, drawn at random, is
    SIGKILLed at a random moment of the pass and started again. Every worker goes, each removed
    once (the audit log's judge); no crash-loop warning is written twice for one restart count."""
    seed = secrets.randbits(32)
    draw = random.Random(seed)
    victim, delay = draw.randrange(instances), draw.uniform(0.0, 1.5)
    print(
        f"instances {instances}: seed {seed}, instance {victim} killed {delay:.2f}s after the finish",
        flush=True,
    )
    env = {"PODSWEEPER_CRASHLOOP_RESTARTS": "2"}
    stack = audited_stack(instances=instances, ping_schedule=FAST_SCHEDULE, function_env=env)
    user = User(stack)
    for index in range(3):
        user.submit(
            pytorchjob(f"loop-{index}", {"Master": replica(1, FOREVER), "Worker": replica(2, CRASHING)})
        )
    kept, master, workers = job_and_bystander(user, "spread", SPREAD_WORKERS)
    loopers = {n: p for i in range(3) for n, p in user.pods(f"loop-{i}").items()}
    finish(user, "spread")
    time.sleep(delay)
    stack.functions[victim].kill()
    time.sleep(1.0)  # gone for a moment: the front answers 502 for it, the senders retry
    stack.functions[victim].restart()
    gone = judged(
        stack, uids(workers), {**uids(kept), **uids(master), **uids(loopers)}, time.monotonic(), RECOVERY + 30
    )
    assert figures.within(
        "disruption: instances spread, one killed, s to the last named pod gone", gone, "<=", RECOVERY
    )
    # The crash loops and the ticks never stop making events: stop the senders, then let the
    # instances finish what they hold, so every warning write is in the audit log when judged.
    stack.stop_ping()
    stack.stop_adapter()
    for function in stack.functions:
        function.wait_settled()
    written = _warning_writes(stack)
    twice = {key: count for key, count in written.items() if count > 1}
    answers = stack.spread.by_status()
    print(
        f"warnings written {sum(written.values())} for {len(written)} restart counts; answers {dict(answers)}",
        flush=True,
    )
    assert written, "no crash-loop warning was written: the scenario proves nothing about them"
    assert not twice, f"a warning written twice for one restart count: {twice}"
    figures.add("disruption: crash-loop warnings judged across instances", sum(written.values()))


# -- the control plane restarted --------------------------------------------------------------


def _probe(stack: Stack, job: dict) -> tuple[int, float, str]:
    """POST the finished job's update event by hand (its pass reads the job and its pods
    fresh): (status, seconds, the answer's text)."""
    from datetime import UTC, datetime

    from tests.fixtures.builders import event

    started = time.monotonic()
    response = stack.function.post(event("update", job, datetime.now(UTC)), timeout=EVENT_BOUND + 20)
    return response.status_code, time.monotonic() - started, response.text[:300]


@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
def test_control_plane_restarted_mid_pass(audited_stack, audited_world, component):
    """kube-apiserver (or etcd) killed while a finished 512-worker job's pass is deleting, back
    after OUTAGE seconds. While it is gone the function answers 503 within its event bound,
    never 500; once it is back everything named goes and nothing else."""
    stack = audited_stack(ping_schedule=FAST_SCHEDULE)
    user = User(stack)
    kept, master, workers = job_and_bystander(user, "big", WORKERS)
    finish(user, "big")
    wait_deletes(user, "training.kubeflow.org/job-name=big", KILL_AFTER)
    job = user.job("big")
    cp = stack.cp
    cp.kill(component)
    down = time.monotonic()
    status, seconds, text = _probe(stack, job)
    time.sleep(max(0.0, OUTAGE - (time.monotonic() - down)))
    cp.revive(component)
    back = time.monotonic()
    print(
        f"{component} down {back - down:.1f}s; probe answered {status} in {seconds:.2f}s: {text}", flush=True
    )
    assert status == 503, f"with {component} gone the function answered {status}"
    gone = judged(stack, uids(workers), {**uids(kept), **uids(master)}, back, RECOVERY + 30)
    if component == "etcd":
        in_time = figures.within(
            "disruption: etcd down, s to the function's 503", seconds, "<=", EVENT_BOUND + ANSWER_SLACK
        )
        recovered = figures.within(
            "disruption: etcd restarted mid-pass, s to the last named pod gone", gone, "<=", RECOVERY
        )
    else:
        in_time = figures.within(
            "disruption: kube-apiserver down, s to the function's 503",
            seconds,
            "<=",
            EVENT_BOUND + ANSWER_SLACK,
        )
        recovered = figures.within(
            "disruption: kube-apiserver restarted mid-pass, s to the last named pod gone",
            gone,
            "<=",
            RECOVERY,
        )
    assert in_time, f"the 503 took {seconds:.2f}s"
    assert recovered, f"the last worker went {gone:.1f}s after {component} was back"
    outcomes = stack.function.events_by_outcome()
    assert outcomes.get("error", 0) == 0, f"the function answered 500: {outcomes}"
    figures.add(
        f"disruption: 503 answers while {component} was down", int(outcomes.get("api_unavailable", 0))
    )
