"""When the source misbehaves, and the scope is large: Knative's adapter restarted with 10,000
pods in scope, a storm of events, a watch that expired under a restarted kube-apiserver, the
control plane killed during a sweep over 10,000 pods. Nothing wrong is deleted, nothing named
is left.

One real world for the module (training operator v1.9.4, controller manager, scheduler, kwok)
on a control plane that audits the function's requests (tests/support/audit.py), and a crowd
beside it: 100 running PyTorchJobs with 100 pods each (tests/support/bulk.py), managed
elsewhere (the operator leaves them alone) and unscheduled, so nothing any rule names; each
test's own namespace holds the jobs that matter. The judge is the one of test_disruption.py
(tests/controllers/disruption.py).

What the adapter does with what exists is read from its source (knative.dev/eventing v0.49.2,
pkg/adapter/apiserver/delegate.go): its reflectors' store sends an event for each add, update
and delete a watch delivers, and its Replace, which a (re-)list calls, does nothing. So a
restart or a re-list sends no event for the objects listed, and a change made while no watch
delivered it (the adapter down, a watch that expired) is never sent: the PingSource sweep is
what finds it. These tests hold the real adapter to that, at 10,000 pods.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

import pytest

from podsweeper.ownership import JOB_NAME_LABEL
from tests.controllers.disruption import deletes, finish, job_and_bystander, judged, since, uids
from tests.support import audit, figures
from tests.support.adapter.ping import FAST_SCHEDULE
from tests.support.bulk import RawApi, crowd
from tests.support.harness.waiting import wait_for
from tests.support.stack import observe
from tests.support.stack.users import User

NODES = 3
CROWD_JOBS, CROWD_WORKERS = 100, 100  # 10,000 pods in scope
WORKERS = 16
QUIET = 5.0  # seconds after the adapter's restart in which nothing may be sent
SENT_AFTER_RESTART = 10  # events at most in that window: a re-list sending adds would be 10,000
STORM = 2_000  # pod updates written at once while the adapter watches
BACKSTOP = 40.0  # s from the first tick to the last named pod gone (ticks every 2 s; 10,000 pods listed)
OUTAGE = 3.0  # seconds kube-apiserver (or etcd) stays down
EVENT_BOUND = 10.0  # PODSWEEPER_EVENT_TIMEOUT_SECONDS (the default), plus
ANSWER_SLACK = 2.0  # the time to answer once it is hit
STAGINGS = 3  # attempts at the expired-watch fault (see its test)
BALLAST = "x" * 12_000  # per storm update: the backlog outgrows the sockets' buffers


@dataclass(frozen=True)
class Crowd:
    namespace: str
    jobs: int
    pods: int


@pytest.fixture(scope="module")
def raw(audited_world):
    return RawApi(audited_world.control_plane)


@pytest.fixture(scope="module")
def crowd_namespace(raw) -> Crowd:
    """The module's crowd: 10,000 pods of 100 running jobs that no rule names."""
    started = time.monotonic()
    namespace = raw.namespace("crowd")
    jobs, pods = crowd(raw, namespace, CROWD_JOBS, CROWD_WORKERS)
    print(
        f"crowd: {len(jobs)} jobs, {pods} pods in {namespace} in {time.monotonic() - started:.1f}s",
        flush=True,
    )
    return Crowd(namespace, len(jobs), pods)


def _listed_training_pods(user: User, namespace: str) -> int:
    """How many pods a LIST by the v1 training label finds in `namespace` (the sweep's first
    selector), page by page."""
    count, token = 0, None
    while True:
        response = user.core.list_namespaced_pod(
            namespace,
            label_selector=JOB_NAME_LABEL,
            limit=2000,
            _continue=token,
            _preload_content=False,
        )
        page = json.loads(response.data)
        count += len(page["items"])
        token = page["metadata"].get("continue")
        if not token:
            return count


def _sweep(stack, timeout: float):
    """One backstop sweep POSTed as mtping would send it."""
    return stack.function.post(
        {
            "specversion": "1.0",
            "id": f"sweep-{time.time_ns()}",
            "source": "tests.controllers.test_disruption_source",
            "type": "dev.knative.sources.ping",
            "data": {},
        },
        timeout=timeout,
    )


def _end_the_round(stack, sweeps: int = 10) -> None:
    """Sweep until one says its round is complete, so the next sweep starts a round (at the
    first scope). A round of 10,000 pods takes two or three sweeps (15% of a 10 s bound each)."""
    answers = []
    for _ in range(sweeps):
        response = _sweep(stack, EVENT_BOUND + 20)
        answers.append(response.text[:300])
        assert response.status_code == 200, answers
        if json.loads(response.text)["sweep"] == "done":
            return
    raise AssertionError(f"no round ended within {sweeps} sweeps: {answers}")


def _handling(function) -> tuple[float, float]:
    """(seconds, events) the function spent handling events so far: its own histogram."""
    import requests

    text = requests.get(f"{function.url}/metrics", timeout=5).text
    found = {}
    for line in text.splitlines():
        for suffix in ("_sum", "_count"):
            if line.startswith(f"podsweeper_event_handling_seconds{suffix} "):
                found[suffix] = float(line.split()[1])
    return found.get("_sum", 0.0), found.get("_count", 0.0)


def _handling_all(stack) -> tuple[float, float]:
    """_handling summed over the stack's function instances."""
    each = [_handling(function) for function in stack.functions]
    return sum(s for s, _ in each), sum(c for _, c in each)


def _reflector(stack, plural: str, namespace: str) -> str:
    """The adapter's reflector name for a namespace's collection (as it logs it)."""
    names = [n for n in stack.adapter.expected_reflectors if n.endswith(f"Resource={plural}/{namespace}")]
    assert names, f"the adapter watches no {plural} in {namespace}"
    return names[0]


def test_adapter_restarted_with_10000_pods_in_scope_sends_nothing_for_them(audited_stack, crowd_namespace):
    """The adapter is stopped; a job finishes meanwhile; the adapter starts again over the
    crowd and that namespace. It lists everything and sends nothing for it (no storm, no API
    request by the function), so the finished job's workers stay until the sweep: the first
    PingSource tick's sweep removes them, and nothing else."""
    stack = audited_stack(also=[crowd_namespace.namespace])
    user = User(stack)
    kept, master, workers = job_and_bystander(user, "late", WORKERS)
    stack.stop_adapter()
    stack.function.wait_settled()  # what the adapter sent before it stopped is handled
    finish(user, "late")
    user.wait_condition("late", "Succeeded")
    time.sleep(2.0)  # the operator's last status writes land before the adapter starts again
    handled = stack.function.events_handled()
    restarted = time.time()
    adapter = stack.start_adapter()
    time.sleep(QUIET)
    sent = stack.function.events_handled() - handled
    calls = since(audit.requests(stack.cp.audit_log), restarted)
    in_scope = crowd_namespace.pods + crowd_namespace.jobs + WORKERS + 1 + len(kept) + 2
    print(
        f"adapter restarted over {in_scope} objects: watching after {adapter.started_in:.2f}s; "
        f"{sent:.0f} events in the next {QUIET:.0f}s; function requests {len(calls)}",
        flush=True,
    )
    assert figures.within(
        "source: events sent in 5 s after an adapter restart over 10,000 pods", sent, "<=", SENT_AFTER_RESTART
    ), f"{sent:.0f} events: the adapter re-sent what exists"
    assert not calls, f"the function made API requests with nothing to do: {calls[:5]}"
    assert all(observe.present(user.core, user.namespace, uid) for uid in uids(workers)), (
        "a worker went with no event sent"
    )
    figures.add("source: objects in scope when the adapter restarted", in_scope)

    ticking = time.monotonic()
    stack.start_ping(FAST_SCHEDULE)
    gone = judged(stack, uids(workers), {**uids(kept), **uids(master)}, ticking, BACKSTOP + 30)
    assert figures.within(
        "source: s from the first tick to the last worker the restarted adapter never told of",
        gone,
        "<=",
        BACKSTOP,
    )
    assert not deletes(stack, crowd_namespace.namespace), "the sweep deleted in the crowd"


def test_a_storm_of_pod_events_costs_no_api_request(audited_stack, crowd_namespace, raw):
    """2,000 pods of running jobs change at once (a label each) while the adapter watches: the
    event of every one of those pods reaches a function and is answered 2xx (counted by subject
    at the front of two instances, so no other event can stand in for a lost one), without an
    API request. Printed, not asserted: events/s, the functions' time an event, and the share
    of the storm the adapter spent waiting on the handling."""
    stack = audited_stack(also=[crowd_namespace.namespace], instances=2)
    names = [f"crowd-{j:04d}-worker-{w}" for j in range(STORM // 20) for w in range(20)]
    subjects = {f"/apis/v1/namespaces/{crowd_namespace.namespace}/pods/{name}" for name in names}
    assert stack.spread is not None
    before = _handling_all(stack)
    started, wall = time.time(), time.monotonic()
    path = f"/api/v1/namespaces/{crowd_namespace.namespace}/pods/"
    body = json.dumps({"metadata": {"labels": {"storm": "1"}}}).encode()
    raw.many(lambda name: raw.ok("PATCH", path + name, body, "application/merge-patch+json"), names)
    written = time.monotonic() - wall

    def missing() -> set[str]:
        return subjects - stack.spread.answered_subjects()

    try:
        wait_for(f"an answered event for each of the {STORM} pods", lambda: not missing(), 120, 0.2)
    except pytest.fail.Exception:
        print(f"no event answered for {len(missing())} pods, e.g. {sorted(missing())[:3]}", flush=True)
        raise
    took = time.monotonic() - wall
    after = _handling_all(stack)
    (busy_before, count_before), (busy_after, count_after) = before, after
    calls = since(audit.requests(stack.cp.audit_log), started)
    rate = STORM / took
    share = (busy_after - busy_before) / took
    per_event_ms = 1000 * (busy_after - busy_before) / max(1.0, count_after - count_before)
    print(
        f"storm: {STORM} pod updates written in {written:.1f}s; all handled after {took:.1f}s "
        f"({rate:.0f} events/s); function {per_event_ms:.2f} ms an event, busy {share:.0%} of the time; "
        f"function requests {len(calls)}",
        flush=True,
    )
    assert not calls, f"the storm cost API requests: {calls[:5]}"
    figures.add("source: storm events handled without an API request", STORM)


def test_watch_expired_under_a_restarted_api_server_loses_a_finish_the_sweep_finds(audited_stack, raw):
    """The adapter stalls (SIGSTOP, as a starved pod) while a storm of large job updates and then
    a job's finish are written; kube-apiserver is killed and started again meanwhile. When the
    adapter goes on, its watches resume from versions the new watch cache no longer holds: they
    expire (410) and the adapter lists again, sending nothing for what changed in between. The
    finish never reaches the function; the sweep finds it, and nothing wrong is deleted.

    The fault is staged, not promised: a finish the stalled adapter still delivers (it was
    already in its socket when the server went) is an attempt that staged nothing, and its
    workers, deleted by the live path, are judged with the rest. Another job is then staged,
    up to STAGINGS times; the test fails if none loses its finish."""
    stack = audited_stack()
    user = User(stack)
    jobs, _ = crowd(raw, stack.namespace, 40, 1, pods=False)
    named: dict[str, str] = {}
    kept: dict[str, str] = {}
    for attempt in range(1, STAGINGS + 1):
        lost, job_kept, master, workers = _stage_an_expired_watch(stack, user, raw, jobs, f"gone-{attempt}")
        named.update(uids(workers))
        kept.update({**uids(job_kept), **uids(master)})
        if lost:
            break
    figures.add("source: stagings until an expired watch lost a finish", attempt)
    assert lost, f"the job's finish reached the function in all {STAGINGS} stagings: no watch lost it"
    ticking = time.monotonic()
    stack.start_ping(FAST_SCHEDULE)
    gone = judged(stack, named, kept, ticking, BACKSTOP + 30)
    assert figures.within(
        "source: s from the first tick to the last worker of a finish an expired watch lost",
        gone,
        "<=",
        BACKSTOP,
    )


def _stage_an_expired_watch(
    stack, user: User, raw: RawApi, jobs: list, name: str
) -> tuple[bool, dict, dict, dict]:
    """One staging of the fault for job `name` (see the test): (the finish was lost, the
    bystander's pods, the master, the workers)."""
    kept, master, workers = job_and_bystander(user, name, WORKERS, bystander=f"keep-{name}")
    stack.function.wait_settled()
    adapter = stack.adapter
    reflector = _reflector(stack, "pytorchjobs", stack.namespace)
    listed = adapter.populated()[reflector]
    handled = stack.function.events_handled()
    path = f"/apis/kubeflow.org/v1/namespaces/{stack.namespace}/pytorchjobs/"
    updates = [(job["metadata"]["name"], n) for n in range(40) for job in jobs]

    def storm(update) -> None:
        job, n = update
        patch = {"metadata": {"annotations": {"storm": f"{name}-{n}", "ballast": BALLAST}}}
        raw.ok("PATCH", path + job, json.dumps(patch).encode(), "application/merge-patch+json")

    adapter.pause()
    try:
        raw.many(storm, updates)  # more than the sockets hold: the rest waits in kube-apiserver
        finish(user, name)
        user.wait_condition(name, "Succeeded", timeout=60)
        cp = stack.cp
        cp.kill("kube-apiserver")
        time.sleep(OUTAGE)
        cp.revive("kube-apiserver")
    finally:
        adapter.resume()
    back = time.monotonic()
    wait_for("the adapter's job watch listed again", lambda: adapter.populated()[reflector] > listed, 60, 0.2)
    relisted = time.monotonic() - back
    time.sleep(QUIET)
    received = stack.function.events_handled() - handled
    lost = all(observe.present(user.core, user.namespace, uid) for uid in uids(workers))
    print(
        f"{name}: adapter stalled through a storm of {len(updates)} job updates, the job's finish and a "
        f"kube-apiserver restart: listed again {relisted:.1f}s after it was back; {received:.0f} events "
        f"reached the function; workers all still there: {lost}",
        flush=True,
    )
    if lost:
        figures.add("source: job updates lost to an expired watch", max(0, len(updates) + 1 - int(received)))
    else:  # delivered: the live path deletes its workers; let it finish before the next staging
        observe.wait_gone(user.core, user.namespace, uids(workers), time.monotonic(), timeout=60)
    return lost, kept, master, workers


@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
def test_control_plane_killed_during_a_sweep_over_10000_pods(audited_stack, crowd_namespace, component):
    """Jobs finish while the adapter is down, so only a sweep can find their workers; a sweep over
    them and the crowd is killed under: kube-apiserver (or etcd) goes while it lists. The
    function answers 503 within its bound (or, with etcd gone, 200 for a sweep that only listed
    from kube-apiserver's watch cache and did nothing), never 500; once the component is back the ticks
    remove every named worker and nothing else (nothing in the crowd)."""
    stack = audited_stack(also=[crowd_namespace.namespace])
    user = User(stack)
    kept, master, workers = job_and_bystander(user, "swept", WORKERS)
    assert crowd_namespace.namespace < user.namespace, "the crowd's scope must be listed first"
    # The scenario needs the crowd in the sweep's listing: wait until the API lists it by the
    # sweep's own selector, then end the round the stack's warm-up sweep began. A round goes on
    # where the last sweep stopped, so a sweep after a warm-up that stopped between the two
    # scopes lists only the 21 pods of this namespace and never meets the kill (CI, twice).
    wait_for(
        f"the crowd's {crowd_namespace.pods} pods listed by the training label",
        lambda: _listed_training_pods(user, crowd_namespace.namespace) >= crowd_namespace.pods,
        120,
        2.0,
    )
    _end_the_round(stack)
    stack.stop_adapter()
    finish(user, "swept")
    user.wait_condition("swept", "Succeeded")
    answer: dict = {}

    def sweep() -> None:
        started = time.monotonic()
        response = _sweep(stack, EVENT_BOUND + 20)
        answer.update(
            status=response.status_code, seconds=time.monotonic() - started, text=response.text[:2000]
        )

    thread = threading.Thread(target=sweep)
    thread.start()
    # A round starts with the crowd's 10,000 pods (9,500 listed in 1.5 s in CI): kill it while it lists.
    time.sleep(0.5)
    cp = stack.cp
    cp.kill(component)
    thread.join(EVENT_BOUND + 25)
    time.sleep(max(0.0, OUTAGE - answer.get("seconds", 0.0)))
    cp.revive(component)
    back = time.monotonic()
    print(f"{component} killed mid-sweep; the sweep answered {answer}", flush=True)
    if component == "etcd" and answer.get("status") == 200:
        # Measured (kube-apiserver v1.36.3): with etcd gone the API server still serves the
        # sweep's LIST pages, and the job index, from its watch cache, and a GET that needs
        # etcd hangs instead of failing. So a sweep either ends its listing share before its
        # first pass ("listing") or spends its bound waiting in that pass ("time-bound"); both
        # answer 200, and both must have done nothing.
        done = json.loads(answer["text"])
        assert done["sweep"] in ("listing", "time-bound"), answer
        assert (done["decisions"], done.get("deleted", 0)) == (0, 0), answer
    else:
        assert answer.get("status") == 503, f"with {component} gone the sweep answered {answer}"
    assert figures.within(
        "source: control plane down mid-sweep over 10,000 pods, s to the function's 503",
        answer["seconds"],
        "<=",
        EVENT_BOUND + ANSWER_SLACK,
    )
    stack.start_ping(FAST_SCHEDULE)
    gone = judged(stack, uids(workers), {**uids(kept), **uids(master)}, back, BACKSTOP + 60)
    assert figures.within(
        "source: control plane back after a mid-sweep kill, s to the last named worker gone",
        gone,
        "<=",
        BACKSTOP + 30,
    )
    assert not deletes(stack, crowd_namespace.namespace), "a sweep deleted in the crowd"
    outcomes = stack.function.events_by_outcome()
    assert outcomes.get("error", 0) == 0, f"the function answered 500: {outcomes}"
    print(f"outcomes {outcomes}", flush=True)
