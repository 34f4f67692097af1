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
import secrets
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.support import audit, figures
from tests.support.adapter.ping import FAST_SCHEDULE
from tests.support.faultproxy import Rule, kubeconfig_through, proxy_for
from tests.support.harness.waiting import wait_for
from tests.support.stack import Stack, observe
from tests.support.stack.finish import finish_stacks
from tests.support.stack.users import FOREVER, User, condition, pytorchjob, replica

WORKERS = 512
NODES = 6  # 110 pods each: the big job, a bystander, room to spare
RECOVERY = 60.0  # seconds from the fault's end to the last named pod gone: asserted (see the docs)
KILL_AFTER = WORKERS // 4  # workers deleted before the fault
OUTAGE = 3.0  # seconds the API server (or etcd) stays down
EVENT_BOUND = 10.0  # PODSWEEPER_EVENT_TIMEOUT_SECONDS (the default): an answer within it, plus
ANSWER_SLACK = 2.0  # the time to answer once the bound is hit
SUSPEND_RBAC = (
    Path(__file__).resolve().parents[2] / "knative" / "overlays" / "crashloop-suspend" / "suspend-rbac.yaml"
)
CRASHING = {"exit-code": "1", "run-for": "1s", "back-off": "1s"}


@pytest.fixture(scope="module")
def world(receive_adapter):
    from tests.support.controlplane.launcher import ControlPlane
    from tests.support.world.launcher import World

    with ControlPlane(audit=True, log=sys.stderr) as cp, World(cp, nodes=NODES, log=sys.stderr) as w:
        yield w


@pytest.fixture
def make_stack(request, world):
    """`make(**Stack kwargs)`: a stack on the module's world in a namespace of its own."""
    stacks: list[Stack] = []

    def make(**kwargs) -> Stack:
        env = {"PODSWEEPER_ORPHAN_GRACE_SECONDS": "3", **kwargs.pop("function_env", {})}
        stack = Stack(
            world.control_plane, f"d-{secrets.token_hex(4)}", world=world, function_env=env, **kwargs
        )
        stacks.append(stack)
        return stack.start()

    yield make
    failed = any(getattr(getattr(request.node, f"rep_{w}", None), "failed", False) for w in ("setup", "call"))
    finish_stacks(stacks, failed)


# -- the scenario ---------------------------------------------------------------------------


def uids(pods: dict[str, dict]) -> dict[str, str]:
    return {p["metadata"]["uid"]: name for name, p in pods.items()}


def big_job_and_bystander(user: User, name: str = "big") -> tuple[dict, dict, dict]:
    """A running bystander job (1 master, 3 workers: named by nothing) and a job with WORKERS
    workers whose master runs until `finish(...)`: (bystander pods, master pod, worker pods)."""
    user.submit(pytorchjob("keep", {"Master": replica(1, FOREVER), "Worker": replica(3, FOREVER)}))
    user.submit(pytorchjob(name, {"Master": replica(1, FOREVER), "Worker": replica(WORKERS, FOREVER)}))
    kept = user.wait_running("keep", 4, timeout=120)
    # All of them, the master too (CI saw every worker made before it): Running, so the
    # master's end (finish) is what ends the job, and the pass deletes running workers.
    pods = user.wait_running(name, WORKERS + 1, timeout=240)
    master = {f"{name}-master-0": pods.pop(f"{name}-master-0")}
    return kept, master, pods


def finish(user: User, name: str) -> None:
    """End the job's master (exit 0): the operator marks the job Succeeded (kwok's pod-succeed
    stage reads run-for from the pod's annotation)."""
    user.core.patch_namespaced_pod(
        f"{name}-master-0",
        user.namespace,
        {"metadata": {"annotations": {"sim.podsweeper.dev/run-for": "1ms"}}},
    )


def wait_deletes(user: User, selector: str, count: int, timeout: float = 60.0) -> int:
    """Block until `count` pods matching `selector` are being deleted (or gone); returns how many."""
    from kubernetes.watch.watch import iter_resp_lines

    listed = json.loads(
        user.core.list_namespaced_pod(user.namespace, label_selector=selector, _preload_content=False).data
    )
    seen = {p["metadata"]["uid"] for p in listed["items"] if p["metadata"].get("deletionTimestamp")}
    response = user.core.list_namespaced_pod(
        user.namespace,
        label_selector=selector,
        watch=True,
        resource_version=listed["metadata"]["resourceVersion"],
        timeout_seconds=int(timeout),
        _preload_content=False,
    )
    try:
        for line in iter_resp_lines(response):
            change = json.loads(line)
            meta = (change.get("object") or {}).get("metadata") or {}
            if change.get("type") == "DELETED" or meta.get("deletionTimestamp"):
                seen.add(meta.get("uid"))
            if len(seen) >= count:
                return len(seen)
    finally:
        response.close()
    raise AssertionError(f"only {len(seen)} of {count} pods deleted after {timeout:.0f}s")


def judged(stack: Stack, named: dict[str, str], kept: dict[str, str], since: float) -> float:
    """The two judgements; returns the seconds from `since` to the last named pod gone (the
    caller asserts its bound: docs/guarantees.md quotes each figure by its literal name)."""
    core = User(stack).core
    removal = observe.wait_gone(core, stack.namespace, named, since, timeout=RECOVERY + 30)
    wrong = audit.wrong_deletes(stack.cp.audit_log, stack.namespace, named)
    assert not wrong, "deleted what the rules did not name:\n" + "\n".join(wrong)
    assert removal.all_gone, f"named pods left: {removal.remaining()}\n{stack.function.tail()}"
    for uid, name in kept.items():
        assert observe.present(core, stack.namespace, uid), f"{name} (uid {uid}) must be kept"
    figures.add("disruption: function deletes judged from the audit log", len(_deletes(stack)))
    return removal.last_gone


def _deletes(stack: Stack) -> list[audit.Write]:
    return [w for w in audit.writes(stack.cp.audit_log, namespace=stack.namespace) if w.verb == "delete"]


# -- killed ---------------------------------------------------------------------------------


def test_killed_mid_pass_every_worker_goes_and_nothing_else(make_stack):
    """SIGKILL the served function while the pass of a finished 512-worker job is deleting;
    a new instance starts on the same Service. The adapter's retry of the job's event (or a
    sweep) finishes the job's workers; the master and the bystander stay."""
    stack = make_stack(ping_schedule=FAST_SCHEDULE)
    user = User(stack)
    kept, master, workers = big_job_and_bystander(user)
    finish(user, "big")
    wait_deletes(user, "training.kubeflow.org/job-name=big", KILL_AFTER)
    stack.function.kill()
    before = len([w for w in _deletes(stack) if w.code == 200])
    restarted_in = stack.function.restart()
    gone = judged(stack, uids(workers), {**uids(kept), **uids(master)}, time.monotonic())
    assert figures.within(
        "disruption: function killed mid-pass, s to the last named pod gone", gone, "<=", RECOVERY
    )
    deleted = Counter(d["event_id"] for d in stack.function.decisions() if d.get("result") == "deleted")
    codes = Counter(w.code for w in _deletes(stack))
    print(
        f"killed after {before} deletes; new instance up in {restarted_in:.2f}s; deletes logged "
        f"per event {sorted(deleted.values())}; DELETE answers {dict(codes)}",
        flush=True,
    )
    assert before < WORKERS, "the kill came after the pass: it proves nothing"
    figures.add("disruption: workers deleted by the killed instance before the kill", before)


def _through_proxy(make_stack, world, **kwargs):
    """A stack whose function reaches the API server through the fault proxy (which only
    forwards, but can run a hook as a request arrives): (stack, proxy)."""
    cp = world.control_plane
    proxy = proxy_for(cp).start()
    try:
        kubeconfig = kubeconfig_through(cp, proxy, cp.workdir / f"kubeconfig-proxy-{secrets.token_hex(3)}")
        return make_stack(function_kubeconfig=kubeconfig, **kwargs), proxy
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


def test_killed_while_writing_the_evidence_store(make_stack, world):
    """The function is killed as its write of a finished job's evidence ConfigMap reaches the
    API server (the write lands, its writer is gone). The store stays valid JSON, every run
    kept before the kill is still there, none twice; every worker goes."""
    from kubernetes.client.rest import ApiException

    from podsweeper.cluster.kube.records import EVIDENCE_KEY
    from podsweeper.evidence import decode, store_name

    stack, proxy = _through_proxy(make_stack, world, ping_schedule=FAST_SCHEDULE)
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
        gone = judged(stack, uids(workers), {}, time.monotonic())
        assert figures.within(
            "disruption: function killed writing evidence, s to the last named pod gone", gone, "<=", RECOVERY
        )
        stack.function.wait_idle()
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


def test_killed_while_suspending_a_job(make_stack, world):
    """crash-loop action `suspend`: the function is killed as its PATCH of the job reaches the
    API server. The job is suspended once (the operator then removes its pods), no second
    suspend Event is written, and podsweeper itself deletes nothing."""
    from tests.support.controlplane.manifests import apply_manifest

    env = {"PODSWEEPER_CRASHLOOP_ACTION": "suspend", "PODSWEEPER_CRASHLOOP_RESTARTS": "2"}
    with world.control_plane.api_client("admin") as api:
        apply_manifest(api, SUSPEND_RBAC)  # the opt-in power, as its overlay grants it
    stack, proxy = _through_proxy(make_stack, world, function_env=env)
    try:
        user = User(stack)
        done = _kill_on(stack, proxy, "PATCH", r"/pytorchjobs/loop$")
        user.submit(pytorchjob("loop", {"Master": replica(1, FOREVER), "Worker": replica(2, CRASHING)}))
        restarted_in = _restart_when(stack, done)
        wait_for("job suspended", lambda: condition(user.job("loop"), "Suspended"), 30)
        wait_for("its pods removed by the operator", lambda: not user.pods("loop"), 30)
        time.sleep(3.0)  # crash loops would have re-suspended by now: a second Event would show
        stack.function.wait_idle()
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
        assert not _deletes(stack), "podsweeper deleted pods itself"
        print(f"new instance up in {restarted_in:.2f}s; suspend Events {len(suspends)}", flush=True)
        figures.add("disruption: suspend Events lost with the killed instance", 1 - len(suspends))
    finally:
        proxy.stop()


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
def test_control_plane_restarted_mid_pass(make_stack, world, component):
    """kube-apiserver (or etcd) killed while a finished 512-worker job's pass is deleting, back
    after OUTAGE seconds. While it is gone the function answers 503 within its event bound,
    never 500; once it is back everything named goes and nothing else."""
    stack = make_stack(ping_schedule=FAST_SCHEDULE)
    user = User(stack)
    kept, master, workers = big_job_and_bystander(user)
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
    gone = judged(stack, uids(workers), {**uids(kept), **uids(master)}, back)
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
