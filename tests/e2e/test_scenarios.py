"""The seed's experiments and the safety cases, through the real adapter to the real function.

Each test plays the operator, the kubelet and the user against the real API server
(tests/e2e/players.py); the adapter watches, the function decides on fresh state and
deletes; the assertions look at what exists afterwards and at the Events written.
Timings from the job's terminal status write to the last pod gone are printed, with only a
generous upper bound asserted ("eventually").
"""

from __future__ import annotations

import json
import re
import time
import uuid
from datetime import UTC, datetime

import pytest

from podsweeper.tools.record import make_event, rfc3339
from tests.e2e import observe
from tests.e2e.conftest import ORPHAN_GRACE_SECONDS
from tests.e2e.players import Play, experiment_1, experiment_2, running, terminated
from tests.fixtures import builders

pytestmark = pytest.mark.e2e

EVENTUALLY = 30.0  # seconds: the only time bound asserted
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
    tests/e2e/test_pingsource.py compares its events with this one)."""
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
    core, namespace: str, job: dict, expected: dict[str, str], *, uid: str | None | bool = True
) -> dict:
    """One PodsCleanedUp Event on the job naming exactly these pods; each pod's evidence
    (its containers' exit code, reason, restarts) must match the regex given for it.
    The Event's involvedObject.uid must be the job's (`uid` True), a given one, or any (None)."""
    found = observe.wait_events(
        core,
        namespace,
        reason="PodsCleanedUp",
        involved_name=job["metadata"]["name"],
        involved_uid=job["metadata"]["uid"] if uid is True else uid,
    )
    assert len(found) == 1, f"expected one PodsCleanedUp Event, got {[e['message'] for e in found]}"
    event = found[0]
    assert event["type"] == "Normal"
    assert event["involvedObject"]["kind"] == job["kind"]
    message = event["message"]
    # "deleted N pod(s) (G GPU(s) freed, S GPU-seconds held since no longer needed): ..."
    assert re.search(
        rf"deleted {len(expected)} pod\(s\)( \(\d+ GPU\(s\) freed, \d+ GPU-seconds[^)]*\))?: ", message
    ), message
    parts = {m.group(1): (m.group(2), m.group(3) or "") for m in PART.finditer(message.split(": ", 1)[1])}
    assert set(parts) == set(expected), message
    for name, evidence in expected.items():
        assert re.search(evidence, parts[name][1]), (name, evidence, message)
    return parts


def _kept(core, namespace: str, pods: dict[str, str]) -> None:
    time.sleep(SETTLE)
    for uid, name in pods.items():
        assert observe.present(core, namespace, uid), f"{name} (uid {uid}) must be kept"


def _seed_experiment_2(make_stack, admin_api, core, namespace, timings, mode: str, label: str):
    stack = make_stack(world="players", mode=mode)
    play = Play(admin_api, namespace, scale=SCALE)
    out = experiment_2(play, until=34)
    workers = workers_of(out.pods)
    removal = observe.wait_gone(
        core, namespace, uids(out.pods, *workers), out.terminal_write, timeout=EVENTUALLY
    )
    timings(label, removal, f"{mode} mode")
    assert removal.all_gone, f"workers left: {removal.remaining()}\n" + "\n".join(play.log)
    _kept(core, namespace, uids(out.pods, "pytest-master-0"))
    assert_cleaned_up_event(
        core,
        namespace,
        out.job,
        {w: rf"exit code {out.exit_codes[w]}\b.*\b{out.restarts[w]} restarts" for w in workers},
    )
    deletes = [d for d in stack.function.decisions() if d.get("action") == "delete"]
    assert sorted(d["name"] for d in deletes) == workers
    assert {d["rule"] for d in deletes} == {"finished-job-active-pod"}


def test_1_seed_experiment_2_workers_deleted_master_kept(make_stack, admin_api, core, namespace, timings):
    """PyTorchJob pytest, no backoffLimit, workers crash-looping, job Succeeded (by its master)."""
    _seed_experiment_2(make_stack, admin_api, core, namespace, timings, "Resource", "1 seed experiment 2")


def test_2_seed_experiment_1_without_operator_cleanup(make_stack, admin_api, core, namespace, timings):
    """cleanPodPolicy All, job Succeeded, and the operator's own cleanup missing: podsweeper
    leaves the pods to the operator for its grace (2 s here), then the next sweep (the
    PingSource's backstop, ticked by Knative's real mtping every 2 s) removes them all."""
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
    ticks = {send["id"] for send in stack.ping.delivered()}
    deletes = [d for d in stack.function.decisions() if d.get("action") == "delete"]
    assert deletes and all(d["event_id"] in ticks for d in deletes), (deletes, ticks)
    assert_cleaned_up_event(
        core,
        namespace,
        out.job,
        {"pytest-master-0": r"exit code 0\b", **{w: "" for w in workers_of(out.pods)}},
    )


@pytest.mark.parametrize("propagation", ["Background", "Orphan"])
def test_3_orphans_deleted_after_grace(make_stack, admin_api, core, namespace, timings, propagation):
    """The job deleted while its pods remain: pods older than the grace go on the delete
    event; one too young goes on the next sweep once it is old enough.

    Background: nothing garbage-collects here, so the pods keep their ownerReference to the
    deleted job (a cluster whose garbage collector lags or is absent). Orphan
    (`kubectl delete --cascade=orphan`): the test plays the garbage collector, which strips
    the pods' ownerReferences and then removes the job's `orphan` finalizer; the pods are
    then the job's only by their labels.
    """
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
        pod = play.create_pod(builders.pod(job, rtype, index))
        play.pod_status(pod["metadata"]["name"], "Running", running())
        old[pod["metadata"]["uid"]] = pod["metadata"]["name"]
    time.sleep(ORPHAN_GRACE_SECONDS + 1.2)  # creationTimestamp has whole seconds
    young = play.create_pod(builders.pod(job, "Worker", 1))
    young_uid = {young["metadata"]["uid"]: young["metadata"]["name"]}
    deleted_at = time.monotonic()
    play.delete_job(job, propagation=propagation)
    if propagation == "Orphan":
        play.garbage_collect_orphaned(job, [*old.values(), young["metadata"]["name"]])
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
    rules = {d["name"]: d["rule"] for d in stack.function.decisions() if d.get("action") == "delete"}
    assert rules == {name: "orphan" for name in [*old.values(), young["metadata"]["name"]]}


def test_4_pod_recreated_under_the_same_name_is_kept(make_stack, admin_api, core, namespace, timings):
    """A job resubmitted under the same name while an old event about it is still in flight:
    the old job's Succeeded event and its pod's event arrive (again) after the pod was
    re-created with a new uid. The function re-reads fresh state and keeps the new pod."""
    stack = make_stack(world="players")
    play = Play(admin_api, namespace)
    spec = dict(replicas={"Master": 1, "Worker": 1}, backoff_limit=0)
    first = play.submit(builders.job("PyTorchJob", "resubmitted", namespace, **spec))
    pods = play.create_pods(first)
    play.job_conditions(first, "Created", "Running")
    for name in pods:
        play.pod_status(name, "Running", running())
    worker = "resubmitted-worker-0"
    stale_pod = json.loads(core.read_namespaced_pod(worker, namespace, _preload_content=False).data)
    sent = play.job_conditions(first, "Created", "Running", "Succeeded")
    stale_job = play.custom.get_namespaced_custom_object(
        "kubeflow.org", "v1", namespace, "pytorchjobs", "resubmitted"
    )
    removal = observe.wait_gone(core, namespace, uids(pods, *pods), sent, timeout=EVENTUALLY)
    timings("4 first job's pods (live events)", removal)
    assert removal.all_gone

    # The user deletes the job and submits it again; the operator re-creates the pods.
    play.delete_job(first)
    second = play.submit(builders.job("PyTorchJob", "resubmitted", namespace, **spec))
    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    new_pods = play.create_pods(second)
    play.job_conditions(second, "Created", "Running")
    for name in new_pods:
        play.pod_status(name, "Running", running())
    new_worker_uid = new_pods[worker]["metadata"]["uid"]
    assert new_worker_uid != stale_pod["metadata"]["uid"]

    # The stale events, exactly as the adapter sent them the first time.
    source = play.api.configuration.host
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


def test_5_reference_mode(make_stack, admin_api, core, namespace, timings):
    """Seed experiment 2 with the adapter in Reference mode: the function GETs what it is told."""
    _seed_experiment_2(
        make_stack, admin_api, core, namespace, timings, "Reference", "5 seed experiment 2, Reference mode"
    )


def test_6_backstop_sweep_with_the_adapter_down(make_stack, admin_api, core, namespace, timings):
    """The adapter is down while the job finishes (those changes are never sent); the
    PingSource tick (Knative's real mtping, every 2 s) sweeps the namespace and removes the
    leftovers."""
    stack = make_stack(world="players")
    play = Play(admin_api, namespace, scale=SCALE)
    job = play.submit(builders.job("PyTorchJob", "unwatched", namespace))
    pods = play.create_pods(job)
    play.job_conditions(job, "Created", "Running")
    master = "unwatched-master-0"
    for name in pods:
        play.pod_status(name, "Running", running())
    stack.function.wait_idle()  # what the adapter sent so far is handled: nothing in flight
    stack.stop_adapter()
    for name in workers_of(pods):
        play.pod_status(name, "Running", terminated(1, "Error", restarts=3))
    play.pod_status(master, "Succeeded", terminated(0, "Completed"))
    finished = play.job_conditions(job, "Created", "Running", "Succeeded")
    time.sleep(SETTLE)
    assert all(observe.present(core, namespace, p["metadata"]["uid"]) for p in pods.values()), (
        "nothing may happen while the adapter is down"
    )
    # Ticks only from here, after the check that nothing happened.
    swept_at = time.monotonic()
    stack.start_ping()
    removal = observe.wait_gone(core, namespace, uids(pods, *workers_of(pods)), swept_at, timeout=EVENTUALLY)
    timings(
        "6 backstop sweep (from mtping's start)",
        removal,
        f"terminal write was {(swept_at - finished):.1f}s before; ticks every 2 s",
    )
    assert removal.all_gone
    ticks = {send["id"] for send in stack.ping.delivered()}
    deletes = [d for d in stack.function.decisions() if d.get("action") == "delete"]
    assert deletes and all(d["event_id"] in ticks for d in deletes), (deletes, ticks)
    _kept(core, namespace, uids(pods, master))
    assert_cleaned_up_event(
        core, namespace, job, {w: r"exit code 1\b.*\b3 restarts" for w in workers_of(pods)}
    )
