"""A pod event's payload is a claim: evidence (a log read, a record) only from the pod read now.

Issue 38, finding 2: the evidence path took the pod and container names from the payload and read
that container's log into the job's store, without reading the pod; any caller could have any
pod's log copied into a ConfigMap. Each lie below names real objects; the truthful event beside
it shows the same path does keep evidence, so a test that passes by keeping nothing at all fails.
"""

from __future__ import annotations

import copy

import pytest

from podsweeper.cluster.simulated import SimulatedCluster
from podsweeper.config import Settings
from podsweeper.intake import parse_event
from podsweeper.pipeline import Pipeline
from tests.fixtures.builders import at, event, job, pod, split
from tests.fixtures.builders import container_status as cs
from tests.fixtures.parse import parse_job, parse_pod

RUNNING = [("Created", at(0)), ("Running", at(2))]


class Recording(SimulatedCluster):
    """Records the log reads and evidence writes: what a lie must never cause."""

    def __post_init__(self):
        super().__post_init__()
        self.logs_read: list[tuple[str, str]] = []
        self.written: list[str] = []

    def container_log(self, namespace, pod, container, previous, lines, limit_bytes):
        self.logs_read.append((pod, container))
        return f"the log of {pod}/{container}"

    def write_evidence(self, job, records, version):
        self.written.append(job.name)
        return super().write_evidence(job, records, version)


def failed(raw: dict, restarts: int = 3, container: str = "pytorch") -> dict:
    """The same pod, claimed to show a failed run (CrashLoopBackOff after exit 1)."""
    claim = copy.deepcopy(raw)
    claim["status"]["phase"] = "Running"
    claim["status"]["containerStatuses"] = [
        cs(state="waiting", reason="CrashLoopBackOff", restarts=restarts, last_exit=1, name=container)
    ]
    return claim


def world():
    train = job(conditions=RUNNING)
    worker = pod(train, "Worker", 0, phase="Running", containers=[cs()])
    database = pod(
        train, "Worker", 9, phase="Running", containers=[cs(name="postgres")], owner=False, labels=False
    )
    database["metadata"]["name"] = "postgres-0"
    cluster = Recording()
    cluster.observe("add", parse_job(train))
    for obj in (worker, database):
        cluster.observe("add", parse_pod(obj))
    pipeline = Pipeline(cluster, Settings(dry_run=False, crashloop_restarts=50, evidence_log_lines=5))
    return train, worker, database, cluster, pipeline


def send(pipeline: Pipeline, raw: dict, seconds: float = 20) -> None:
    pipeline.handle(parse_event(*split(event("update", raw, at(seconds)))), at(seconds))


def test_the_truthful_failed_run_is_kept_with_its_log():
    """The control: a pod that is the job's and shows the failed run when read now."""
    _, worker, _, cluster, pipeline = world()
    cluster.observe("update", parse_pod(failed(worker)))
    send(pipeline, failed(worker))
    assert cluster.logs_read == [("pytest-worker-0", "pytorch")]
    assert cluster.written == ["pytest"]


def test_a_database_pod_claimed_to_be_a_jobs_gets_no_log_read():
    """The reproduction: another pod's name, its real uid, the job's ownerReference in the
    payload. Read now, the pod has no job: nothing is read, nothing written."""
    train, _, database, cluster, pipeline = world()
    claim = failed(database, container="postgres")
    claim["metadata"]["ownerReferences"] = [
        {
            "apiVersion": train["apiVersion"],
            "kind": "PyTorchJob",
            "name": "pytest",
            "uid": train["metadata"]["uid"],
            "controller": True,
        }
    ]
    claim["metadata"]["labels"] = {
        "training.kubeflow.org/job-name": "pytest",
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
    }
    send(pipeline, claim)
    assert cluster.logs_read == [] and cluster.written == []


@pytest.mark.parametrize(
    "lie",
    [
        "a failed run the pod read now does not show",
        "another uid than the pod of that name",
        "a pod that does not exist",
        "the pod's delete, with a failed run",
    ],
)
def test_a_lying_pod_event_of_a_jobs_pod_keeps_nothing(lie):
    _, worker, _, cluster, pipeline = world()
    claim = failed(worker)
    verb = "update"
    if lie == "another uid than the pod of that name":
        cluster.observe("update", parse_pod(failed(worker)))
        claim["metadata"]["uid"] = "00000000-0000-0000-0000-000000000001"
    elif lie == "a pod that does not exist":
        claim["metadata"]["name"] = "pytest-worker-7"
    elif lie == "the pod's delete, with a failed run":
        verb = "delete"
    pipeline.handle(parse_event(*split(event(verb, claim, at(20)))), at(20))
    assert cluster.logs_read == [] and cluster.written == []


def test_a_pod_claiming_a_job_by_an_owner_uid_the_job_does_not_have_keeps_nothing():
    """The payload's ownerReference uid once skipped reading the job: now the pod read now
    names its controller, and the job read now must have that uid."""
    train, worker, _, cluster, pipeline = world()
    forged = failed(worker)
    forged["metadata"]["ownerReferences"][0]["uid"] = "00000000-0000-0000-0000-000000000002"
    cluster.observe("update", parse_pod(forged))  # even the live pod says so: a look-alike
    send(pipeline, forged)
    assert cluster.logs_read == [] and cluster.written == []
