"""What the real mpi-operator v0.8.0 does, pinned as tests (the facts the launcher-chain rules rest on).

One World(mpi_operator=True) for the module: the control plane serves MPIJob kubeflow.org/v2beta1
(the mpi-operator's CRD), the training operator runs every other kind, the mpi-operator runs out of
cluster. An MPIJob here: one launcher (the batch Job `<name>-launcher`, restartPolicy Never,
backoffLimit 0) and two 1-GPU workers (restartPolicy Never by default) that run for an hour, as MPI
workers (sshd) do; the launcher's kwok annotations say how long it runs and how it exits. Each test
works in its own namespace. Run with -s to see the timings.
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from tests.fixtures.builders import for_create
from tests.fixtures.mpi import mpijob
from tests.support.harness.waiting import wait_for
from tests.support.world.fixtures import world_fixtures

# What the upstream controllers do, pinned: run by `make world-facts` when a pinned version
# changes (tests/support/world/facts.py), not by every CI run.
pytestmark = pytest.mark.world_facts

GROUP, VERSION, PLURAL = "kubeflow.org", "v2beta1", "mpijobs"


class Mpi:
    """One namespace of the world: create MPIJobs, read them, their Jobs and pods."""

    def __init__(self, api, ns: str):
        self.ns = ns
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    def create(self, body: dict) -> dict:
        return self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.ns, PLURAL, for_create(body, self.ns)
        )

    def job(self, name: str) -> dict:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name)

    def condition(self, name: str, kind: str) -> dict | None:
        conditions = (self.job(name).get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == kind and c["status"] == "True"), None)

    def pods(self, name: str, role: str | None = None) -> list[client.V1Pod]:
        selector = f"training.kubeflow.org/job-name={name}"
        if role:
            selector += f",training.kubeflow.org/job-role={role}"
        return self.core.list_namespaced_pod(self.ns, label_selector=selector).items

    def phases(self, name: str, role: str) -> list[str]:
        return sorted(p.status.phase for p in self.pods(name, role) if not p.metadata.deletion_timestamp)

    def launcher(self, name: str) -> client.V1Job:
        return self.batch.read_namespaced_job(f"{name}-launcher", self.ns)

    def uids(self, name: str, role: str) -> set[str]:
        return {p.metadata.uid for p in self.pods(name, role)}


def controller_of(obj) -> client.V1OwnerReference:
    return next(o for o in obj.metadata.owner_references if o.controller)


world, api, admin_api = world_fixtures(mpi_operator=True)


@pytest.fixture
def k(api, namespace):
    """A fresh namespace per test, deleted afterwards (the shared `namespace` fixture, on this
    world), as an Mpi."""
    return Mpi(api, namespace)


def test_mpijob_succeeds_through_its_launcher_job_and_keeps_its_workers(k, record_property):
    """The launcher is a batch Job the MPIJob controls, its pod controlled by that Job; workers are
    controlled by the MPIJob. Success is the launcher Job's: completionTime set, workers kept
    Running under the default cleanPodPolicy None (the leftover podsweeper deletes)."""
    t0 = time.monotonic()
    mj = k.create(mpijob("ok", launcher_run="2s"))
    wait_for("MPIJob Succeeded", lambda: k.condition("ok", "Succeeded"), timeout=60)
    record_property("mpijob_succeeded_after_s", round(time.monotonic() - t0, 1))
    print(f"mpi: MPIJob Succeeded {time.monotonic() - t0:.1f} s after create (launcher runs 2 s)")
    status = k.job("ok")["status"]
    assert status.get("completionTime"), "completionTime is set from the launcher Job's"

    job = k.launcher("ok")
    owner = controller_of(job)
    assert (owner.api_version, owner.kind, owner.uid) == (
        "kubeflow.org/v2beta1",
        "MPIJob",
        mj["metadata"]["uid"],
    )
    assert any(c.type == "Complete" and c.status == "True" for c in job.status.conditions)
    (launcher,) = k.pods("ok", "launcher")
    assert (controller_of(launcher).kind, controller_of(launcher).uid) == ("Job", job.metadata.uid)
    assert launcher.metadata.labels["training.kubeflow.org/operator-name"] == "mpi-operator"
    assert launcher.status.phase == "Succeeded"
    workers = k.pods("ok", "worker")
    assert sorted(w.metadata.name for w in workers) == ["ok-worker-0", "ok-worker-1"]
    for w in workers:
        assert (controller_of(w).kind, controller_of(w).uid) == ("MPIJob", mj["metadata"]["uid"])
        assert w.metadata.labels["training.kubeflow.org/operator-name"] == "mpi-operator"
        assert w.spec.restart_policy == "Never"
    assert k.phases("ok", "worker") == ["Running", "Running"], "cleanPodPolicy None keeps workers Running"


def test_643_clean_pod_policy_all_deletes_the_workers_but_not_the_launcher_pod(k):
    """kubeflow/mpi-operator#643 reproduces in v0.8.0: under All only workers go; the finished
    launcher Job's pod stays. Deleting it is final: a finished Job makes no new pod."""
    k.create(mpijob("all", policy="All", launcher_run="2s"))
    wait_for("MPIJob Succeeded", lambda: k.condition("all", "Succeeded"), timeout=60)
    wait_for("workers deleted by the operator", lambda: not k.pods("all", "worker"), timeout=30)
    (launcher,) = k.pods("all", "launcher")
    assert launcher.status.phase == "Succeeded" and not launcher.metadata.deletion_timestamp
    time.sleep(3)  # the operator's later syncs do not come back for it either
    assert [p.metadata.uid for p in k.pods("all", "launcher")] == [launcher.metadata.uid]

    k.core.delete_namespaced_pod(launcher.metadata.name, k.ns)
    wait_for("launcher pod gone", lambda: not k.pods("all", "launcher"), timeout=30)
    time.sleep(3)
    assert not k.pods("all", "launcher") and not k.pods("all", "worker"), "nothing re-created"


def test_647_workers_left_running_after_the_launcher_failed(k):
    """The launcher fails (backoffLimit 0): the MPIJob is Failed with completionTime set; under
    None its workers run on, holding their GPUs. A deleted worker is not re-created."""
    k.create(mpijob("fail", launcher_exit="1", launcher_run="2s"))
    failed = wait_for("MPIJob Failed", lambda: k.condition("fail", "Failed"), timeout=60)
    assert failed["reason"].startswith("BackoffLimitExceeded")
    assert k.job("fail")["status"].get("completionTime")
    assert k.phases("fail", "launcher") == ["Failed"]
    assert k.phases("fail", "worker") == ["Running", "Running"]

    k.core.delete_namespaced_pod("fail-worker-0", k.ns)
    wait_for("worker-0 gone", lambda: len(k.pods("fail", "worker")) == 1, timeout=30)
    time.sleep(3)
    assert [p.metadata.name for p in k.pods("fail", "worker")] == ["fail-worker-1"]


def test_647_evicted_worker_fails_the_job_but_the_operator_keeps_running_it(k, record_property):
    """kubeflow/mpi-operator#647 reproduces in v0.8.0: an evicted worker (phase Failed, reason
    Evicted, as the kubelet reports it) marks the MPIJob Failed (MPIJobEvicted) without
    completionTime, so cleanPodPolicy Running is not applied and the operator keeps reconciling:
    a deleted worker is re-created, a deleted launcher Job too. Only suspend stops it."""
    k.create(mpijob("evict", policy="Running", launcher_run="1h"))
    wait_for(
        "launcher and workers Running",
        lambda: (
            k.phases("evict", "worker") == ["Running", "Running"]
            and k.phases("evict", "launcher") == ["Running"]
        ),
        timeout=60,
    )
    k.core.patch_namespaced_pod_status(
        "evict-worker-1",
        k.ns,
        {
            "status": {
                "phase": "Failed",
                "reason": "Evicted",
                "message": "The node was low on resource: memory.",
            }
        },
    )
    failed = wait_for("MPIJob Failed", lambda: k.condition("evict", "Failed"), timeout=30)
    assert failed["reason"] == "MPIJobEvicted"
    time.sleep(2)
    assert not k.job("evict")["status"].get("completionTime")
    assert k.phases("evict", "worker") == ["Failed", "Running"], "cleanPodPolicy Running not applied"
    assert k.phases("evict", "launcher") == ["Running"]

    before = k.uids("evict", "worker")
    k.core.delete_namespaced_pod("evict-worker-0", k.ns)
    t0 = time.monotonic()
    wait_for("worker-0 re-created", lambda: k.uids("evict", "worker") - before, timeout=30)
    record_property("evicted_worker_recreated_after_s", round(time.monotonic() - t0, 2))

    job_uid = k.launcher("evict").metadata.uid
    k.batch.delete_namespaced_job("evict-launcher", k.ns, propagation_policy="Background")
    wait_for(
        "launcher Job re-created",
        lambda: _uid_or_none(k, "evict") not in (None, job_uid),
        timeout=30,
    )

    k.custom.patch_namespaced_custom_object(
        GROUP, VERSION, k.ns, PLURAL, "evict", {"spec": {"runPolicy": {"suspend": True}}}
    )
    wait_for(
        "Running workers deleted on suspend", lambda: k.phases("evict", "worker") == ["Failed"], timeout=30
    )
    wait_for("launcher pod deleted on suspend", lambda: not k.phases("evict", "launcher"), timeout=30)
    assert k.launcher("evict").spec.suspend is True
    assert k.condition("evict", "Suspended") and k.condition("evict", "Failed")
    time.sleep(3)
    assert k.phases("evict", "worker") == ["Failed"] and not k.phases("evict", "launcher"), "suspend sticks"


def _uid_or_none(k: Mpi, name: str) -> str | None:
    try:
        return k.launcher(name).metadata.uid
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise
