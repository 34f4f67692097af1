"""kubeflow/trainer#3833 against the real Trainer v2.3.0: a refused JobSet DELETE at the deadline.

When a TrainJob's activeDeadlineSeconds expires, Trainer marks it Failed (DeadlineExceeded) and
deletes its JobSet, once: a failed DELETE is only logged (at V(2)) and the reconcile returns
success; every later reconcile skips the TrainJob as finished. So one refused DELETE leaves the
JobSet and its GPU pods running under a Failed TrainJob. Here the first DELETE of each JobSet is
refused by a validating webhook of the test (`refuse_delete.py`), which also records every
DELETE, and the tests pin what the real controllers then do, and which cleaner action sticks:

- the JobSet, its Job and the same pods keep running (20 s and more after Failed, 60 s seen in
  a manual run), and Trainer never sends a second DELETE, even when it reconciles the TrainJob;
- deleting the JobSet (Foreground or Background, uid precondition) sticks: unlike a TrainJob that
  failed at its backoffLimit, a DeadlineExceeded one does not get a new JobSet (its Failed
  condition is kept, so Trainer never reconciles its objects again);
- JobSet `spec.suspend: true` sticks: the pods are deleted and Trainer does not resume it;
- TrainJob `spec.suspend: true` is accepted and sets Suspended=True, but does not stop anything:
  the JobSet stays unsuspended with the same pods Running;
- podsweeper's rule deadline-exceeded-jobset-running (a `podsweeper sweep` as the function's
  user, with its RBAC): dry-run names the leftover JobSet and changes nothing; then it deletes
  it, Jobs and pods go, and nothing is made again.

One World(trainer=True) for the module, one namespace and a TrainJob per case. Run with -s to
see the timings.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import time
import uuid

import pytest
from kubernetes import client

from tests.controllers.refuse_delete import RefuseDeletes
from tests.fixtures.trainer import trainjob
from tests.support.harness.waiting import wait_for
from tests.support.world.launcher import World
from tests.support.world.trainjobs import JOBSET, TRAINER, Cluster

DEADLINE = 8  # activeDeadlineSeconds, counted by Trainer from creationTimestamp (whole seconds)
HOLD = 20  # seconds after Failed the leftover is checked to still run
SETTLE = 5  # seconds after a cleaner's action its outcome is checked again
NAMES = ("left", "del-fg", "del-bg", "js-suspend", "tj-suspend", "swept")


@dataclasses.dataclass
class Leftovers:
    k: Cluster
    hook: RefuseDeletes
    deadline: dict[str, float]  # epoch seconds: creationTimestamp + DEADLINE
    failed_seen: dict[str, float]  # epoch seconds the test saw Failed=True
    jobset_uid: dict[str, str]
    pod_uids: dict[str, set[str]]  # the pods Running before the deadline


@pytest.fixture(scope="module")
def world():
    with World(trainer=True) as w:
        yield w


@pytest.fixture(scope="module")
def api(world):
    api_client = world.control_plane.api_client("admin")
    yield api_client
    api_client.close()


@pytest.fixture(scope="module")
def leftovers(api):
    """TrainJobs (pods run 1 h, 1 GPU each) whose deadline expired while their JobSet's first
    DELETE was refused: each one Failed, its JobSet still there. One namespace for the module,
    not the per-test one: the deadline takes its seconds once, for all the cases at a time."""
    ns = f"dl-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": ns}})
    k = Cluster(api, ns)
    try:
        with RefuseDeletes(api, ns, dict.fromkeys(NAMES, 1)) as hook:
            deadline = {}
            for name in NAMES:
                job = trainjob(name, run_for="1h")
                job["spec"]["activeDeadlineSeconds"] = DEADLINE
                created = k.create_trainjob(job)["metadata"]["creationTimestamp"]
                deadline[name] = _epoch(created) + DEADLINE
            first = wait_for(f"JobSet {NAMES[0]}", lambda: k.jobset(NAMES[0]), timeout=30)
            wait_for("the refusing webhook live", lambda: hook.ready(NAMES[0]), timeout=30, interval=0.2)
            assert time.time() < min(deadline.values()) - 1, "webhook live only at the deadline: no refusal"
            jobset_uid, pod_uids = {NAMES[0]: first["metadata"]["uid"]}, {}
            for name in NAMES:
                jobset_uid[name] = wait_for(f"JobSet {name}", lambda n=name: k.jobset(n), timeout=30)[
                    "metadata"
                ]["uid"]
                pods = wait_for(f"{name}'s 2 pods Running", lambda n=name: k.running(n), timeout=60)
                pod_uids[name] = {p.metadata.uid for p in pods}
            failed_seen = {}
            for name in NAMES:
                wait_for(
                    f"{name} Failed",
                    lambda n=name: k.condition(k.trainjob(n), "Failed"),
                    timeout=DEADLINE + 30,
                    interval=0.05,
                )
                failed_seen[name] = time.time()
            print(
                "deadline: Failed seen "
                + ", ".join(f"{n} {failed_seen[n] - deadline[n]:+.2f} s" for n in NAMES)
                + " after creationTimestamp + activeDeadlineSeconds"
            )
            yield Leftovers(k, hook, deadline, failed_seen, jobset_uid, pod_uids)
    finally:
        core.delete_namespace(ns)


def _epoch(timestamp: str) -> float:
    return datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def _failed(tj: dict) -> dict:
    return next(c for c in tj["status"]["conditions"] if c["type"] == "Failed")


def _still_running(lo: Leftovers, name: str) -> None:
    """The JobSet Trainer failed to delete, with the very pods that ran before the deadline."""
    k = lo.k
    js = k.jobset(name)
    assert js is not None and js["metadata"]["uid"] == lo.jobset_uid[name]
    assert not js["metadata"].get("deletionTimestamp") and not js["spec"].get("suspend")
    pods = k.running(name)
    assert pods, f"{name}'s pods still Running"
    assert {p.metadata.uid for p in pods} == lo.pod_uids[name]
    for pod in pods:
        assert pod.spec.node_name and pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "1"
    (job,) = [j for j in k.jobs() if j.metadata.name == f"{name}-node-0"]
    assert job.status.active == 2 and not job.spec.suspend


def _deadline_failed(lo: Leftovers, name: str) -> None:
    failed = _failed(lo.k.trainjob(name))
    assert (failed["status"], failed["reason"]) == ("True", "DeadlineExceeded")
    assert failed["message"] == "TrainJob exceeded its active deadline"


@pytest.mark.world_facts  # Trainer's own behaviour: make world-facts
def test_deadline_fails_the_trainjob_and_its_refused_jobset_delete_is_never_retried(
    leftovers, record_property
):
    lo, k = leftovers, leftovers.k
    for name in NAMES:
        (tried,) = lo.hook.deletes(name)  # Trainer's one DELETE, at the deadline, refused
        assert not tried.allowed and tried.uid == lo.jobset_uid[name]
        assert "propagationPolicy" not in tried.options and "preconditions" not in tried.options
        assert lo.deadline[name] - 0.5 < tried.at <= lo.failed_seen[name]
        _deadline_failed(lo, name)
    name = "left"
    delay = lo.failed_seen[name] - lo.deadline[name]
    record_property("failed_after_deadline_s", round(delay, 2))
    # A TrainJob update makes Trainer reconcile it (seen in its V(2) log): still no DELETE.
    k.patch(TRAINER, "trainjobs", name, {"metadata": {"annotations": {"sim.podsweeper.dev/poke": "1"}}})
    time.sleep(max(0.0, lo.failed_seen[name] + HOLD - time.time()))
    held = time.time() - lo.failed_seen[name]
    record_property("leftover_running_after_failed_s", round(held, 1))
    print(
        f"deadline: {name} Failed {delay:+.2f} s after its deadline; JobSet still running {held:.0f} s later"
    )
    _still_running(lo, name)
    _deadline_failed(lo, name)
    assert not k.condition(k.trainjob(name), "Complete")
    assert len(lo.hook.deletes(name)) == 1, "Trainer never tried the DELETE again"


@pytest.mark.world_facts  # Trainer's own behaviour: make world-facts
def test_deleting_the_leftover_jobset_sticks(leftovers, record_property):
    """Not re-created for a DeadlineExceeded TrainJob (a BackoffLimitExceeded one gets a new
    JobSet: test_trainer_world.py)."""
    lo, k = leftovers, leftovers.k
    policies = {"del-fg": "Foreground", "del-bg": "Background"}
    for name in policies:
        _still_running(lo, name)
    t0 = time.monotonic()
    for name, policy in policies.items():
        body = {"propagationPolicy": policy, "preconditions": {"uid": lo.jobset_uid[name]}}
        k.custom.delete_namespaced_custom_object(*JOBSET, k.ns, "jobsets", name, body=body)
    for name in policies:
        wait_for(
            f"{name}: JobSet, Job and pods gone",
            lambda n=name: (
                k.jobset(n) is None
                and not k.pods(n)
                and not [j for j in k.jobs() if j.metadata.name == f"{n}-node-0"]
            ),
            timeout=30,
        )
    gone = time.monotonic() - t0
    record_property("jobsets_gone_after_s", round(gone, 2))
    time.sleep(SETTLE)
    for name, policy in policies.items():
        assert k.jobset(name) is None, f"{policy}-deleted JobSet not re-created"
        assert not k.pods(name)
        _deadline_failed(lo, name)
        assert [d.allowed for d in lo.hook.deletes(name)] == [False, True]  # Trainer's, then ours
    print(f"deadline: deleted JobSets gone in {gone:.2f} s, not re-created {SETTLE} s later")


@pytest.mark.world_facts  # Trainer's own behaviour: make world-facts
def test_suspending_the_leftover_jobset_sticks(leftovers, record_property):
    """Trainer resumes a running TrainJob's suspended JobSet at once (test_trainer_world.py),
    not a finished one's."""
    lo, k, name = leftovers, leftovers.k, "js-suspend"
    _still_running(lo, name)
    t0 = time.monotonic()
    k.patch(JOBSET, "jobsets", name, {"spec": {"suspend": True}})
    wait_for(f"{name}'s pods deleted", lambda: not k.pods(name), timeout=30)
    stopped = time.monotonic() - t0
    record_property("pods_gone_after_jobset_suspend_s", round(stopped, 2))
    wait_for("JobSet Suspended=True", lambda: k.condition(k.jobset(name), "Suspended"), timeout=30)
    time.sleep(SETTLE)
    js = k.jobset(name)
    assert js["metadata"]["uid"] == lo.jobset_uid[name] and js["spec"]["suspend"] is True
    assert k.condition(js, "Suspended") and not k.pods(name)
    (job,) = [j for j in k.jobs() if j.metadata.name == f"{name}-node-0"]
    assert job.spec.suspend is True and not job.status.active
    _deadline_failed(lo, name)
    print(f"deadline: JobSet suspend removed the pods in {stopped:.2f} s; still suspended {SETTLE} s later")


@pytest.mark.world_facts  # Trainer's own behaviour: make world-facts
def test_suspending_the_trainjob_does_not_stop_the_leftover(leftovers):
    """Accepted, Suspended=True written, yet the JobSet is not suspended: Trainer passes the
    suspend on only when it reconciles the objects, and it never does for a finished TrainJob."""
    lo, k, name = leftovers, leftovers.k, "tj-suspend"
    _still_running(lo, name)
    k.patch(TRAINER, "trainjobs", name, {"spec": {"suspend": True}})
    wait_for("TrainJob Suspended=True", lambda: k.condition(k.trainjob(name), "Suspended"), timeout=30)
    time.sleep(SETTLE)
    _still_running(lo, name)
    _deadline_failed(lo, name)
    assert k.trainjob(name)["spec"]["suspend"] is True and k.condition(k.trainjob(name), "Suspended")


class DecisionLines(logging.Handler):
    """The sweep's decision lines, wherever an earlier test pointed the decision log."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(record.getMessage()))

    def about(self, name: str) -> list[dict]:
        return [line for line in self.lines if line.get("name") == name]


@pytest.fixture
def decisions():
    log = logging.getLogger("podsweeper.decisions")
    handler, level = DecisionLines(), log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    yield handler
    log.removeHandler(handler)
    log.setLevel(level)


def test_podsweeper_deletes_the_leftover_jobset_and_nothing_comes_back(
    world, leftovers, monkeypatch, decisions
):
    """Last in the module: the sweep acts on every leftover of the namespace still running."""
    from podsweeper.cli import main

    lo, k, name = leftovers, leftovers.k, "swept"
    _still_running(lo, name)
    grace = 5
    monkeypatch.setenv("PODSWEEPER_OPERATOR_GRACE_SECONDS", str(grace))
    # Past the grace since Failed (the Trainer facts before it, make world-facts, take longer;
    # run without them, this test waits for it): Failed's lastTransitionTime has whole seconds.
    time.sleep(max(0.0, lo.failed_seen[name] + grace + 1.5 - time.time()))
    argv = ["sweep", "--kubeconfig", str(world.control_plane.function_kubeconfig), "-n", k.ns]
    assert main([*argv, "--dry-run"]) == 0
    (dry,) = decisions.about(name)
    assert (dry["rule"], dry["kind"], dry["result"]) == (
        "deadline-exceeded-jobset-running",
        "JobSet",
        "dry-run",
    )
    _still_running(lo, name)
    assert len(lo.hook.deletes(name)) == 1  # Trainer's only: a dry-run sends none
    t0 = time.monotonic()
    assert main([*argv, "--live"]) == 0
    (_, done) = decisions.about(name)
    assert (done["rule"], done["kind"], done["result"]) == (
        "deadline-exceeded-jobset-running",
        "JobSet",
        "deleted",
    )
    wait_for(
        f"{name}: JobSet, Job and pods gone",
        lambda: (
            k.jobset(name) is None
            and not k.pods(name)
            and not [j for j in k.jobs() if j.metadata.name == f"{name}-node-0"]
        ),
        timeout=30,
    )
    print(f"deadline: podsweeper's delete took the leftover away in {time.monotonic() - t0:.2f} s")
    (trainers, ours) = lo.hook.deletes(name)
    assert not trainers.allowed and ours.allowed
    assert ours.options.get("preconditions", {}).get("uid") == lo.jobset_uid[name]
    assert ours.options.get("propagationPolicy") == "Background"
    time.sleep(SETTLE)
    assert k.jobset(name) is None and not k.pods(name), "nothing made again"
    _deadline_failed(lo, name)
    # A second sweep finds nothing more to do for it.
    assert main(argv) == 0
    assert len(decisions.about(name)) == 2
