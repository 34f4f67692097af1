"""The mpi-operator's launcher chain: MPIJob (v2beta1) -> batch Job `<name>-launcher` -> pod.

A launcher pod is the MPIJob's only when its batch Job, read now, is controlled by that MPIJob
(its uid) and has finished; a batch Job's pod that no MPIJob controls is never touched. The
behaviour pinned here is what tests/controllers/test_mpi_world.py saw the real mpi-operator v0.8.0 do.
"""

from __future__ import annotations

from podsweeper.cluster.simulated import SimulatedCluster
from podsweeper.config import Settings
from podsweeper.decisions import Result, Rule
from podsweeper.intake import parse_event
from podsweeper.model import JobRef
from podsweeper.pipeline import Pipeline
from tests.fixtures.builders import at, event, ping, split, stamp
from tests.fixtures.mpi import launcher_job, launcher_pod, mpijob, worker
from tests.fixtures.parse import parse_intermediate, parse_job, parse_pod

SUCCEEDED = (("Created", at(0)), ("Running", at(2)), ("Succeeded", at(30)))
FAILED = (("Created", at(0)), ("Failed", at(30)))


def world(mj, jobs=(), pods=()) -> SimulatedCluster:
    cluster = SimulatedCluster()
    cluster.observe("add", parse_job(mj))
    for raw in jobs:
        cluster.observe("add", parse_intermediate(raw))
    for raw in pods:
        cluster.observe("add", parse_pod(raw))
    return cluster


def handle(cluster, raw_event, now=None, **kw):
    return Pipeline(cluster, Settings(**{"dry_run": False, **kw})).handle(
        parse_event(*split(raw_event)), now or at(600)
    )


def deleted(outcome) -> dict[str, Rule]:
    return {a.decision.name: a.decision.rule for a in outcome.applied if a.result is Result.DELETED}


def test_launcher_pod_is_tied_to_its_mpijob_through_the_batch_job():
    mj = mpijob()
    pod = parse_pod(launcher_pod(launcher_job(mj), "pi"))
    assert pod.job is not None and pod.batch_job is not None
    assert (pod.job.kind.kind, pod.job.name, pod.job.version) == ("MPIJob", "pi", "v2beta1")
    assert (pod.batch_job.kind, pod.batch_job.name) == ("Job", "pi-launcher")
    assert pod.job.uid is None, "the pod does not prove the uid: the pass reads the Job"


def test_a_batch_job_not_named_after_the_job_its_labels_name_is_foreign():
    mj = mpijob()
    pod = parse_pod(launcher_pod(launcher_job(mj, name="other-launcher"), "pi"))
    assert pod.job is None and pod.foreign_controller


def test_an_ownerless_mpi_operator_pod_is_claimed_at_v2beta1():
    raw = worker(mpijob(), 0)
    raw["metadata"]["ownerReferences"] = []
    pod = parse_pod(raw)
    assert pod.job == JobRef(pod.job.kind, "team-a", "pi", None, "kubeflow.org/v2beta1")


def test_643_clean_pod_policy_all_launcher_pod_deleted_at_once():
    """The operator deletes only workers under All; the finished launcher Job's pod is left.
    podsweeper deletes it on the job's own event, without waiting for the operator's grace."""
    mj = mpijob(policy="All", conditions=SUCCEEDED, completed=at(30))
    job = launcher_job(mj, conditions=("Complete",))
    cluster = world(mj, [job], [launcher_pod(job, "pi")])
    outcome = handle(cluster, event("update", mj, at(31)), now=at(31))  # within the operator's grace
    assert deleted(outcome) == {"pi-launcher-abcde": Rule.CLEAN_POD_POLICY_ALL}
    assert not cluster.pods


def test_launcher_pod_kept_under_none_and_running():
    for policy in ("None", "Running"):
        mj = mpijob(policy=policy, conditions=FAILED, completed=at(30))
        job = launcher_job(mj, conditions=("Failed",))
        cluster = world(mj, [job], [launcher_pod(job, "pi", phase="Failed")])
        assert deleted(handle(cluster, event("update", mj, at(31)))) == {}, policy


def test_647_workers_left_running_after_the_launcher_failed_are_deleted():
    """cleanPodPolicy None (the default): the operator keeps workers Running after the launcher
    Job failed; completionTime is set, so the operator re-creates nothing."""
    mj = mpijob(conditions=FAILED, completed=at(30))
    job = launcher_job(mj, conditions=("Failed",))
    pods = [worker(mj, 0), worker(mj, 1), launcher_pod(job, "pi", phase="Failed")]
    outcome = handle(world(mj, [job], pods), event("update", mj, at(31)))
    assert deleted(outcome) == {
        "pi-worker-0": Rule.FINISHED_JOB_ACTIVE_POD,
        "pi-worker-1": Rule.FINISHED_JOB_ACTIVE_POD,
    }


EVICTED = (("Created", at(0)), ("Failed", at(30)))


def evicted_world(**job_kw):
    """Failed (MPIJobEvicted) but no completionTime: the launcher Job is still active."""
    mj = mpijob(policy="Running", conditions=EVICTED, **job_kw)
    mj["status"]["conditions"][-1]["reason"] = "MPIJobEvicted"
    job = launcher_job(mj)
    pods = [worker(mj, 0), worker(mj, 1, phase="Failed"), launcher_pod(job, "pi", phase="Running")]
    return mj, world(mj, [job], pods)


def test_647_failed_without_completion_time_is_not_finished_for_the_pod_rules():
    mj, _ = evicted_world()
    job = parse_job(mj)
    assert job.finished is None and job.failed_unsettled_at == at(30) and job.failed_reason == "MPIJobEvicted"


def test_failed_mpijob_running_647_evicted_mpijob_is_suspended_not_its_pods_deleted():
    """The operator re-creates any worker or launcher Job deleted (measured): no pod is deleted;
    after the operator's grace the MPIJob is suspended, which the operator honours for good."""
    mj, cluster = evicted_world()
    within = handle(cluster, event("update", mj, at(31)), now=at(31))
    assert within.applied == [] and len(cluster.pods) == 3
    outcome = handle(cluster, event("update", mj, at(61)), now=at(61))
    assert [(a.decision.rule, a.decision.kind, a.result) for a in outcome.applied] == [
        (Rule.FAILED_MPIJOB_RUNNING, "MPIJob", Result.SUSPENDED)
    ]
    assert "MPIJobEvicted" in outcome.applied[0].decision.reason
    assert len(cluster.pods) == 3, "the operator, not podsweeper, removes the pods of a suspended job"
    assert handle(cluster, event("update", mj, at(62)), now=at(62)).applied == []  # suspended now


def test_647_sweep_finds_the_evicted_mpijob():
    _, cluster = evicted_world()
    outcome = handle(cluster, ping(at(700)))
    assert [(a.decision.rule, a.result) for a in outcome.applied] == [
        (Rule.FAILED_MPIJOB_RUNNING, Result.SUSPENDED)
    ]


def test_647_suspend_is_a_warning_for_kueue_and_a_skip_when_opted_out_and_nothing_in_dry_run():
    mj, cluster = evicted_world()
    mj["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "q"}
    cluster.observe("update", parse_job(mj))
    outcome = handle(cluster, event("update", mj, at(700)))
    assert [(a.decision.action.value, a.result) for a in outcome.applied] == [("warn", Result.WARNED)]
    mj, cluster = evicted_world(annotations={"podsweeper.dev/skip": "true"})
    assert [a.decision.action.value for a in handle(cluster, event("update", mj, at(700))).applied] == [
        "skip"
    ]
    mj, cluster = evicted_world()
    outcome = handle(cluster, event("update", mj, at(700)), dry_run=True)
    assert [a.result for a in outcome.applied] == [Result.DRY_RUN]
    assert not cluster.jobs[parse_job(mj).ref.key].suspended


def test_launcher_pod_of_an_active_batch_job_is_never_deleted():
    """Deleting it would only make the Job controller re-create it (and spend its backoffLimit)."""
    mj = mpijob(policy="All", conditions=SUCCEEDED, completed=at(30))
    job = launcher_job(mj)  # no Complete/Failed condition
    cluster = world(mj, [job], [launcher_pod(job, "pi", phase="Failed")])
    assert deleted(handle(cluster, event("update", mj, at(31)))) == {}
    assert len(cluster.pods) == 1


def test_a_batch_jobs_pod_that_no_mpijob_controls_is_never_touched():
    mj = mpijob(policy="All", conditions=SUCCEEDED, completed=at(30))
    stranger = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "pi", "uid": "x" * 8}
    for job in (
        launcher_job(mj, owner={}, conditions=("Complete",)),  # orphaned (MPIJob deleted, Orphan)
        launcher_job(mj, owner={**stranger, "controller": True}, conditions=("Complete",)),  # another uid
    ):
        cluster = world(mj, [job], [launcher_pod(job, "pi")])
        assert deleted(handle(cluster, event("update", mj, at(31)))) == {}
        assert deleted(handle(cluster, ping(at(700)), orphan_grace_seconds=0)) == {}
        assert len(cluster.pods) == 1


def test_launcher_pod_not_touched_when_its_mpijob_is_gone():
    """The garbage collector takes the launcher Job and its pod with the MPIJob; podsweeper
    never deletes a launcher pod as an orphan (its Job may be anyone's once the MPIJob is gone)."""
    mj = mpijob(policy="All", conditions=SUCCEEDED, completed=at(30))
    job = launcher_job(mj, conditions=("Complete",))
    cluster = world(mj, [job], [launcher_pod(job, "pi")])
    cluster.observe("delete", parse_job(mj))
    assert deleted(handle(cluster, event("delete", mj, at(40)), orphan_grace_seconds=0)) == {}


def test_sweep_finds_the_643_launcher_leftover():
    mj = mpijob(policy="All", conditions=SUCCEEDED, completed=at(30))
    job = launcher_job(mj, conditions=("Complete",))
    cluster = world(mj, [job], [launcher_pod(job, "pi")])
    assert deleted(handle(cluster, ping(at(700)))) == {"pi-launcher-abcde": Rule.CLEAN_POD_POLICY_ALL}


def test_opt_out_and_dry_run_hold_for_the_launcher():
    mj = mpijob(policy="All", conditions=SUCCEEDED, completed=at(30))
    job = launcher_job(mj, conditions=("Complete",))
    opted = launcher_pod(job, "pi")
    opted["metadata"]["annotations"] = {"podsweeper.dev/skip": "true"}
    outcome = handle(world(mj, [job], [opted]), event("update", mj, at(31)))
    assert [a.decision.action.value for a in outcome.applied] == ["skip"]
    outcome = handle(world(mj, [job], [launcher_pod(job, "pi")]), event("update", mj, at(31)), dry_run=True)
    assert [a.result for a in outcome.applied] == [Result.DRY_RUN]


def test_stuck_terminating_never_force_deletes_a_launcher_pod():
    """Its batch Job is not read on that path, so it cannot be proven the MPIJob's: left alone
    (the workers, which the MPIJob controls, are covered as for any v1 job)."""
    from datetime import timedelta

    from podsweeper.engine import decide_stuck
    from podsweeper.model import Node

    mj = mpijob(policy="All", conditions=SUCCEEDED, completed=at(30))
    settings = Settings(stuck_terminating_seconds=60)
    lost = Node("kwok-node-0", "Unknown", at(0))
    for raw in (launcher_pod(launcher_job(mj, conditions=("Complete",)), "pi"), worker(mj, 0)):
        raw["metadata"]["deletionTimestamp"] = stamp(at(100))
        pod = parse_pod(raw)
        decision = next(
            iter(decide_stuck(pod, lost, parse_job(mj), at(100) + timedelta(seconds=120), settings)), None
        )
        assert (decision is not None) == (pod.batch_job is None), pod.name
