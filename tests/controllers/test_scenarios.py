"""The seed's experiments and the safety cases, through the real adapter to the real function.

On the real world (tests/support/world, one per module: the training operator v1.9.4 runs the jobs,
the garbage collector and kwok the pods) wherever a real controller can produce the state a
test needs; the user's part is played through tests/support/stack/users.py. Where it cannot (test 2:
an operator whose own cleanup is missing; test 3 Background: no garbage collector), the test
plays the operator and the kubelet itself (tests/support/stack/players.py) and its docstring says why.
The adapter watches, the function decides on fresh state and deletes; the assertions look at
what exists afterwards and at the Events written. Timings from the job's terminal status
(written, or first seen on the real world) to the last pod gone are printed, with only a
generous upper bound asserted ("eventually").
"""

from __future__ import annotations

import json
import re
import time
import uuid
from datetime import UTC, datetime

from podsweeper.tools.record import make_event, rfc3339
from tests.controllers.conftest import ORPHAN_GRACE_SECONDS
from tests.fixtures import builders
from tests.support.harness.waiting import wait_for
from tests.support.stack import observe
from tests.support.stack.players import Play, experiment_1, running
from tests.support.stack.users import FOREVER, User, condition, pytorchjob, replica
from tests.support.stack.users import running as all_running

EVENTUALLY = 30.0  # seconds: the only time bound asserted
GC_ATTEMPTS = 3  # test_3b: runs of its scenario before the collector's race fails it
SCALE = 0.05  # the seed's 34 s before Succeeded become 1.7 s
SETTLE = 1.0  # after the deletes: time for a wrong delete of a kept pod to show


def uids(pods: dict[str, dict], *names: str) -> dict[str, str]:
    return {pods[n]["metadata"]["uid"]: n for n in names}


def workers_of(pods: dict[str, dict]) -> list[str]:
    return sorted(n for n in pods if "-worker-" in n)


OPERATOR_GRACE = 2  # seconds: the operator's own cleanup goes first (docs/rules.md)


def ping_event() -> dict:
    """What Knative's PingSource (knative/source/pingsource.yaml) sends: data "{}".

    POSTed by hand only where a test needs the sweep at one exact moment; where a test is
    about the periodic backstop, the real dispatcher ticks (stack.start_ping(), mtping;
    tests/controllers/test_pingsource.py compares its events with this one)."""
    return {
        "specversion": "1.0",
        "id": str(uuid.uuid4()),
        "source": "/apis/v1/namespaces/podsweeper/pingsources/podsweeper-sweep",
        "type": "dev.knative.sources.ping",
        "time": rfc3339(datetime.now(UTC)),
        "datacontenttype": "application/json",
        "data": {},
    }


PART = re.compile(r"([a-z0-9.-]+) \[([a-z-]+)\](?: \(([^)]*)\))?")


def assert_cleaned_up_event(
    core,
    namespace: str,
    job: dict,
    expected: dict[str, str],
    *,
    uid: str | None | bool = True,
    one: bool = True,
) -> dict:
    """One PodsCleanedUp Event on the job naming exactly these pods; each pod's evidence
    (its containers' exit code, reason, restarts) must match the regex given for it.
    The Event's involvedObject.uid must be the job's (`uid` True), a given one, or any (None).

    `one=False` (the real world): the pods may be named over several Events, since a delete
    comes back conflict when kwok wrote the pod's status between the read and the delete, and
    that pod goes on its next event."""
    deadline = time.monotonic() + 10.0
    while True:
        found = observe.wait_events(
            core,
            namespace,
            reason="PodsCleanedUp",
            involved_name=job["metadata"]["name"],
            involved_uid=job["metadata"]["uid"] if uid is True else uid,
        )
        parts: dict[str, tuple[str, str]] = {}
        for event in found:
            assert event["type"] == "Normal"
            assert event["involvedObject"]["kind"] == job["kind"]
            message = event["message"]
            named = {
                m.group(1): (m.group(2), m.group(3) or "") for m in PART.finditer(message.split(": ", 1)[1])
            }
            # "deleted N pod(s) (G GPU(s) freed, S GPU-seconds held since no longer needed): ..."
            assert re.search(
                rf"deleted {len(named)} pod\(s\)( \(\d+ GPU\(s\) freed, \d+ GPU-seconds[^)]*\))?: ", message
            ), message
            parts.update(named)
        if one or set(parts) >= set(expected) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if one:
        assert len(found) == 1, f"expected one PodsCleanedUp Event, got {[e['message'] for e in found]}"
    assert set(parts) == set(expected), [e["message"] for e in found]
    for name, evidence in expected.items():
        assert re.search(evidence, parts[name][1]), (name, evidence, parts)
    return parts


def _deleted_by_ticks(stack, gone: set[str]) -> None:
    """Every delete was decided in a sweep one of mtping's ticks started. Waited for: the
    function logs a decision once its DELETE has answered, so a poller may see the pod gone
    first (a loaded CI machine did); and mtping logs a send as delivered only once the sweep
    answered, after its deletes were seen."""

    def logged() -> list[dict]:
        return [d for d in stack.function.decisions() if d.get("action") == "delete"]

    wait_for(
        f"the function's delete decisions for {len(gone)} pod(s) logged",
        lambda: {d.get("uid") for d in logged()} >= gone,
        10,
    )
    deletes = logged()

    def delivered() -> bool:
        ticks = {send["id"] for send in stack.ping.delivered()}
        return all(d["event_id"] in ticks for d in deletes)

    wait_for(f"the ticks that decided {[d['name'] for d in deletes]} logged as delivered", delivered, 10)


def _kept(core, namespace: str, pods: dict[str, str]) -> None:
    time.sleep(SETTLE)
    for uid, name in pods.items():
        assert observe.present(core, namespace, uid), f"{name} (uid {uid}) must be kept"


# Seed experiment 2 on the real world, at the seed's shape: the master ends (exit 0) after
# 5 s, the workers crash every second (exit 1), 1 s back-off, OnFailure, no backoffLimit.
SEED_MASTER = {"exit-code": "0", "run-for": "5s"}
SEED_WORKER = {"exit-code": "1", "run-for": "1s", "back-off": "1s"}


def _seed_job(name: str = "pytest") -> dict:
    return pytorchjob(name, {"Master": replica(1, SEED_MASTER), "Worker": replica(3, SEED_WORKER)})


def _seed_experiment_2(make_stack, timings, mode: str, label: str):
    stack = make_stack(world="real", mode=mode)
    user, namespace = User(stack), stack.namespace
    job = user.submit(_seed_job())
    workers = [f"pytest-worker-{i}" for i in range(3)]
    pods = user.wait_made("pytest", ["pytest-master-0", *workers])
    _, finished = user.wait_condition("pytest", "Succeeded")
    removal = observe.wait_gone(user.core, namespace, uids(pods, *workers), finished, timeout=EVENTUALLY)
    timings(label, removal, f"{mode} mode, real world")
    assert removal.all_gone, f"workers left: {removal.remaining()}\n{stack.function.tail()}"
    _kept(user.core, namespace, uids(pods, "pytest-master-0"))
    assert_cleaned_up_event(
        user.core, namespace, job, {w: r"exit code 1\b.*\b\d+ restarts" for w in workers}, one=False
    )
    deletes = [d for d in stack.function.decisions() if d.get("result") == "deleted"]
    assert sorted(d["name"] for d in deletes) == workers
    assert {d["rule"] for d in deletes} == {"finished-job-active-pod"}


def test_1_seed_experiment_2_workers_deleted_master_kept(make_stack, timings):
    """PyTorchJob pytest, no backoffLimit, workers crash-looping, job Succeeded (by its master)."""
    _seed_experiment_2(make_stack, timings, "Resource", "1 seed experiment 2")


def test_2_seed_experiment_1_without_operator_cleanup(make_stack, admin_api, core, namespace, timings):
    """cleanPodPolicy All, job Succeeded, and the operator's own cleanup missing: podsweeper
    leaves the pods to the operator for its grace (2 s here), then the next sweep (the
    PingSource's backstop, ticked by Knative's real mtping every 2 s) removes them all.

    World "players": the real operator v1.9.4 deletes the pods itself 30-100 ms after it
    writes Succeeded (tests/support/world/README.md), so the state "Succeeded under All, cleanup
    missing" (an operator that crashed or lags) cannot be had from it."""
    stack = make_stack(world="players", env={"PODSWEEPER_OPERATOR_GRACE_SECONDS": str(OPERATOR_GRACE)})
    play = Play(admin_api, namespace, scale=SCALE)
    out = experiment_1(play, operator_cleanup=False)
    time.sleep(1.0)
    assert all(observe.present(core, namespace, uid) for uid in uids(out.pods, *out.pods)), (
        "within the operator's grace podsweeper must not race the operator"
    )
    # Ticks only from here: the grace runs from the condition's whole-second time, so a tick
    # before the check above could already be past it.
    stack.start_ping()
    removal = observe.wait_gone(
        core, namespace, uids(out.pods, *out.pods), out.terminal_write, timeout=EVENTUALLY
    )
    timings("2 seed experiment 1, no operator cleanup", removal, "mtping ticks every 2 s")
    assert removal.all_gone, f"pods left: {removal.remaining()}"
    _deleted_by_ticks(stack, set(uids(out.pods, *out.pods)))
    assert_cleaned_up_event(
        core,
        namespace,
        out.job,
        {"pytest-master-0": r"exit code 0\b", **{w: "" for w in workers_of(out.pods)}},
    )


def test_3_orphans_deleted_after_grace_without_a_garbage_collector(
    make_stack, admin_api, core, namespace, timings
):
    """The job deleted (Background) while its pods remain: pods older than the grace go on the
    delete event; one too young goes on the next sweep once it is old enough.

    World "players": the pods keep their ownerReference to the deleted job (a cluster whose
    garbage collector lags or is absent); the real world's garbage collector would remove
    them itself. Orphan propagation, which the real garbage collector does, is test 3b."""
    stack = make_stack(world="players")
    play = Play(admin_api, namespace)
    job = play.submit(
        builders.job(
            "PyTorchJob", "orphaned", namespace, backoff_limit=0, replicas={"Master": 1, "Worker": 2}
        )
    )
    play.job_conditions(job, "Created", "Running")
    old = {}
    for rtype, index in (("Master", 0), ("Worker", 0)):
        pod = play.create_pod(job, rtype, index)
        play.pod_status(pod["metadata"]["name"], "Running", running())
        old[pod["metadata"]["uid"]] = pod["metadata"]["name"]
    time.sleep(ORPHAN_GRACE_SECONDS + 1.2)  # creationTimestamp has whole seconds
    young = play.create_pod(job, "Worker", 1)
    deleted_at = time.monotonic()
    play.delete_job(job, propagation="Background")
    _orphans_then_the_young_one(stack, core, namespace, job, old, young, deleted_at, timings, "Background")


def test_3b_orphans_deleted_after_grace_orphan_propagation(make_stack, timings):
    """`kubectl delete --cascade=orphan` on the real world: the garbage collector strips the
    pods' ownerReferences, then the job goes; the pods are the job's only by their labels.
    The young pod is the operator's own: a worker deleted just before is re-created at once
    (same name, new uid), younger than the grace when the job's delete arrives."""
    stack = make_stack(world="real")
    user, namespace = User(stack), stack.namespace
    for attempt in range(1, GC_ATTEMPTS + 1):
        name = f"orphaned-{attempt}"
        job, old, young, deleted_at = _orphan_with_a_young_pod(user, name)
        if _orphaned_by_the_collector(user, name, young):
            break
        # The garbage collector strips only the ownerReferences of pods its graph already
        # holds: one its informer had not yet seen keeps its reference to the deleted job, and
        # the collector deletes it as a dangling dependent (CI saw it, under load, even 1 s
        # after the pod's creation). Then the scenario did not happen: podsweeper must not
        # have touched that pod; the job's other pods still go; try again with a new job.
        decided = {d.get("uid") for d in stack.function.decisions()}
        assert young["metadata"]["uid"] not in decided, "podsweeper deleted the young pod"
        removal = observe.wait_gone(user.core, namespace, old, deleted_at, timeout=EVENTUALLY)
        assert removal.all_gone, f"orphans left: {removal.remaining()}"
        print(f"3b attempt {attempt}: the collector kept the young pod's reference; again", flush=True)
    else:
        raise AssertionError(f"the collector missed the young pod in all {GC_ATTEMPTS} attempts")
    _orphans_then_the_young_one(stack, user.core, namespace, job, old, young, deleted_at, timings, "Orphan")


def _orphan_with_a_young_pod(user: User, name: str) -> tuple[dict, dict, dict, float]:
    """A running job, one worker re-created just now, then the job deleted with
    propagation Orphan: (job, its old pods uid -> name, the young pod, when it was deleted)."""
    job = user.submit(
        pytorchjob(name, {"Master": replica(1, FOREVER), "Worker": replica(2, FOREVER)}, {"backoffLimit": 0})
    )
    pods = user.wait_running(name, 3)
    newest = max(_created(p) for p in pods.values())
    time.sleep(max(0.0, newest + ORPHAN_GRACE_SECONDS + 1.2 - time.time()))  # whole seconds
    worker = f"{name}-worker-1"
    replaced = pods[worker]["metadata"]["uid"]
    user.core.delete_namespaced_pod(worker, user.namespace)
    young = wait_for(
        f"the operator re-creating {worker}",
        lambda: (p := user.pods(name).get(worker)) and p["metadata"]["uid"] != replaced and p,
        30,
        0.02,
    )
    old = {p["metadata"]["uid"]: n for n, p in pods.items() if n != worker}
    time.sleep(1.0)  # give the collector's informer a moment (under 2.5 s old at the event)
    deleted_at = time.monotonic()
    user.delete_job(name, "Orphan")
    return job, old, young, deleted_at


def _orphaned_by_the_collector(user: User, name: str, young: dict) -> bool:
    """Once the job is gone: did the collector strip the young pod's reference to it?"""
    wait_for(f"job {name} gone", lambda: user.job(name) is None, EVENTUALLY, 0.02)
    pod = user.pods(name).get(young["metadata"]["name"])
    if pod is None or pod["metadata"]["uid"] != young["metadata"]["uid"]:
        return False
    return not pod["metadata"].get("deletionTimestamp") and not pod["metadata"].get("ownerReferences")


def _created(pod: dict) -> float:
    return (
        datetime.strptime(pod["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
        .replace(tzinfo=UTC)
        .timestamp()
    )


def _orphans_then_the_young_one(stack, core, namespace, job, old, young, deleted_at, timings, propagation):
    """After the job's delete: the old pods go on its event, the young one on a later sweep."""
    young_uid = {young["metadata"]["uid"]: young["metadata"]["name"]}
    removal = observe.wait_gone(core, namespace, old, deleted_at, timeout=EVENTUALLY)
    timings(f"3 orphans, {propagation} (from the job's delete)", removal)
    assert removal.all_gone, f"orphans left: {removal.remaining()}"
    assert observe.present(core, namespace, young["metadata"]["uid"]), (
        "a pod younger than the grace must wait"
    )
    assert_cleaned_up_event(
        core,
        namespace,
        job,
        {name: "" for name in old.values()},
        uid=job["metadata"]["uid"] if propagation == "Background" else None,
    )

    time.sleep(ORPHAN_GRACE_SECONDS + 1.0)
    swept_at = time.monotonic()
    # By hand, not by mtping's ticks: a periodic sweep could take the old pods before their
    # delete event does (which this test is about), or the young one before it is checked.
    assert stack.function.post(ping_event()).status_code == 200
    removal = observe.wait_gone(core, namespace, young_uid, swept_at, timeout=EVENTUALLY)
    timings(f"3 orphans, {propagation}: the young one (from the sweep's POST)", removal)
    assert removal.all_gone
    this_job = f"{job['kind']}/{job['metadata']['name']}"  # test_3b may have tried before
    rules = {
        d["name"]: d["rule"]
        for d in stack.function.decisions()
        if d.get("action") == "delete" and d.get("job") == this_job
    }
    assert rules == {name: "orphan" for name in [*old.values(), young["metadata"]["name"]]}


def test_4_pod_recreated_under_the_same_name_is_kept(make_stack, timings):
    """A job resubmitted under the same name while an old event about it is still in flight:
    the old job's Succeeded event and its pod's event arrive (again) after the pod was
    re-created with a new uid. The function re-reads fresh state and keeps the new pod."""
    stack = make_stack(world="real")
    user, namespace = User(stack), stack.namespace
    core, worker = user.core, "resubmitted-worker-0"
    ends = {"exit-code": "0", "run-for": "4s"}
    first = user.submit(
        pytorchjob(
            "resubmitted", {"Master": replica(1, ends), "Worker": replica(1, FOREVER)}, {"backoffLimit": 0}
        )
    )
    pods = user.wait_made("resubmitted", ["resubmitted-master-0", worker])
    wait_for(f"{worker} Running", lambda: (p := user.pods("resubmitted").get(worker)) and all_running(p))
    # Read on its own, as the adapter sends it (a list's items carry no apiVersion and kind).
    stale_pod = json.loads(core.read_namespaced_pod(worker, namespace, _preload_content=False).data)
    _, sent = user.wait_condition("resubmitted", "Succeeded")
    stale_job = user.job("resubmitted")
    removal = observe.wait_gone(core, namespace, uids(pods, worker), sent, timeout=EVENTUALLY)
    timings("4 first job's worker (live events)", removal, "real world")
    assert removal.all_gone

    # The user deletes the job (the garbage collector takes its master and Services) and
    # submits it again, running for good this time; the operator makes the pods anew.
    user.delete_job("resubmitted")
    wait_for(
        "the first job, its pods and Services gone",
        lambda: (
            user.job("resubmitted") is None
            and not user.pods("resubmitted")
            and not _services(core, namespace)
        ),
        30,
    )
    second = user.submit(
        pytorchjob(
            "resubmitted", {"Master": replica(1, FOREVER), "Worker": replica(1, FOREVER)}, {"backoffLimit": 0}
        )
    )
    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    new_pods = user.wait_running("resubmitted", 2)
    new_worker_uid = new_pods[worker]["metadata"]["uid"]
    assert new_worker_uid != stale_pod["metadata"]["uid"]
    stack.function.wait_settled()

    # The stale events, exactly as the adapter sent them the first time.
    source = stack.admin_api.configuration.host
    for event in (make_event("update", stale_job, source), make_event("update", stale_pod, source)):
        response = stack.function.post(event)
        assert response.status_code == 200, response.text
    _kept(core, namespace, uids(new_pods, *new_pods))
    assert not observe.events(core, namespace, reason="PodsCleanedUp", involved_name="resubmitted") or all(
        e["involvedObject"]["uid"] == first["metadata"]["uid"]
        for e in observe.events(core, namespace, reason="PodsCleanedUp", involved_name="resubmitted")
    )
    deleted_uids = {d["uid"] for d in stack.function.decisions() if d.get("action") == "delete"}
    assert not deleted_uids & {p["metadata"]["uid"] for p in new_pods.values()}


def _services(core, namespace: str) -> list[str]:
    body = json.loads(core.list_namespaced_service(namespace, _preload_content=False).data)
    return [s["metadata"]["name"] for s in body.get("items") or []]


def test_5_reference_mode(make_stack, timings):
    """Seed experiment 2 with the adapter in Reference mode: the function GETs what it is told."""
    _seed_experiment_2(make_stack, timings, "Reference", "5 seed experiment 2, Reference mode")


def test_6_backstop_sweep_with_the_adapter_down(make_stack, timings):
    """The adapter is down while the job finishes (those changes are never sent); the
    PingSource tick (Knative's real mtping, every 2 s) sweeps the namespace and removes the
    leftovers."""
    stack = make_stack(world="real")
    user, namespace = User(stack), stack.namespace
    core, master = user.core, "unwatched-master-0"
    # The master ends after 8 s: time to stop the adapter while the job still runs.
    spec = {"Master": replica(1, {**SEED_MASTER, "run-for": "8s"}), "Worker": replica(3, SEED_WORKER)}
    job = user.submit(pytorchjob("unwatched", spec))
    workers = [f"unwatched-worker-{i}" for i in range(3)]
    pods = user.wait_made("unwatched", [master, *workers])
    stack.stop_adapter()
    stack.function.wait_settled()  # what the adapter sent before it stopped is handled
    assert user.job("unwatched") and not condition(user.job("unwatched"), "Succeeded"), "too late: job done"
    _, finished = user.wait_condition("unwatched", "Succeeded")
    time.sleep(SETTLE)
    assert all(observe.present(core, namespace, p["metadata"]["uid"]) for p in pods.values()), (
        "nothing may happen while the adapter is down"
    )
    # Ticks only from here, after the check that nothing happened.
    swept_at = time.monotonic()
    stack.start_ping()
    removal = observe.wait_gone(core, namespace, uids(pods, *workers), swept_at, timeout=EVENTUALLY)
    timings(
        "6 backstop sweep (from mtping's start)",
        removal,
        f"Succeeded was seen {(swept_at - finished):.1f}s before; ticks every 2 s; real world",
    )
    assert removal.all_gone
    _deleted_by_ticks(stack, set(uids(pods, *workers)))
    _kept(core, namespace, uids(pods, master))
    assert_cleaned_up_event(
        core, namespace, job, {w: r"exit code 1\b.*\b\d+ restarts" for w in workers}, one=False
    )
