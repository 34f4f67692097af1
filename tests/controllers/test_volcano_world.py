"""What Volcano v1.10.0 does with the seed's gang-scheduled PyTorchJob, pinned as a test.

The seed's cluster ran its PyTorchJob `pytest` under Volcano: a PodGroup `pytest` with
minMember 4 in queue `default`, pods with `schedulerName: volcano`. Here the same job
(examples/pytorchjob-seed.yaml: the master exits 0 after 5 s, the three workers crash-loop,
no backoffLimit) runs on World(volcano=True): the training operator v1.9.4 with
`--gang-scheduler-name=volcano`, vc-scheduler and vc-controller-manager (tests/support/world/volcano_world.py),
kwok GPU nodes (3 x 8 GPUs). No podsweeper: the test deletes the workers itself, as podsweeper
would (a DELETE with the pod's uid as precondition). Run with -s to see the timeline.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from tests.support.harness.waiting import wait_for
from tests.support.world.launcher import World
from tests.support.world.volcano_world import DEFAULT_QUEUE, SCHEDULER_NAME, Volcano, gpu_job

# What the upstream controllers do, pinned: run by `make world-facts` when a pinned version
# changes (tests/support/world/facts.py), not by every CI run.
pytestmark = pytest.mark.world_facts

SEED = Path(__file__).resolve().parents[2] / "examples" / "pytorchjob-seed.yaml"
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"  # the operator's link from pod to PodGroup
NEXT_WORKERS = 21  # + 1 master = 22 GPUs: more than the 21 left free while 3 workers hold one each


def say(text: str) -> None:
    print(f"volcano-world: {text}", file=sys.stderr, flush=True)


@pytest.fixture(scope="module")
def world():
    with World(volcano=True) as w:
        yield w


@pytest.fixture(scope="module")
def admin_api(world):
    """This world's admin client in place of the session control plane's (tests/conftest.py): the
    shared `namespace` fixture then makes each test's namespace on this world's API server."""
    api = world.control_plane.api_client("admin")
    yield api
    api.close()


@pytest.fixture
def ns(admin_api, namespace):
    """A fresh namespace per test, deleted afterwards (the shared `namespace` fixture, on this
    world), with the admin client that reaches it."""
    return admin_api, namespace


def seed_job() -> dict:
    (job,) = [d for d in yaml.safe_load_all(SEED.read_text()) if d]
    return job


def pods(core: client.CoreV1Api, ns: str, job: str) -> list:
    selector = f"training.kubeflow.org/job-name={job}"
    return core.list_namespaced_pod(ns, label_selector=selector).items


def running(pod) -> bool:
    return pod.status.phase == "Running" and bool(pod.spec.node_name)


def restarts(pod) -> int:
    return max((c.restart_count for c in pod.status.container_statuses or []), default=0)


def events(core: client.CoreV1Api, ns: str, kind: str, reason: str) -> list:
    selector = f"involvedObject.kind={kind},reason={reason}"
    return core.list_namespaced_event(ns, field_selector=selector).items


def test_seed_job_under_volcano_then_its_workers_removed(ns, record_property):
    api, name = ns
    core, custom, vc = client.CoreV1Api(api), client.CustomObjectsApi(api), Volcano(api)
    t0 = time.monotonic()
    job = custom.create_namespaced_custom_object("kubeflow.org", "v1", name, "pytorchjobs", seed_job())

    # The operator creates the PodGroup and holds the pods back until Volcano admits it.
    phases: list[str] = []
    while True:
        # Pods first, then the PodGroup: its phase only moves on (Pending, Inqueue, Running),
        # so one still Pending after the pods were read was Pending when they were. (Read the
        # other way round, Volcano could admit it and the operator create the pods in between,
        # which CI saw once.)
        seen = pods(core, name, "pytest")
        pg = vc.podgroup(name, "pytest")
        phase = ((pg or {}).get("status") or {}).get("phase")
        if phase and phase not in phases:
            phases.append(phase)
        if phase in (None, "Pending"):
            assert not seen, "the operator created pods before Volcano admitted the PodGroup"
        if len([p for p in seen if running(p)]) >= 4:
            break
        assert time.monotonic() - t0 < 60, f"seed pods not all Running; PodGroup phases {phases}"
        time.sleep(0.05)
    say(f"PodGroup phases {phases}; 4 pods Running {time.monotonic() - t0:.1f} s after create")
    assert phases[-2:] == ["Inqueue", "Running"] and set(phases) <= {"Pending", "Inqueue", "Running"}
    pg = vc.podgroup(name, "pytest")
    (owner,) = [o for o in pg["metadata"]["ownerReferences"] if o.get("controller")]
    assert (owner["kind"], owner["uid"]) == ("PyTorchJob", job["metadata"]["uid"])
    assert (pg["spec"]["minMember"], pg["spec"]["queue"]) == (4, DEFAULT_QUEUE)  # as in the seed

    # Bound by Volcano, not by kube-scheduler.
    seed_pods = pods(core, name, "pytest")
    for pod in seed_pods:
        assert pod.spec.scheduler_name == SCHEDULER_NAME
        assert pod.metadata.annotations[GROUP_ANNOTATION] == "pytest"
    scheduled = events(core, name, "Pod", "Scheduled")
    assert {e.involved_object.name for e in scheduled} == {p.metadata.name for p in seed_pods}
    assert {e.source.component for e in scheduled} == {SCHEDULER_NAME}

    # All four run: Volcano counts them in the PodGroup (status.running) and in the queue's
    # allocation (GPUs), seen at least once before the master's 5 s are up.
    counted: set[tuple] = set()
    while not _succeeded(custom, name):
        pg_status = (vc.podgroup(name, "pytest") or {}).get("status") or {}
        counted.add((pg_status.get("running"), vc.allocated_gpus()))
        assert time.monotonic() - t0 < 60, f"job not Succeeded; (PodGroup running, queue GPUs) seen {counted}"
        time.sleep(0.1)
    assert (4, 4) in counted, f"(PodGroup running, queue GPUs) seen: {counted}"

    # The master succeeded: the job is Succeeded, the operator deletes the PodGroup (even under
    # cleanPodPolicy None) and leaves the workers crash-looping on their GPUs.
    succeeded_at = time.monotonic()
    wait_for("PodGroup pytest deleted", lambda: vc.podgroup(name, "pytest") is None, timeout=30)
    # The operator records its Event after the delete, through an asynchronous broadcaster:
    # wait for it rather than read once (CI once read it before it was written).
    wait_for(
        "the operator's SuccessfulDeletePodGroup Event",
        lambda: events(core, name, "PyTorchJob", "SuccessfulDeletePodGroup"),
        timeout=15,
    )
    deleted_by = {e.source.component for e in events(core, name, "PyTorchJob", "SuccessfulDeletePodGroup")}
    assert deleted_by == {"pytorchjob-controller"}
    workers = {p.metadata.uid: p for p in pods(core, name, "pytest") if "-worker-" in p.metadata.name}
    assert len(workers) == 3 and all(running(p) for p in workers.values())
    before = max(restarts(p) for p in workers.values())
    # The queue stops counting them: its PodGroup is gone, so Volcano no longer sees a job.
    wait_for("queue allocation back to 0 GPUs", lambda: vc.allocated_gpus() == 0, timeout=30)
    wait_for(
        "the workers restart again (crash loop, PodGroup gone)",
        lambda: max(restarts(p) for p in pods(core, name, "pytest")) > before,
        timeout=30,
    )
    still = {
        p.metadata.uid for p in pods(core, name, "pytest") if "-worker-" in p.metadata.name and running(p)
    }
    assert still == set(workers), "the workers keep their GPUs, uncounted by the queue"
    say(
        f"PodGroup gone and queue at 0 GPUs while 3 workers crash-loop on 3 GPUs ({time.monotonic() - t0:.1f} s)"
    )

    # Yet the nodes' GPUs are taken: a gang job needing all but two of the 24 GPUs stays unbound.
    custom.create_namespaced_custom_object(
        "kubeflow.org", "v1", name, "pytorchjobs", gpu_job("next", NEXT_WORKERS)
    )
    wait_for(
        "Volcano reports PodGroup next unschedulable with its 22 pods created",
        lambda: (
            len(pods(core, name, "next")) == NEXT_WORKERS + 1
            and any(e.involved_object.name == "next" for e in events(core, name, "PodGroup", "Unschedulable"))
        ),
        timeout=30,
    )

    # Until Volcano's cache holds all 22 pods its gang check alone refuses the job ("19/19 tasks
    # in gang unschedulable: ... 19 Pending, 22 minAvailable"; CI saw it); once it does, the
    # node predicates run and name the GPUs the workers hold.
    def messages() -> list[str]:
        return [
            e.message
            for e in events(core, name, "PodGroup", "Unschedulable")
            if e.involved_object.name == "next"
        ]

    wait_for(
        "Volcano names the GPU shortage for next",
        lambda: any("Insufficient nvidia.com/gpu" in m for m in messages()),
        timeout=30,
    )
    time.sleep(2)  # two more scheduling cycles (1 s each)
    assert not any(p.spec.node_name for p in pods(core, name, "next")), (
        "gang job bound while 21 GPUs are free"
    )
    say(f"next is blocked: {messages()}")

    # Remove the workers as podsweeper does; the next gang job then gets its 22 GPUs.
    removed = time.monotonic()
    for uid, pod in workers.items():
        core.delete_namespaced_pod(
            pod.metadata.name, name, body=client.V1DeleteOptions(preconditions={"uid": uid})
        )
    wait_for(
        "next: all 22 pods Running",
        lambda: sum(running(p) for p in pods(core, name, "next")) == NEXT_WORKERS + 1,
        timeout=60,
    )
    unblocked = time.monotonic() - removed
    record_property("volcano_next_running_after_workers_removed_s", round(unblocked, 1))
    say(f"next Running {unblocked:.1f} s after the workers' delete")
    assert {p.metadata.name for p in pods(core, name, "pytest")} == {"pytest-master-0"}, "nothing re-created"
    assert vc.podgroup(name, "pytest") is None, "the finished job's PodGroup stays gone"
    wait_for("queue allocation 22 GPUs (next)", lambda: vc.allocated_gpus() == NEXT_WORKERS + 1, timeout=30)
    record_property("volcano_seed_scenario_s", round(time.monotonic() - t0, 1))
    say(f"scenario {time.monotonic() - t0:.1f} s ({succeeded_at - t0:.1f} s to Succeeded)")


def _succeeded(custom: client.CustomObjectsApi, ns: str) -> bool:
    job = custom.get_namespaced_custom_object("kubeflow.org", "v1", ns, "pytorchjobs", "pytest")
    return any(
        c["type"] == "Succeeded" and c["status"] == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )
