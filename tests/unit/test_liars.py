"""A lying event causes nothing the truth would not: issue "Trust against a liar", in process.

Any pod may POST a CloudEvent to the function, so a payload is a claim: only state read fresh
from the API server may lead to an act (delete, suspend), a record (evidence store, finish
mark), a log read or a notice (an Event). Each test builds one healthy world in the simulated
cluster (as a live API server: a job it lacks is gone), handles one lying event and the
truthful event of the same object on two copies of it, and requires the same decisions and the
same calls (tests/replay/liars.py records every write and log read): for these worlds, none.

The first two are the reproductions found at f7bc08b: a TrainJob `update` claiming Failed had
a running TrainJob suspended (a finish mark written, dated at its JobSet's creation), and a pod
event naming a database pod had its log copied into an evidence ConfigMap.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from podsweeper.cluster.simulated import SimulatedCluster
from podsweeper.config import Settings
from podsweeper.intake import parse_event
from podsweeper.model import FinishMark, Namespace
from podsweeper.pipeline import Pipeline
from tests.fixtures import mpi
from tests.fixtures import trainer as v2
from tests.fixtures.builders import at, controller_ref, event, job, pod, split, stamp
from tests.fixtures.builders import container_status as cs
from tests.fixtures.parse import parse_intermediate, parse_job, parse_pod
from tests.replay.liars import Effect, RecordingCluster

NOW = at(600)  # past every grace: whatever the fresh state names, it names now
Objects = list[dict[str, Any]]
Seen = tuple[list[tuple[str, str, str, str]], list[Effect]]


def _observe(cluster: RecordingCluster, obj: dict[str, Any]) -> None:
    kind = obj["kind"]
    if kind == "Pod":
        cluster.observe("add", parse_pod(obj))
    elif kind in ("JobSet", "Job"):
        cluster.observe("add", parse_intermediate(obj))
    else:
        cluster.observe("add", parse_job(obj))


def seen(objects: Objects, raw: dict[str, Any], plant: FinishMark | None = None, **settings: Any) -> Seen:
    """The decisions and the recorded calls of handling `raw` on a cluster holding `objects`
    (and, `plant`, a finish mark for each TrainJob, written as anyone could)."""
    cluster = RecordingCluster()
    cluster.observe_namespace("add", Namespace("team-a"))
    for obj in objects:
        _observe(cluster, obj)
        if plant is not None and obj["kind"] == "TrainJob":
            SimulatedCluster.write_finish_mark(cluster, parse_job(obj).ref, plant)
    # Live unless told: a dry run would hide the deletes and suspends a lie causes.
    pipeline = Pipeline(cluster, Settings(**{"dry_run": False, **settings}), concurrent_deletes=False)
    outcome = pipeline.handle(parse_event(*split(raw)), NOW)
    decided = [
        (a.decision.rule.value, a.decision.action.value, a.decision.kind, a.decision.name)
        for a in outcome.applied
    ]
    return decided, cluster.effects


def assert_lie_harmless(
    objects: Objects, lie: dict[str, Any], truth: dict[str, Any], **settings: Any
) -> None:
    """The lie decides and calls exactly what the truthful event does; in these healthy
    worlds that is nothing (checked too, so a broken world cannot pass the test)."""
    truthful = seen(objects, truth, **settings)
    assert truthful == ([], []), f"the world is not healthy: the truthful event did {truthful}"
    lied = seen(objects, lie, **settings)
    assert lied == truthful, f"the lie caused {lied}"


def lying(obj: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """A copy of `obj` changed by `change`: what a liar POSTs in its name."""
    told = copy.deepcopy(obj)
    change(told)
    return told


# -- the world: a running TrainJob, a running PyTorchJob, a database pod of no job -----------

RUNNING_V1 = [("Created", at(0)), ("Running", at(2))]


def trainjob_world() -> tuple[dict, dict, dict, list[dict]]:
    """A TrainJob running since 0 with its JobSet (made with it), one batch Job, two pods."""
    return v2.chain("tj", "team-a")


def v1_world(**job_kw: Any) -> tuple[dict, list[dict]]:
    """A running PyTorchJob `train` (no backoffLimit) with two healthy running workers."""
    j = job(name="train", namespace="team-a", conditions=RUNNING_V1, **job_kw)
    pods = [
        pod(j, "Worker", i, phase="Running", containers=[cs(state="running", name="pytorch")])
        for i in range(2)
    ]
    return j, pods


def database() -> dict:
    """A database pod: no owner, no training label; its log is nobody's evidence."""
    j, _ = v1_world()
    db = pod(j, "Worker", 0, phase="Running", owner=False, labels=False, containers=[cs(name="postgres")])
    db["metadata"]["name"], db["metadata"]["uid"] = "postgres-0", "db-uid"
    db["spec"]["containers"][0]["name"] = "postgres"
    return db


def failed_container(name: str = "pytorch", restarts: int = 0) -> list[dict]:
    return [cs(state="terminated", exit_code=1, reason="Error", restarts=restarts, name=name)]


def update(obj: dict[str, Any]) -> dict[str, Any]:
    return event("update", obj, NOW)


# -- reproduction 1: a TrainJob event claiming Failed -------------------------------------


@pytest.mark.parametrize("dry_run", [False, True])
@pytest.mark.parametrize("claimed", [0, 1, 100])  # at the JobSet's creation, just after, later
def test_a_trainjob_event_claiming_failed_suspends_nothing_and_marks_no_finish(dry_run, claimed):
    tj, js, bj, pods = trainjob_world()
    failed = copy.deepcopy(tj)
    failed["status"]["conditions"] = v2._conditions([("Failed", at(claimed))])
    assert failed["metadata"]["uid"] == tj["metadata"]["uid"]  # the job's real uid: it names this job
    assert_lie_harmless([tj, js, bj, *pods], update(failed), update(tj), dry_run=dry_run)


def test_a_trainjob_event_claiming_complete_or_failed_at_its_deadline_changes_nothing():
    tj, js, bj, pods = trainjob_world()
    world = [tj, js, bj, *pods]
    for condition in ("Complete", "Failed"):
        finished = copy.deepcopy(tj)
        finished["status"]["conditions"] = v2._conditions([(condition, at(1))])
        if condition == "Failed":
            finished["status"]["conditions"][0]["reason"] = "DeadlineExceeded"
        assert_lie_harmless(world, update(finished), update(tj))
        assert_lie_harmless(world, event("add", finished, NOW), update(tj))


# -- reproduction 2: a pod event naming a pod of no job -----------------------------------


def _dressed_as(j: dict, owner_uid: str | None) -> Callable[[dict], None]:
    """Dress a pod as a worker of `j` (its labels; its ownerReference with `owner_uid`, or
    none) whose container `postgres` failed."""

    def change(o: dict) -> None:
        dressed = pod(j, "Worker", 0, phase="Failed", containers=failed_container("postgres"))
        o["metadata"]["labels"] = dressed["metadata"]["labels"]
        if owner_uid is None:
            o["metadata"].pop("ownerReferences", None)
        else:
            owner = dressed["metadata"]["ownerReferences"][0]
            o["metadata"]["ownerReferences"] = [{**owner, "uid": owner_uid}]
        o["status"] = dressed["status"]

    return change


@pytest.mark.parametrize("owner", ["the job's uid", "another uid", "labels only"])
def test_a_pod_event_naming_a_database_pod_reads_no_log_and_keeps_no_evidence(owner):
    j, pods = v1_world()
    db = database()
    uid = {"the job's uid": j["metadata"]["uid"], "another uid": "made-up", "labels only": None}[owner]
    lie = update(lying(db, _dressed_as(j, uid)))
    assert_lie_harmless([j, *pods, db], lie, update(db))
    assert_lie_harmless([j, *pods, db], event("delete", lying(db, _dressed_as(j, uid)), NOW), update(db))


def test_a_chain_pod_event_naming_a_database_pod_reads_no_log():
    tj, js, bj, pods = trainjob_world()
    db = database()

    def as_chain_pod(o: dict) -> None:
        dressed = v2.pod(bj, 0, phase="Failed", exit_code=1)
        for key in ("labels", "ownerReferences"):
            o["metadata"][key] = dressed["metadata"][key]
        o["status"] = dressed["status"]
        o["status"]["containerStatuses"][0]["name"] = "postgres"

    assert_lie_harmless([tj, js, bj, *pods, db], update(lying(db, as_chain_pod)), update(db))


# -- more lies, per rule and per record ---------------------------------------------------


def test_a_pod_event_claiming_a_finished_job_it_does_not_belong_to():
    done = job(name="done", namespace="team-a", conditions=[("Created", at(0)), ("Succeeded", at(10))])
    j, pods = v1_world()
    worker = pods[0]

    def of_done(o: dict) -> None:
        dressed = pod(done, "Worker", 0)
        o["metadata"]["labels"] = dressed["metadata"]["labels"]
        o["metadata"]["ownerReferences"] = dressed["metadata"]["ownerReferences"]
        o["status"]["phase"] = "Failed"
        o["status"]["containerStatuses"] = failed_container()

    def looping_of_done(o: dict) -> None:
        of_done(o)
        o["status"]["phase"] = "Running"
        o["status"]["containerStatuses"] = [
            cs(state="waiting", reason="CrashLoopBackOff", restarts=50, last_exit=1, name="pytorch")
        ]

    world = [done, j, *pods]
    assert_lie_harmless(world, update(lying(worker, of_done)), update(worker))
    assert_lie_harmless(world, update(lying(worker, looping_of_done)), update(worker))


@pytest.mark.parametrize("verb", ["delete", "update"])
def test_a_job_event_with_a_wrong_uid_for_a_job_that_exists(verb):
    """v1 pass: `replaced` comes from the payload's uid; the pods must still be decided as the
    existing job's, never as orphans. One worker has ended (Succeeded): no rule names it while
    its job runs, rule orphan would."""
    j, pods = v1_world()
    done = pod(j, "Worker", 2, phase="Succeeded", containers=[cs(state="terminated", exit_code=0)])
    world = [j, *pods, done]
    other = lying(j, lambda o: o["metadata"].update(uid="not-the-job-uid"))
    assert_lie_harmless(world, event(verb, other, NOW), update(j))
    assert_lie_harmless(world, event("delete", j, NOW), update(j))  # its own uid: it still exists


def test_a_job_event_with_a_wrong_uid_for_a_finished_job_within_its_operator_grace():
    """cleanPodPolicy All, finished 10 s ago: its pods are the operator's for the grace."""
    j = job(
        name="train",
        namespace="team-a",
        clean_pod_policy="All",
        conditions=[("Created", at(0)), ("Succeeded", NOW)],
    )
    pods = [pod(j, "Worker", i, phase="Succeeded") for i in range(2)]
    other = lying(j, lambda o: o["metadata"].update(uid="not-the-job-uid"))
    assert_lie_harmless([j, *pods], event("delete", other, NOW), update(j))


@pytest.mark.parametrize("condition", ["Succeeded", "Failed"])
def test_a_job_event_claiming_it_finished_while_it_runs(condition):
    j, pods = v1_world()
    finished = lying(
        j, lambda o: o.update(status=job(conditions=[("Created", at(0)), (condition, at(1))])["status"])
    )
    assert_lie_harmless([j, *pods], update(finished), update(j))


def test_a_pod_event_with_a_fake_restart_count_or_failure():
    j, pods = v1_world()
    worker = pods[0]

    def looping(o: dict) -> None:
        o["status"]["containerStatuses"] = [
            cs(state="waiting", reason="CrashLoopBackOff", restarts=50, last_exit=1, name="pytorch")
        ]

    def failed(o: dict) -> None:
        o["status"]["phase"] = "Failed"
        o["status"]["containerStatuses"] = failed_container(restarts=7)

    for change in (looping, failed):
        for settings in ({}, {"crashloop_action": "delete"}, {"crashloop_action": "suspend"}):
            assert_lie_harmless([j, *pods], update(lying(worker, change)), update(worker), **settings)


def test_a_pod_event_whose_uid_is_not_the_live_pods():
    j, pods = v1_world()
    worker = pods[0]

    def other_pod(o: dict) -> None:
        o["metadata"]["uid"] = "an-earlier-pod-uid"
        o["status"]["phase"] = "Failed"
        o["status"]["containerStatuses"] = failed_container(restarts=2)

    for verb in ("update", "delete"):
        assert_lie_harmless([j, *pods], event(verb, lying(worker, other_pod), NOW), update(worker))


def test_a_pod_delete_event_for_a_pod_that_exists_keeps_no_evidence():
    j, pods = v1_world()
    worker = pods[0]

    def failed(o: dict) -> None:
        o["status"]["phase"] = "Failed"
        o["status"]["containerStatuses"] = failed_container(restarts=1)

    assert_lie_harmless([j, *pods], event("delete", lying(worker, failed), NOW), update(worker))


def test_reference_mode_events_for_objects_that_exist():
    """Reference mode carries no object: the function reads it. A delete of what exists, and an
    update of a healthy pod, job, TrainJob, JobSet or batch Job, decide on what is read. (The job
    has a backoffLimit: a job's add warns no-backoff-limit on the job as read, whoever says it
    is new; see test_an_add_event_warns_only_what_the_job_read_names.)"""
    j, pods = v1_world(backoff_limit=3)
    tj, js, bj, chain_pods = trainjob_world()
    world = [j, *pods, tj, js, bj, *chain_pods]
    for obj in (j, pods[0], tj, js, bj, chain_pods[0]):
        for verb in ("add", "update", "delete"):
            assert_lie_harmless(world, event(verb, obj, NOW, mode="ref"), update(obj))


def test_jobset_and_job_events_with_fake_owners_or_marks():
    tj, js, bj, pods = trainjob_world()
    world = [tj, js, bj, *pods]

    def orphaned(o: dict) -> None:
        o["metadata"].pop("ownerReferences", None)

    def another_trainjob(o: dict) -> None:
        o["metadata"]["ownerReferences"][0]["uid"] = "an-earlier-trainjob-uid"

    def restarts_forever(o: dict) -> None:
        o["spec"]["failurePolicy"] = {"rules": [{"action": "RestartJobSetAndIgnoreMaxRestarts"}]}

    for obj in (js, bj):
        for change in (orphaned, another_trainjob):
            for verb in ("add", "update", "delete"):
                assert_lie_harmless(world, event(verb, lying(obj, change), NOW), update(obj))
    assert_lie_harmless(world, event("add", lying(js, restarts_forever), NOW), update(js))


def test_a_jobset_event_claiming_a_plain_jobset_is_a_trainjobs():
    """A JobSet of no TrainJob (another team's), told as controlled by a TrainJob and marked."""
    plain = v2.jobset(None, "plain", "team-a", marked=False)
    plain_job = v2.batch_job(plain, marked=False)
    tj = v2.trainjob("plain", "team-a")

    def claimed(o: dict) -> None:
        o["metadata"]["ownerReferences"] = [controller_ref(tj)]
        o["spec"]["replicatedJobs"][0]["template"]["metadata"]["labels"] = {v2.MARK: "trainer"}

    for verb in ("add", "update", "delete"):
        assert_lie_harmless([plain, plain_job], event(verb, lying(plain, claimed), NOW), update(plain))


def test_an_mpijob_event_claiming_failed_without_completion():
    """Rule failed-mpijob-running suspends a Failed MPIJob v2beta1 its operator still runs: a
    claim of that failure about a running one suspends nothing."""
    mj = mpi.mpijob("pi", "team-a", conditions=(("Created", at(0)), ("Running", at(1))))
    launcher = mpi.launcher_job(mj)
    workers = [mpi.worker(mj, i) for i in range(2)]
    world = [mj, launcher, *workers, mpi.launcher_pod(launcher, "pi", phase="Running")]
    failed = lying(
        mj,
        lambda o: o["status"]["conditions"].append(
            {
                "type": "Failed",
                "status": "True",
                "lastTransitionTime": stamp(at(1)),
                "lastUpdateTime": stamp(at(1)),
            }
        ),
    )
    for action in ("suspend", "warn"):
        assert_lie_harmless(world, update(failed), update(mj), crashloop_action=action)


def test_an_add_event_warns_only_what_the_job_read_names():
    """A job's add is where rule no-backoff-limit warns, decided on the job as read: an add
    claiming no backoffLimit for a job that has one warns nothing."""
    bounded, pods = v1_world(backoff_limit=3)
    unbounded = lying(bounded, lambda o: o["spec"]["runPolicy"].pop("backoffLimit"))
    assert_lie_harmless([bounded, *pods], event("add", unbounded, NOW), update(bounded))


@pytest.mark.parametrize("queued", [False, True])
def test_a_trainjob_event_claiming_failed_just_before_its_jobset_was_made(queued):
    """A TrainJob resumed (or admitted by Kueue) long after it was made gets its first JobSet
    then: a JobSet made after the TrainJob, as a restart's is. A claim of a Failed finish just
    before that JobSet was made is still only a claim: no finish mark, no suspend, no warning."""
    tj = v2.trainjob("tj", "team-a")
    if queued:
        tj["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-queue"}
    # Trainer says when it resumed: the Suspended condition turns False then (reason Resumed).
    resumed = {
        "type": "Suspended",
        "status": "False",
        "reason": "Resumed",
        "lastTransitionTime": stamp(at(500)),
    }
    tj["status"]["conditions"] = [resumed]
    js = v2.jobset(tj, "tj", "team-a", created=at(500))  # resumed at 500
    bj = v2.batch_job(js)
    pods = [v2.pod(bj, i) for i in range(2)]
    failed = copy.deepcopy(tj)
    failed["status"]["conditions"] = v2._conditions([("Failed", at(499))])
    assert_lie_harmless([tj, js, bj, *pods], update(failed), update(tj))


def test_a_planted_finish_mark_restarts_no_trainjob_on_its_first_jobset():
    """A finish mark is a ConfigMap: anyone who may create one could plant it (the real API
    test plants one). Written here straight into the store, for a running TrainJob whose JobSet
    was made with it: the JobSet's own events must not make it a restart."""
    tj, js, bj, pods = trainjob_world()
    cluster_with_mark: list[dict] = [tj, js, bj, *pods]
    truthful = seen(cluster_with_mark, event("add", js, NOW))
    planted = seen(cluster_with_mark, event("add", js, NOW), plant=FinishMark("Failed", at(-3600), ""))
    assert planted == truthful == ([], [])
