"""The real world behaves as the seed says: proven against the real operator, GC and scheduler.

One World (control plane, controller manager, scheduler, kwok, training operator v1.9.4) for
the session; each test works in its own namespace. Timings measured here are printed (run
with -s to see them) and recorded as junit properties.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.support.harness.waiting import wait_for
from tests.support.world.fixtures import world_fixtures

# What the upstream controllers do, pinned: run by `make world-facts` when a pinned version
# changes (tests/support/world/facts.py), not by every CI run.
pytestmark = pytest.mark.world_facts

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GROUP, VERSION = "kubeflow.org", "v1"
PLURALS = {
    "PyTorchJob": "pytorchjobs",
    "TFJob": "tfjobs",
    "MPIJob": "mpijobs",
    "XGBoostJob": "xgboostjobs",
    "PaddleJob": "paddlejobs",
    "JAXJob": "jaxjobs",
}


world, api, admin_api = world_fixtures(scope="session")


@pytest.fixture
def ns(namespace):
    """A fresh namespace per test, deleted afterwards: the shared `namespace` fixture, on this world."""
    return namespace


def pytorchjob(name: str, *, master: dict, workers: dict, n_workers: int = 3, run_policy=None) -> dict:
    """A PyTorchJob whose master/worker pods behave as the sim.podsweeper.dev annotations say."""

    def replica(n: int, annotations: dict) -> dict:
        return {
            "replicas": n,
            "restartPolicy": "OnFailure",
            "template": {
                "metadata": {"annotations": {f"sim.podsweeper.dev/{k}": v for k, v in annotations.items()}},
                "spec": {
                    "containers": [
                        {
                            "name": "pytorch",
                            "image": "pytorch",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ]
                },
            },
        }

    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "runPolicy": run_policy or {},
            "pytorchReplicaSpecs": {"Master": replica(1, master), "Worker": replica(n_workers, workers)},
        },
    }


class Cluster:
    """The few calls the tests need, as plain dicts."""

    def __init__(self, api, ns: str):
        self.core, self.custom, self.ns = client.CoreV1Api(api), client.CustomObjectsApi(api), ns

    def create(self, job: dict) -> dict:
        plural = PLURALS[job["kind"]]
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, plural, job)

    def job(self, name: str, kind: str = "PyTorchJob") -> dict | None:
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURALS[kind], name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def condition(self, name: str, type_: str) -> bool:
        job = self.job(name) or {}
        return any(
            c["type"] == type_ and c["status"] == "True" for c in job.get("status", {}).get("conditions", [])
        )

    def pods(self, job_name: str) -> dict[str, client.V1Pod]:
        selector = f"training.kubeflow.org/job-name={job_name}"
        return {
            p.metadata.name: p for p in self.core.list_namespaced_pod(self.ns, label_selector=selector).items
        }

    def all_running(self, job_name: str, count: int) -> bool:
        pods = self.pods(job_name)
        return len(pods) == count and all(
            p.status.phase == "Running"
            and bool(p.status.container_statuses)
            and all(c.state.running for c in p.status.container_statuses)
            for p in pods.values()
        )

    def delete_job(self, name: str, propagation: str) -> None:
        self.custom.delete_namespaced_custom_object(
            GROUP, VERSION, self.ns, "pytorchjobs", name, body={"propagationPolicy": propagation}
        )


def restarts(pod: client.V1Pod) -> int:
    return sum(c.restart_count for c in pod.status.container_statuses or [])


def test_seed_experiment_2_succeeded_job_leaves_workers_crash_looping(api, ns, record_property):
    """1 master (exit 0 after 5s) + 3 workers (exit 1 every 3s): Succeeded, workers loop on."""
    k = Cluster(api, ns)
    t0 = time.monotonic()
    k.create(
        pytorchjob(
            "pytest", master={"exit-code": "0", "run-for": "5s"}, workers={"exit-code": "1", "run-for": "3s"}
        )
    )
    wait_for("Succeeded=True", lambda: k.condition("pytest", "Succeeded"), timeout=90)
    record_property("seed_succeeded_after_s", round(time.monotonic() - t0, 1))
    before = k.pods("pytest")
    workers = {n: p for n, p in before.items() if "-worker-" in n}
    assert sorted(workers) == ["pytest-worker-0", "pytest-worker-1", "pytest-worker-2"]
    assert before["pytest-master-0"].status.phase == "Succeeded"

    time.sleep(20)
    after = k.pods("pytest")
    for name, pod in workers.items():
        now = after.get(name)
        assert now is not None, f"{name} was removed after Succeeded"
        assert now.metadata.uid == pod.metadata.uid, f"{name} was replaced"
        assert now.status.phase == "Running"
        assert restarts(now) >= restarts(pod) + 2, f"{name}: restarts {restarts(pod)} -> {restarts(now)}"
        last = now.status.container_statuses[0].last_state.terminated
        assert last is not None and last.exit_code == 1 and last.reason == "Error"
    assert k.condition("pytest", "Succeeded"), "the job left Succeeded"
    assert "simulated by kwok" in k.core.read_namespaced_pod_log("pytest-master-0", ns), "kubectl logs"
    print(f"seed: restarts 20 s after Succeeded: {[restarts(after[n]) for n in sorted(workers)]}")


def test_stages_finish_plain_pods_by_restart_policy(api, ns):
    """Never + exit 2 -> Failed with 2; OnFailure + exit 0 -> Succeeded; Always + exit 0 -> restarts."""
    k = Cluster(api, ns)
    cases = {"fails": ("Never", "2"), "succeeds": ("OnFailure", "0"), "restarts": ("Always", "0")}
    for name, (policy, code) in cases.items():
        annotations = {"sim.podsweeper.dev/exit-code": code, "sim.podsweeper.dev/run-for": "1s"}
        pod = {
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"restartPolicy": policy, "containers": [{"name": "c", "image": "x"}]},
        }
        k.core.create_namespaced_pod(ns, pod)

    def status(name):
        return k.core.read_namespaced_pod(name, ns).status

    wait_for("fails Failed", lambda: status("fails").phase == "Failed", timeout=30)
    assert status("fails").container_statuses[0].state.terminated.exit_code == 2
    wait_for("succeeds Succeeded", lambda: status("succeeds").phase == "Succeeded", timeout=30)
    wait_for("restarts restarted twice", lambda: restarts(k.core.read_namespaced_pod("restarts", ns)) >= 2)
    restarted = status("restarts")
    assert restarted.phase == "Running"
    assert restarted.container_statuses[0].last_state.terminated.reason == "Completed"


def test_seed_experiment_1_clean_pod_policy_all_deletes_every_pod(api, ns):
    k = Cluster(api, ns)
    ok = {"exit-code": "0", "run-for": "2s"}
    k.create(pytorchjob("clean", master=ok, workers=ok, run_policy={"cleanPodPolicy": "All"}))
    wait_for("Succeeded=True", lambda: k.condition("clean", "Succeeded"), timeout=60)
    wait_for("every pod deleted by the operator", lambda: not k.pods("clean"), timeout=30)
    assert k.condition("clean", "Succeeded")


def test_deleted_worker_of_running_job_is_recreated_at_once(api, ns, record_property):
    k = Cluster(api, ns)
    forever = {"exit-code": "0", "run-for": "1h"}
    k.create(pytorchjob("recreate", master=forever, workers=forever))
    wait_for("4 pods Running", lambda: k.all_running("recreate", 4), timeout=60)
    old = k.pods("recreate")["recreate-worker-1"]
    t0 = time.monotonic()
    k.core.delete_namespaced_pod("recreate-worker-1", ns)

    def replaced():
        pod = k.pods("recreate").get("recreate-worker-1")
        return pod if pod is not None and pod.metadata.uid != old.metadata.uid else None

    new = wait_for("a new recreate-worker-1", replaced, timeout=30, interval=0.02)
    delay = time.monotonic() - t0
    record_property("recreate_delay_s", round(delay, 3))
    print(f"recreate: a pod of the same name came back {delay * 1000:.0f} ms after the delete")
    assert restarts(new) == 0
    assert new.metadata.owner_references[0].uid == old.metadata.owner_references[0].uid


def test_orphan_delete_keeps_pods_and_background_delete_collects_them(api, ns):
    k = Cluster(api, ns)
    forever = {"exit-code": "0", "run-for": "1h"}
    k.create(pytorchjob("orphaned", master=forever, workers=forever, n_workers=1))
    wait_for("2 pods Running", lambda: k.all_running("orphaned", 2), timeout=60)
    k.delete_job("orphaned", "Orphan")
    wait_for("the job gone (GC removes the orphan finalizer)", lambda: k.job("orphaned") is None, timeout=30)
    wait_for(
        "ownerReferences stripped by the GC",
        lambda: all(not p.metadata.owner_references for p in k.pods("orphaned").values()),
        timeout=30,
    )
    time.sleep(3)
    pods = k.pods("orphaned")
    assert sorted(pods) == ["orphaned-master-0", "orphaned-worker-0"]
    assert all(p.status.phase == "Running" and not p.metadata.deletion_timestamp for p in pods.values())

    k.create(pytorchjob("collected", master=forever, workers=forever, n_workers=1))
    wait_for("2 pods Running", lambda: k.all_running("collected", 2), timeout=60)
    k.delete_job("collected", "Background")
    wait_for("the garbage collector deleting the pods", lambda: not k.pods("collected"), timeout=30)
    assert len(k.pods("orphaned")) == 2, "the orphans must stay"


def test_suspend_deletes_pods_and_sets_suspended(api, ns):
    k = Cluster(api, ns)
    forever = {"exit-code": "0", "run-for": "1h"}
    k.create(pytorchjob("suspended", master=forever, workers=forever, n_workers=2))
    wait_for("3 pods Running", lambda: k.all_running("suspended", 3), timeout=60)
    k.custom.patch_namespaced_custom_object(
        GROUP, VERSION, ns, "pytorchjobs", "suspended", {"spec": {"runPolicy": {"suspend": True}}}
    )
    wait_for("Suspended=True", lambda: k.condition("suspended", "Suspended"), timeout=30)
    wait_for("every pod deleted", lambda: not k.pods("suspended"), timeout=30)
    assert not k.condition("suspended", "Running")


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_example_is_valid_and_gets_pods(api, ns, path):
    """Each example passes the v1.9.4 CRD schema and webhook, and the operator makes its pods."""
    k = Cluster(api, ns)
    (job,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    plural = PLURALS[job["kind"]]
    k.custom.create_namespaced_custom_object(GROUP, VERSION, ns, plural, job, dry_run="All")
    k.create(job)
    name = job["metadata"]["name"]
    specs = next(v for key, v in job["spec"].items() if key.endswith("ReplicaSpecs"))
    expected = sum(r["replicas"] for r in specs.values())
    wait_for(f"{expected} pods of {name}", lambda: len(k.pods(name)) == expected, timeout=60)
