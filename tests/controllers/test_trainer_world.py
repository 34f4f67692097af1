"""What the real Kubeflow Trainer v2.3.0 and JobSet v0.12.0 controllers do, pinned as tests.

One World(trainer=True) for the session (control plane, controller manager, scheduler, kwok,
training operator v1.9.4, JobSet and Trainer controllers); each test works in its own namespace.
A TrainJob here runs on the `torch-distributed` ClusterTrainingRuntime (or a namespaced copy of
it), 2 nodes with 1 GPU each: TrainJob -> JobSet -> one batch Job `<name>-node-0` (parallelism 2)
-> 2 pods; the pods behave as the sim.podsweeper.dev annotations patched into the pod template say.
Run with -s to see the timings.
"""

from __future__ import annotations

import time

import pytest

from tests.fixtures.trainer import trainjob
from tests.support.harness.waiting import wait_for
from tests.support.world.fixtures import world_fixtures
from tests.support.world.trainjobs import ANCESTOR, JOBSET, TRAINER, Cluster, controller_of

# What the upstream controllers do, pinned: run by `make world-facts` when a pinned version
# changes (tests/support/world/facts.py), not by every CI run.
pytestmark = pytest.mark.world_facts


world, api, admin_api = world_fixtures(scope="session", trainer=True)


@pytest.fixture
def k(api, namespace):
    """A fresh namespace per test, deleted afterwards (the shared `namespace` fixture, on this
    world; GC and the namespace controller empty it), as a Cluster."""
    return Cluster(api, namespace)


def test_trainjob_completes_through_jobset_job_and_pods(k, record_property):
    t0 = time.monotonic()
    tj = k.create_trainjob(trainjob("done", run_for="3s"))
    wait_for("2 pods Running", lambda: k.running("done"), timeout=60)
    pods = k.pods("done")
    wait_for("TrainJob Complete=True", lambda: k.condition(k.trainjob("done"), "Complete"), timeout=60)
    record_property("trainjob_complete_after_s", round(time.monotonic() - t0, 1))
    print(f"trainer: TrainJob Complete {time.monotonic() - t0:.1f} s after create (pods run 3 s)")

    js = k.jobset("done")
    assert k.condition(js, "Completed") and js["status"]["terminalState"] == "Completed"
    owner = controller_of(js)
    assert (owner["kind"], owner["name"], owner["uid"]) == ("TrainJob", "done", tj["metadata"]["uid"])
    assert not js["metadata"].get("labels"), "Trainer puts no labels on the JobSet"

    (job,) = k.jobs()  # numNodes is the Job's parallelism, not a Job per node
    assert job.metadata.name == "done-node-0"
    assert job.metadata.labels[ANCESTOR] == "trainer"
    assert job.metadata.labels["jobset.sigs.k8s.io/jobset-uid"] == js["metadata"]["uid"]
    assert controller_of(job)["uid"] == js["metadata"]["uid"]
    assert (job.spec.backoff_limit, job.spec.parallelism, job.spec.completion_mode) == (6, 2, "Indexed")
    assert job.status.succeeded == 2

    assert len(pods) == 2
    for pod in pods:
        labels = pod.metadata.labels
        assert ANCESTOR not in labels, "the ancestor label is on the Job, not on its pods"
        assert not any(key.startswith("trainer.kubeflow.org/") for key in labels)
        assert labels["jobset.sigs.k8s.io/jobset-name"] == "done"
        assert labels["jobset.sigs.k8s.io/jobset-uid"] == js["metadata"]["uid"]
        assert labels["jobset.sigs.k8s.io/replicatedjob-name"] == "node"
        assert controller_of(pod)["uid"] == job.metadata.uid
        assert pod.spec.restart_policy == "OnFailure"  # the JobSet webhook's default
    # Nothing is cleaned up on success: the pods stay, Succeeded.
    after = k.pods("done")
    assert sorted(p.metadata.uid for p in after) == sorted(p.metadata.uid for p in pods)
    assert all(p.status.phase == "Succeeded" for p in after)
    cm = k.core.read_namespaced_config_map("done-runtime-snapshot", k.ns)
    assert controller_of(cm)["uid"] == tj["metadata"]["uid"]


def test_crash_looping_trainjob_fails_at_backoff_limit_then_comes_back_until_suspended(k, record_property):
    """OnFailure restarts count against backoffLimit 6; the Job controller deletes the pods; the
    JobSet and TrainJob fail. Deleting a Failed TrainJob's JobSet makes Trainer recreate it (and
    drop Failed); JobSet suspend is undone; only TrainJob suspend stops it."""
    t0 = time.monotonic()
    tj = k.create_trainjob(trainjob("crash", exit_code="1", run_for="1s"))
    wait_for("2 pods Running", lambda: k.running("crash"), timeout=60)
    wait_for("TrainJob Failed=True", lambda: k.condition(k.trainjob("crash"), "Failed"), timeout=90)
    record_property("trainjob_failed_after_s", round(time.monotonic() - t0, 1))
    print(f"trainer: crash-looping TrainJob Failed {time.monotonic() - t0:.1f} s after create")
    (job,) = k.jobs()
    failed = next(c for c in job.status.conditions if c.type == "Failed")
    assert (failed.status, failed.reason) == ("True", "BackoffLimitExceeded")
    assert k.condition(k.jobset("crash"), "Failed")
    assert not k.pods("crash"), "the Job controller deleted the crash-looping pods at backoffLimit"
    events = k.core.list_namespaced_event(k.ns, field_selector="involvedObject.kind=Job").items
    assert {"SuccessfulDelete", "BackoffLimitExceeded"} <= {e.reason for e in events}

    old = k.jobset("crash")["metadata"]["uid"]
    k.delete(JOBSET, "jobsets", "crash", "Background")
    new = wait_for(
        "a new JobSet for the Failed TrainJob",
        lambda: k.replaced_jobset("crash", old),
        timeout=30,
    )
    assert controller_of(new)["uid"] == tj["metadata"]["uid"]
    wait_for("its pods Running again", lambda: k.running("crash"), timeout=30)
    assert not k.condition(k.trainjob("crash"), "Failed"), "Trainer dropped the Failed condition"

    before = {p.metadata.uid for p in k.pods("crash")}
    k.patch(JOBSET, "jobsets", "crash", {"spec": {"suspend": True}})
    wait_for(
        "Trainer to resume the JobSet with new pods",
        lambda: (pods := k.running("crash")) and not before & {p.metadata.uid for p in pods},
        timeout=30,
    )
    assert k.jobset("crash")["spec"]["suspend"] is False

    k.patch(TRAINER, "trainjobs", "crash", {"spec": {"suspend": True}})
    wait_for("TrainJob Suspended=True", lambda: k.condition(k.trainjob("crash"), "Suspended"), timeout=30)
    wait_for("every pod deleted", lambda: not k.pods("crash"), timeout=30)
    time.sleep(5)
    assert not k.pods("crash"), "a suspended TrainJob stays stopped"
    js = k.jobset("crash")
    assert js["spec"]["suspend"] is True and k.condition(js, "Suspended")


def test_jobset_ttl_complete_trainjob_stays_gone_failed_one_is_recreated(k):
    """kubeflow/trainer#3779 in v2.3.0: after the JobSet TTL, a Complete TrainJob keeps no JobSet,
    a Failed one gets a new JobSet (new pods, Failed dropped), again and again."""
    runtime = k.runtime_copy("torch-ttl", ttlSecondsAfterFinished=2)
    k.create_trainjob(trainjob("ttl-ok", run_for="2s", runtime=runtime))
    k.create_trainjob(trainjob("ttl-bad", exit_code="1", run_for="1s", runtime=runtime))
    first = wait_for("ttl-bad's JobSet", lambda: k.jobset("ttl-bad"), timeout=30)
    assert first["spec"]["ttlSecondsAfterFinished"] == 2
    # ttl-bad is Failed for ~2 s only (its TTL), so it is watched first; ttl-ok ends sooner.
    wait_for(
        "ttl-bad Failed", lambda: k.condition(k.trainjob("ttl-bad"), "Failed"), timeout=90, interval=0.05
    )
    uid = first["metadata"]["uid"]
    wait_for("a new JobSet for the Failed ttl-bad", lambda: k.replaced_jobset("ttl-bad", uid), timeout=30)
    wait_for("its pods Running", lambda: k.running("ttl-bad"), timeout=30)
    assert not k.condition(k.trainjob("ttl-bad"), "Failed"), "Trainer dropped the Failed condition"

    assert k.condition(k.trainjob("ttl-ok"), "Complete")
    wait_for("the TTL deleting ttl-ok's JobSet", lambda: k.jobset("ttl-ok") is None, timeout=30)
    time.sleep(3)
    assert k.jobset("ttl-ok") is None, "the Complete TrainJob's JobSet is not recreated"
    assert not k.pods("ttl-ok") and not [j for j in k.jobs() if j.metadata.name.startswith("ttl-ok")]
    assert k.condition(k.trainjob("ttl-ok"), "Complete")


def test_orphan_delete_of_trainjob_leaves_jobset_running_without_owner(k):
    k.create_trainjob(trainjob("orph", run_for="1h"))
    wait_for("2 pods Running", lambda: k.running("orph"), timeout=60)
    k.delete(TRAINER, "trainjobs", "orph", "Orphan")
    wait_for("the TrainJob gone", lambda: k.trainjob("orph") is None, timeout=30)
    js = k.jobset("orph")
    assert not js["metadata"].get("ownerReferences")
    assert not js["metadata"].get("labels") and not js["metadata"].get("annotations")
    assert js["spec"]["replicatedJobs"][0]["template"]["metadata"]["labels"] == {ANCESTOR: "trainer"}
    time.sleep(3)
    pods = k.running("orph")
    assert pods, "the orphaned JobSet's pods keep running"
    (job,) = k.jobs()
    assert job.metadata.labels[ANCESTOR] == "trainer" and controller_of(job)["kind"] == "JobSet"
    assert all(not any(key.startswith("trainer.kubeflow.org/") for key in p.metadata.labels) for p in pods)
    assert not controller_of(k.core.read_namespaced_config_map("orph-runtime-snapshot", k.ns))

    k.delete(JOBSET, "jobsets", "orph", "Background")
    wait_for("the GC deleting Job and pods", lambda: not k.jobs() and not k.pods("orph"), timeout=30)


def test_orphan_delete_of_jobset_is_recreated_and_blocked_by_the_old_job_name(k):
    tj = k.create_trainjob(trainjob("clash", run_for="1h"))
    wait_for("2 pods Running", lambda: k.running("clash"), timeout=60)
    old = k.jobset("clash")["metadata"]["uid"]
    k.delete(JOBSET, "jobsets", "clash", "Orphan")
    new = wait_for(
        "Trainer recreating the JobSet",
        lambda: k.replaced_jobset("clash", old),
        timeout=30,
    )
    assert controller_of(new)["uid"] == tj["metadata"]["uid"]

    def clash_event():
        events = k.core.list_namespaced_event(k.ns, field_selector="involvedObject.kind=JobSet").items
        return [e for e in events if e.reason == "JobCreationFailed" and "already exists" in e.message]

    wait_for("JobCreationFailed: clash-node-0 already exists", clash_event, timeout=30)
    (job,) = k.jobs()  # the orphan: same name the new JobSet wants
    assert not job.metadata.owner_references
    assert job.metadata.labels["jobset.sigs.k8s.io/jobset-uid"] == old
    assert k.running("clash"), "the orphaned Job's pods keep running"
    assert not (k.jobset("clash").get("status") or {}).get("replicatedJobsStatus")


def test_deleted_pod_counts_as_failed_and_comes_back_after_the_job_backoff(k, record_property):
    k.create_trainjob(trainjob("podgone", run_for="1h"))
    pods = wait_for("2 pods Running", lambda: k.running("podgone"), timeout=60)
    victim = min(pods, key=lambda p: p.metadata.name)
    index = victim.metadata.labels["batch.kubernetes.io/job-completion-index"]
    t0 = time.monotonic()
    k.core.delete_namespaced_pod(victim.metadata.name, k.ns)

    def replacement():
        return next(
            (
                p
                for p in k.pods("podgone")
                if p.metadata.labels["batch.kubernetes.io/job-completion-index"] == index
                and p.metadata.uid != victim.metadata.uid
            ),
            None,
        )

    new = wait_for("a replacement pod for the index", replacement, timeout=60, interval=0.2)
    delay = time.monotonic() - t0
    record_property("pod_replaced_after_s", round(delay, 1))
    print(f"trainer: deleted pod replaced after {delay:.1f} s (the Job controller's failure back-off)")
    assert new.metadata.name != victim.metadata.name
    assert delay > 5, "the Job controller waits its pod-failure back-off (10 s) first"
    (job,) = k.jobs()
    assert job.status.failed == 1, "a deleted pod spends one unit of backoffLimit"
