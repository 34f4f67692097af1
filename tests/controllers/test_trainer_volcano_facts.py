"""kubeflow/trainer#4033 against the real controllers: what becomes of a TrainJob's Volcano PodGroup.

Trainer v2.3.0 (with JobSet v0.12.0) and Volcano v1.10.0 (vc-scheduler with the Helm chart's
configuration, vc-controller-manager) on one World(trainer=True, volcano=True): 3 kwok nodes x 8
GPUs. A namespaced TrainingRuntime per test, torch-distributed plus what a Volcano user adds:
`podGroupPolicy.volcano: {}`, the queue annotation `scheduling.volcano.sh/queue-name: default`
on its template, and `schedulerName: volcano` on the pod template (Trainer v2.3.0 sets neither:
its plugin only creates the PodGroup and puts `scheduling.k8s.io/group-name` on the pods). The
small TrainJob is 2 nodes x 4 GPUs, requested (`resourcesPerNode.requests`), so minResources
is 8 GPUs.

What the tests pin (the README of tests/support/world has the timings):

1. Trainer's PodGroup: named as the TrainJob, controlled by it (blockOwnerDeletion), minMember
   = numNodes, minResources = the pods' summed *requests* (GPU limits alone give `{}`), queue
   from the annotation (none without it); Volcano admits it and binds the pods.
2. Failed (crash loop to the Job's backoffLimit; the Job controller deletes the pods): the
   PodGroup stays, goes back to `Inqueue` and stays there (30 s), the queue counting it Inqueue.
3. Complete: the PodGroup stays, `Completed`; the queue counts nothing.
4. TrainJob `spec.suspend: true`: pods deleted, the PodGroup stays and goes `Inqueue`.
5. A leftover `Inqueue` PodGroup (Failed or suspended TrainJob) keeps out a gang job that needs
   the GPUs it reserves in Volcano's enqueue accounting (overcommit plugin: 1.2 x 24 GPUs), with
   all 24 GPUs free on the nodes; deleting the PodGroup (uid precondition) admits it, but Trainer
   makes the PodGroup again at once (new uid) and it goes `Inqueue` again once the GPUs are
   free. A Complete TrainJob's PodGroup reserves nothing and is not made again.

Every test waits first for a quiet Volcano (no PodGroup anywhere, queue counts 0), so each one
reads the queue's numbers as its own. Run with -s to see the timeline.
"""

from __future__ import annotations

import sys
import time

import pytest

from tests.fixtures.trainer import trainjob
from tests.support.harness.waiting import wait_for
from tests.support.world import trainer_world
from tests.support.world.fixtures import world_fixtures
from tests.support.world.trainjobs import TRAINER, Cluster, controller_of
from tests.support.world.volcano_world import DEFAULT_QUEUE, SCHEDULER_NAME, Volcano

# What the upstream controllers do, pinned: run by `make world-facts` when a pinned version
# changes (tests/support/world/facts.py), not by every CI run.
pytestmark = pytest.mark.world_facts

VOLCANO = ("scheduling.volcano.sh", "v1beta1")
QUEUE_ANNOTATION = trainer_world.VOLCANO_QUEUE_ANNOTATION
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"  # Trainer puts it on the pods
GPU = "nvidia.com/gpu"
NODES, GPUS = 2, 4  # the small TrainJob: minResources 8 GPUs
# After the TrainJob's end the PodGroup is watched this long. What Volcano does with it settles
# within ~1 s (one scheduling cycle; the runs saw the final phase at the first read, 0.5 s).
HOLD = 30
# Bounds on what took 1-15 s in the runs (TrainJob to Running 1-3 s, crash loop to Failed
# ~10 s, Volcano's decisions one 1 s cycle): 4-10x for a busy 2-core machine.
RUNNING_WITHIN = 60
FAILED_WITHIN = 120
SETTLE = 30


def say(text: str) -> None:
    print(f"trainer-volcano: {text}", file=sys.stderr, flush=True)


world, api, admin_api = world_fixtures(trainer=True, volcano=True)


@pytest.fixture
def vc(api):
    """Volcano, quiet: no PodGroup left by an earlier test (its namespace is being deleted), the
    queue counting none and no GPU allocated."""
    volcano = Volcano(api)

    def quiet() -> bool:
        groups = volcano.custom.list_cluster_custom_object(*VOLCANO, "podgroups")["items"]
        status = volcano.queue().get("status") or {}
        counts = [status.get(key, 0) for key in ("pending", "inqueue", "running", "unknown")]
        return not groups and not any(counts) and volcano.allocated_gpus() == 0

    wait_for("Volcano quiet (no PodGroup, queue counts 0)", quiet, timeout=120, interval=0.5)
    return volcano


@pytest.fixture
def k(api, namespace, vc):
    return Cluster(api, namespace)


# -- the runtime, the TrainJobs and what the tests read ------------------------------------


def volcano_runtime(k: Cluster, name: str = "torch-volcano", queue: str | None = DEFAULT_QUEUE) -> dict:
    """A namespaced TrainingRuntime on Volcano (trainer_world.volcano_runtime), made in k's namespace."""
    rt = trainer_world.volcano_runtime(name, "TrainingRuntime", queue)
    k.custom.create_namespaced_custom_object(*TRAINER, k.ns, "trainingruntimes", rt)
    return {"name": name, "kind": "TrainingRuntime"}


def gang_job(
    name: str,
    runtime: dict,
    *,
    nodes: int = NODES,
    gpus: int = GPUS,
    run_for: str = "1h",
    exit_code: str = "0",
) -> dict:
    """tests/fixtures/trainer.py's TrainJob with `nodes` nodes of `gpus` GPUs, requested."""
    job = trainjob(name, runtime=runtime, run_for=run_for, exit_code=exit_code)
    job["spec"]["trainer"]["numNodes"] = nodes
    job["spec"]["trainer"]["resourcesPerNode"] = {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}
    return job


def phase(pg: dict | None) -> str | None:
    return ((pg or {}).get("status") or {}).get("phase")


ZERO = {"pending": 0, "inqueue": 0, "running": 0, "unknown": 0, "allocated_gpus": 0}


def queue_numbers(vc: Volcano) -> dict:
    """The default Queue's status: PodGroup counts (the controller manager's) and allocated GPUs
    (the scheduler's, written at each session close)."""
    status = vc.queue().get("status") or {}
    numbers = {key: status.get(key, 0) for key in ("pending", "inqueue", "running", "unknown")}
    numbers["allocated_gpus"] = int((status.get("allocated") or {}).get(GPU, "0"))
    return numbers


def bound(k: Cluster, jobset: str) -> list:
    return [p for p in k.pods(jobset) if p.spec.node_name]


def podgroup_events(k: Cluster, name: str) -> list:
    selector = f"involvedObject.kind=PodGroup,involvedObject.name={name}"
    return k.core.list_namespaced_event(k.ns, field_selector=selector).items


def delete_podgroup(k: Cluster, pg: dict) -> None:
    """As a cleaner would: a DELETE with the PodGroup's uid as precondition."""
    k.custom.delete_namespaced_custom_object(
        *VOLCANO,
        k.ns,
        "podgroups",
        pg["metadata"]["name"],
        body={"preconditions": {"uid": pg["metadata"]["uid"]}},
    )


def hold(vc: Volcano, ns: str, name: str, seconds: float = HOLD) -> list[str]:
    """Watch the PodGroup for `seconds`: it must exist throughout with one uid; the phases seen."""
    first = vc.podgroup(ns, name)
    assert first is not None, f"PodGroup {name} gone"
    seen: list[str] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pg = vc.podgroup(ns, name)
        assert pg is not None, f"PodGroup {name} deleted during the hold"
        assert pg["metadata"]["uid"] == first["metadata"]["uid"], f"PodGroup {name} made again"
        if phase(pg) not in seen[-1:]:
            seen.append(phase(pg))
        time.sleep(0.5)
    return seen


def running_gang(k: Cluster, vc: Volcano, name: str, nodes: int = NODES, gpus: int = GPUS) -> dict:
    """Wait for the TrainJob's pods Running, its PodGroup Running, the queue counting it; the PodGroup."""
    wait_for(f"{name}: {nodes} pods Running", lambda: k.running(name, nodes), timeout=RUNNING_WITHIN)
    pg = wait_for(
        f"PodGroup {name} Running",
        lambda: phase(p := vc.podgroup(k.ns, name)) == "Running" and p,
        timeout=SETTLE,
    )
    wait_for(
        f"queue default: {name} Running, {nodes * gpus} GPUs allocated",
        lambda: queue_numbers(vc) == {**ZERO, "running": 1, "allocated_gpus": nodes * gpus},
        timeout=SETTLE,
    )
    return pg


def make_failed(k: Cluster, vc: Volcano, rt: dict, name: str) -> tuple[dict, float]:
    """A TrainJob whose pods crash (exit 1 every 1 s, OnFailure) until the Job's backoffLimit 6: the
    Job controller deletes them, the Job, JobSet and TrainJob fail. Its PodGroup and when (monotonic)
    Failed was seen."""
    k.create_trainjob(gang_job(name, rt, run_for="1s", exit_code="1"))
    pg = wait_for(f"PodGroup {name}", lambda: vc.podgroup(k.ns, name), timeout=SETTLE)
    wait_for(
        f"{name} Failed", lambda: k.condition(k.trainjob(name), "Failed"), timeout=FAILED_WITHIN, interval=0.2
    )
    failed_at = time.monotonic()
    wait_for(f"{name}: pods deleted by the Job controller", lambda: not k.pods(name), timeout=SETTLE)
    return pg, failed_at


def make_suspended(k: Cluster, vc: Volcano, rt: dict, name: str) -> tuple[dict, float]:
    """A running TrainJob, then `spec.suspend: true`: Trainer suspends the JobSet, the pods go.
    Its PodGroup and when (monotonic) the suspend was sent."""
    k.create_trainjob(gang_job(name, rt))
    pg = running_gang(k, vc, name)
    k.patch(TRAINER, "trainjobs", name, {"spec": {"suspend": True}})
    suspended_at = time.monotonic()
    wait_for(f"{name} Suspended", lambda: k.condition(k.trainjob(name), "Suspended"), timeout=SETTLE)
    wait_for(f"{name}: pods deleted", lambda: not k.pods(name), timeout=SETTLE)
    return pg, suspended_at


def make_complete(k: Cluster, vc: Volcano, rt: dict, name: str) -> tuple[dict, float]:
    """A TrainJob whose pods exit 0 after 3 s. Its PodGroup and when (monotonic) Complete was seen."""
    k.create_trainjob(gang_job(name, rt, run_for="3s"))
    pg = wait_for(f"PodGroup {name}", lambda: vc.podgroup(k.ns, name), timeout=SETTLE)
    wait_for(f"{name} Complete", lambda: k.condition(k.trainjob(name), "Complete"), timeout=RUNNING_WITHIN)
    return pg, time.monotonic()


def settle_phase(vc: Volcano, ns: str, name: str, want: str, since: float) -> tuple[float, list]:
    """Seconds from `since` to the PodGroup's phase `want`, and the phases seen on the way (polled
    every 0.05 s from the call)."""
    seen: list[str | None] = []

    def reached() -> bool:
        now = phase(vc.podgroup(ns, name))
        if now not in seen[-1:]:
            seen.append(now)
        return now == want

    wait_for(f"PodGroup {name} {want}", reached, timeout=SETTLE, interval=0.05)
    return time.monotonic() - since, seen


# -- 1. the PodGroup Trainer makes --------------------------------------------------------


def test_trainer_makes_the_podgroup_and_volcano_admits_it_and_binds_the_pods(k, vc, record_property):
    rt = volcano_runtime(k)
    t0 = time.monotonic()
    tj = k.create_trainjob(gang_job("gang", rt))
    # Pods first, then the PodGroup: its phase only moves on, so one still Pending (or not yet
    # there) after the pods were read was so when they were.
    phases: list[str | None] = []
    made = None
    while True:
        pods = k.pods("gang")
        pg = vc.podgroup(k.ns, "gang")
        if pg is not None and made is None:
            made = time.monotonic() - t0
        if phase(pg) not in phases[-1:]:
            phases.append(phase(pg))
        if phase(pg) in (None, "Pending"):
            assert not any(p.spec.node_name for p in pods), "a pod bound before Volcano admitted the PodGroup"
        if k.running("gang"):
            break
        assert time.monotonic() - t0 < RUNNING_WITHIN, f"gang not Running; PodGroup phases {phases}"
        time.sleep(0.05)
    running_after = time.monotonic() - t0
    pg = running_gang(k, vc, "gang")
    say(f"PodGroup made {made:.2f} s after the TrainJob; phases {phases}; pods Running {running_after:.1f} s")
    record_property("podgroup_made_after_s", round(made, 2))
    record_property("pods_running_after_s", round(running_after, 1))
    # Then Running (running_gang). The pods exist from the start (nothing waits for Inqueue, as
    # the v1 operator does) and Volcano may enqueue and allocate in one cycle: Inqueue is not
    # always written, Pending not always seen.
    assert set(phases) <= {None, "Pending", "Inqueue", "Running"}

    # Named as the TrainJob, controlled by it; the gang and its requests; the queue annotation.
    assert pg["metadata"]["name"] == "gang"
    assert controller_of(pg) == {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "name": "gang",
        "uid": tj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert len(pg["metadata"]["ownerReferences"]) == 1
    assert pg["spec"] == {
        "minMember": NODES,
        "minResources": {GPU: str(NODES * GPUS)},
        "queue": DEFAULT_QUEUE,
    }
    assert not pg["metadata"].get("labels") and not pg["metadata"].get("annotations")
    wait_for(
        "PodGroup gang: status.running 2",
        lambda: ((vc.podgroup(k.ns, "gang") or {}).get("status") or {}).get("running") == NODES,
        timeout=SETTLE,
    )

    # Volcano binds the pods (not kube-scheduler); Trainer's annotation names the PodGroup.
    pods = k.pods("gang")
    for pod in pods:
        assert pod.spec.scheduler_name == SCHEDULER_NAME
        assert pod.metadata.annotations[GROUP_ANNOTATION] == "gang"
    events = k.core.list_namespaced_event(
        k.ns, field_selector="involvedObject.kind=Pod,reason=Scheduled"
    ).items
    assert {e.involved_object.name for e in events} == {p.metadata.name for p in pods}
    assert {e.source.component for e in events} == {SCHEDULER_NAME}
    say(f"queue default while gang runs: {queue_numbers(vc)}")

    # Without the queue annotation and with GPU limits only (tests/fixtures/trainer.py's TrainJob:
    # 2 x 1 GPU): no queue, minResources {} (Trainer sums the template's requests; limits become
    # requests only on the pods). Volcano's scheduler puts it in its default queue and binds it,
    # the queue's controller does not count it (it counts by spec.queue).
    plain = volcano_runtime(k, "torch-volcano-noqueue", queue=None)
    k.create_trainjob(trainjob("plain", runtime=plain, run_for="1h"))
    wait_for("plain: 2 pods Running", lambda: k.running("plain"), timeout=RUNNING_WITHIN)
    pg = wait_for("PodGroup plain Running", lambda: phase(p := vc.podgroup(k.ns, "plain")) == "Running" and p)
    assert pg["spec"] == {"minMember": 2, "minResources": {}}
    wait_for(
        "queue default: 10 GPUs allocated (8 + plain's 2), 1 PodGroup counted",
        lambda: queue_numbers(vc) == {**ZERO, "running": 1, "allocated_gpus": NODES * GPUS + 2},
        timeout=SETTLE,
    )
    say(f"queue default with plain too: {queue_numbers(vc)}")


# -- 2-4. after the end: Failed, Complete, suspended ---------------------------------------


def test_failed_trainjob_keeps_its_podgroup_inqueue(k, vc, record_property):
    rt = volcano_runtime(k)
    t0 = time.monotonic()
    # Each pod runs 3 s, exits 1 and is restarted after 2 s: Failed at the 6th restart, ~15 s.
    k.create_trainjob(gang_job("crash", rt, run_for="3s", exit_code="1"))
    pg = running_gang(k, vc, "crash")  # restarts keep the pods Running (OnFailure)
    before = queue_numbers(vc)
    wait_for(
        "crash Failed",
        lambda: k.condition(k.trainjob("crash"), "Failed"),
        timeout=FAILED_WITHIN,
        interval=0.2,
    )
    failed_at = time.monotonic()
    say(f"crash Failed {failed_at - t0:.1f} s after create; queue before: {before}")
    inqueue_after, on_the_way = settle_phase(vc, k.ns, "crash", "Inqueue", failed_at)
    wait_for("crash: pods deleted by the Job controller", lambda: not k.pods("crash"), timeout=SETTLE)
    phases = hold(vc, k.ns, "crash")

    after = vc.podgroup(k.ns, "crash")
    assert after["metadata"]["uid"] == pg["metadata"]["uid"], "the same PodGroup, never deleted"
    assert phases == ["Inqueue"], f"phases during the {HOLD} s: {phases}"
    assert after["spec"]["minResources"] == {GPU: str(NODES * GPUS)}
    assert not after["status"].get("running")
    unschedulable = [c for c in after["status"]["conditions"] if c["type"] == "Unschedulable"]
    assert [(c["status"], c["reason"]) for c in unschedulable] == [("True", "NotEnoughResources")]
    assert k.condition(k.trainjob("crash"), "Failed"), "the TrainJob stays Failed"
    numbers = queue_numbers(vc)
    say(
        f"{HOLD} s after Failed: PodGroup {phases[-1]} ({inqueue_after:.1f} s after Failed, via {on_the_way}), "
        f"{unschedulable[0]['message']!r}; queue after: {numbers}"
    )
    record_property("failed_podgroup_inqueue_after_s", round(inqueue_after, 1))
    assert before == {**ZERO, "running": 1, "allocated_gpus": NODES * GPUS}
    assert numbers == {**ZERO, "inqueue": 1}, "counted Inqueue; no GPU allocated"


def test_complete_trainjob_keeps_its_podgroup_completed(k, vc, record_property):
    rt = volcano_runtime(k)
    pg, complete_at = make_complete(k, vc, rt, "done")
    completed_after, _ = settle_phase(vc, k.ns, "done", "Completed", complete_at)
    phases = hold(vc, k.ns, "done")
    after = vc.podgroup(k.ns, "done")
    assert after["metadata"]["uid"] == pg["metadata"]["uid"]
    assert phases == ["Completed"], f"phases during the {HOLD} s: {phases}"
    assert after["status"].get("succeeded") == NODES
    assert all(p.status.phase == "Succeeded" for p in k.pods("done")) and len(k.pods("done")) == NODES
    numbers = queue_numbers(vc)
    say(f"{HOLD} s after Complete: PodGroup Completed ({completed_after:.1f} s after); queue: {numbers}")
    record_property("complete_podgroup_completed_after_s", round(completed_after, 1))
    assert numbers == ZERO, "a Completed PodGroup is counted nowhere"


def test_suspended_trainjob_keeps_its_podgroup_inqueue(k, vc, record_property):
    rt = volcano_runtime(k)
    k.create_trainjob(gang_job("paused", rt))
    pg = running_gang(k, vc, "paused")
    before = queue_numbers(vc)
    k.patch(TRAINER, "trainjobs", "paused", {"spec": {"suspend": True}})
    suspended_at = time.monotonic()
    inqueue_after, on_the_way = settle_phase(vc, k.ns, "paused", "Inqueue", suspended_at)
    wait_for("paused Suspended", lambda: k.condition(k.trainjob("paused"), "Suspended"), timeout=SETTLE)
    wait_for("paused: pods deleted", lambda: not k.pods("paused"), timeout=SETTLE)
    phases = hold(vc, k.ns, "paused")
    after = vc.podgroup(k.ns, "paused")
    assert after["metadata"]["uid"] == pg["metadata"]["uid"]
    assert phases == ["Inqueue"], f"phases during the {HOLD} s: {phases}"
    assert after["spec"] == pg["spec"]
    numbers = queue_numbers(vc)
    say(
        f"{HOLD} s after suspend: PodGroup Inqueue ({inqueue_after:.1f} s after the patch, via {on_the_way}); "
        f"queue: {numbers}"
    )
    record_property("suspended_podgroup_inqueue_after_s", round(inqueue_after, 1))
    assert before == {**ZERO, "running": 1, "allocated_gpus": NODES * GPUS}
    assert numbers == {**ZERO, "inqueue": 1}


# -- 5. does the leftover keep a next gang job out? ----------------------------------------

NEXT_NODES, NEXT_GPUS = 3, 8  # 24 GPUs: every GPU of the 3 nodes, all free


@pytest.mark.parametrize("end", ["failed", "suspended", "complete"])
def test_leftover_podgroup_and_a_gang_job_needing_its_gpus(k, vc, end, record_property):
    """Volcano's overcommit plugin admits a PodGroup (Pending -> Inqueue) only while the Inqueue
    PodGroups' minResources plus its own fit in 1.2 x the cluster's GPUs less those in use:
    8 + 24 > 28.8, although no pod holds a GPU."""
    rt = volcano_runtime(k)
    make = {"failed": make_failed, "suspended": make_suspended, "complete": make_complete}[end]
    left, ended_at = make(k, vc, rt, "left")
    settle_phase(vc, k.ns, "left", "Completed" if end == "complete" else "Inqueue", ended_at)
    k.create_trainjob(gang_job("next", rt, nodes=NEXT_NODES, gpus=NEXT_GPUS))
    created = time.monotonic()

    if end == "complete":
        wait_for("next: 3 pods Running", lambda: k.running("next", NEXT_NODES), timeout=RUNNING_WITHIN)
        say(f"complete leftover: next Running {time.monotonic() - created:.1f} s after create")
        pg = vc.podgroup(k.ns, "left")
        assert pg["metadata"]["uid"] == left["metadata"]["uid"] and phase(pg) == "Completed"
        delete_podgroup(k, pg)
        time.sleep(5)  # Trainer acted within 20 ms on the others
        assert vc.podgroup(k.ns, "left") is None, "a Complete TrainJob's PodGroup is not made again"
        return

    def overused() -> bool:
        return any("resource in cluster is overused" in (e.message or "") for e in podgroup_events(k, "next"))

    wait_for("Volcano refusing next: 'resource in cluster is overused'", overused, timeout=SETTLE)
    time.sleep(10)  # ten more scheduling cycles
    assert phase(vc.podgroup(k.ns, "next")) == "Pending"
    assert len(k.pods("next")) == NEXT_NODES and not bound(k, "next"), "next bound with the leftover there"
    assert phase(vc.podgroup(k.ns, "left")) == "Inqueue"
    blocked = queue_numbers(vc)
    say(f"{end} leftover Inqueue: next Pending (overused) for 10 s; queue {blocked}")
    assert blocked == {**ZERO, "pending": 1, "inqueue": 1}

    # The leftover deleted as a cleaner would: Trainer makes the PodGroup again, next is admitted.
    pg = vc.podgroup(k.ns, "left")
    delete_podgroup(k, pg)
    deleted = time.monotonic()
    again = wait_for(
        "left's PodGroup made again",
        lambda: (p := vc.podgroup(k.ns, "left")) and p["metadata"]["uid"] != pg["metadata"]["uid"] and p,
        timeout=SETTLE,
        interval=0.01,
    )
    made_again = time.monotonic() - deleted
    assert controller_of(again)["uid"] == controller_of(pg)["uid"]
    assert again["spec"] == pg["spec"]
    wait_for("next: 3 pods Running", lambda: k.running("next", NEXT_NODES), timeout=RUNNING_WITHIN)
    admitted = time.monotonic() - deleted
    say(
        f"{end}: left's PodGroup made again {made_again * 1000:.0f} ms after the delete; next Running {admitted:.1f} s"
    )
    record_property(f"{end}_podgroup_made_again_after_s", round(made_again, 3))
    record_property(f"{end}_next_running_after_delete_s", round(admitted, 1))
    # While next holds the 24 GPUs the new PodGroup is not admitted: 24 in use + 8 > 28.8.
    wait_for(
        "left's new PodGroup Pending", lambda: phase(vc.podgroup(k.ns, "left")) == "Pending", timeout=SETTLE
    )
    time.sleep(3)
    assert phase(vc.podgroup(k.ns, "left")) == "Pending"
    if end == "failed":
        assert k.condition(k.trainjob("left"), "Failed"), "the TrainJob stays Failed"
    else:
        assert k.condition(k.trainjob("left"), "Suspended") and not k.pods("left")

    # Once next is gone, the new PodGroup goes Inqueue again: reserving the 8 GPUs as before.
    k.delete(TRAINER, "trainjobs", "next", "Background")
    gone = time.monotonic()
    again_after, _ = settle_phase(vc, k.ns, "left", "Inqueue", gone)
    say(f"{end}: left's new PodGroup Inqueue {again_after:.1f} s after next's delete")
    wait_for(
        "queue default: left Inqueue, nothing else",
        lambda: queue_numbers(vc) == {**ZERO, "inqueue": 1},
        timeout=SETTLE,
    )
