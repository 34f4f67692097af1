"""What a user does in the real world (tests/support/world): submit PyTorchJobs, read back what the
controllers made of them, wait for it. How each replica's containers behave comes from the
kwok stage annotations in its pod template (tests/support/world/README.md, "Stages").
"""

from __future__ import annotations

import json
import time

from tests.fixtures.builders import secret_env
from tests.support.harness.waiting import wait_for

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"
FOREVER = {"exit-code": "0", "run-for": "1h"}
KINDS = {  # kind -> (plural, replica specs key, the container name the operator's webhook requires)
    "PyTorchJob": ("pytorchjobs", "pytorchReplicaSpecs", "pytorch"),
    "TFJob": ("tfjobs", "tfReplicaSpecs", "tensorflow"),
    "MPIJob": ("mpijobs", "mpiReplicaSpecs", "mpi"),
    "XGBoostJob": ("xgboostjobs", "xgbReplicaSpecs", "xgboost"),
    "PaddleJob": ("paddlejobs", "paddleReplicaSpecs", "paddle"),
    "JAXJob": ("jaxjobs", "jaxReplicaSpecs", "jax"),
}


def replica(count: int, sim: dict[str, str], *, policy: str = "OnFailure", kind: str = "PyTorchJob") -> dict:
    """One replica spec: `count` pods whose containers behave as `sim` says (exit-code, run-for,
    back-off), in the container the kind's webhook requires."""
    return {
        "replicas": count,
        "restartPolicy": policy,
        "template": {
            "metadata": {"annotations": {f"sim.podsweeper.dev/{k}": v for k, v in sim.items()}},
            "spec": {
                "containers": [
                    {
                        "name": KINDS[kind][2],
                        "image": "sim",
                        "env": secret_env(),
                        "resources": {"requests": {"cpu": "100m"}},
                    }
                ]
            },
        },
    }


def training_job(kind: str, name: str, replicas: dict[str, dict], run_policy: dict | None = None) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": kind,
        "metadata": {"name": name},
        "spec": {"runPolicy": run_policy or {}, KINDS[kind][1]: replicas},
    }


def pytorchjob(name: str, replicas: dict[str, dict], run_policy: dict | None = None) -> dict:
    return training_job("PyTorchJob", name, replicas, run_policy)


def condition(job: dict | None, type_: str) -> dict | None:
    for c in ((job or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == type_ and c["status"] == "True":
            return c
    return None


def running(pod: dict) -> bool:
    statuses = pod["status"].get("containerStatuses") or []
    return (
        pod["status"].get("phase") == "Running"
        and bool(statuses)
        and all("running" in c["state"] for c in statuses)
    )


class User:
    """A user of one namespace of a real-world stack, as plain dicts."""

    def __init__(self, stack):
        from kubernetes import client

        self.namespace = stack.namespace
        self.core = client.CoreV1Api(stack.admin_api)
        self.custom = client.CustomObjectsApi(stack.admin_api)

    def submit(self, job: dict) -> dict:
        """Create the job; returns it as stored (with its uid)."""
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, job)

    def job(self, name: str) -> dict | None:
        from kubernetes.client.rest import ApiException

        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def delete_job(self, name: str, propagation: str = "Background") -> None:
        self.custom.delete_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name, body={"propagationPolicy": propagation}
        )

    def pods(self, job: str | None = None) -> dict[str, dict]:
        selector = f"training.kubeflow.org/job-name={job}" if job else None
        body = json.loads(
            self.core.list_namespaced_pod(
                self.namespace, label_selector=selector, _preload_content=False
            ).data
        )
        return {p["metadata"]["name"]: p for p in body.get("items") or []}

    def create_pod(self, pod: dict) -> dict:
        return json.loads(self.core.create_namespaced_pod(self.namespace, pod, _preload_content=False).data)

    def wait_made(self, job: str, names: list[str], timeout: float = 60) -> dict[str, dict]:
        """The named pods of the job, once the operator has made them (in any phase)."""
        return wait_for(
            f"{job}: pods {', '.join(names)} made",
            lambda: (p := self.pods(job)) and set(names) <= set(p) and p,
            timeout,
        )

    def wait_running(self, job: str, count: int, timeout: float = 60) -> dict[str, dict]:
        """The job's `count` pods, once the operator made them and kwok runs them all."""
        return wait_for(
            f"{job}: {count} pods Running",
            lambda: (p := self.pods(job)) and len(p) == count and all(map(running, p.values())) and p,
            timeout,
        )

    def wait_condition(self, job: str, type_: str, timeout: float = 60) -> tuple[dict, float]:
        """The job's condition once the operator wrote it, and time.monotonic() when first seen."""
        found = wait_for(f"{job} {type_}", lambda: condition(self.job(job), type_), timeout, 0.02)
        return found, time.monotonic()
