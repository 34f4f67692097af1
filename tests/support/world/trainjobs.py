"""The calls on TrainJobs that the Trainer v2 world's tests and recordings share.

The TrainJobs themselves are tests/fixtures/trainer.py's `trainjob(name, run_for=...)`: on the
`torch-distributed` ClusterTrainingRuntime (or a namespaced copy, `Cluster.runtime_copy`),
2 nodes x 1 GPU, their pods behaving as the kwok stage annotations (sim.podsweeper.dev/exit-code,
run-for) say.
"""

from __future__ import annotations

import copy
import time

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.fixtures.builders import for_create
from tests.support.world.trainer_world import runtimes

TRAINER = ("trainer.kubeflow.org", "v1alpha1")
JOBSET = ("jobset.x-k8s.io", "v1alpha2")
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"


class Cluster:
    """The few calls the tests need, as plain dicts (pods and Jobs as client models)."""

    def __init__(self, api, ns: str):
        self.ns = ns
        self.core, self.batch, self.custom = (
            client.CoreV1Api(api),
            client.BatchV1Api(api),
            client.CustomObjectsApi(api),
        )

    def create_trainjob(self, job: dict, timeout: float = 10.0) -> dict:
        """Create it in this namespace; on a runtime copy just made, Trainer's webhook may not
        know the runtime yet (it looks it up in its informer cache: 403 "not found"), so that
        is tried again."""
        body = for_create(job, self.ns)
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.custom.create_namespaced_custom_object(*TRAINER, self.ns, "trainjobs", body)
            except ApiException as error:
                if error.status != 403 or "not found" not in str(error.body) or time.monotonic() > deadline:
                    raise
            time.sleep(0.1)

    def runtime_copy(self, name: str, **jobset_spec) -> dict:
        """A namespaced TrainingRuntime: torch-distributed with extra JobSet spec fields."""
        (base,) = runtimes()
        rt = {"apiVersion": "/".join(TRAINER), "kind": "TrainingRuntime", "metadata": {"name": name}}
        rt["spec"] = copy.deepcopy(base["spec"])
        rt["spec"]["template"]["spec"].update(jobset_spec)
        self.custom.create_namespaced_custom_object(*TRAINER, self.ns, "trainingruntimes", rt)
        return {"name": name, "kind": "TrainingRuntime"}

    def _get(self, group_version, plural: str, name: str) -> dict | None:
        try:
            return self.custom.get_namespaced_custom_object(*group_version, self.ns, plural, name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def trainjob(self, name: str) -> dict | None:
        return self._get(TRAINER, "trainjobs", name)

    def jobset(self, name: str) -> dict | None:
        return self._get(JOBSET, "jobsets", name)

    def replaced_jobset(self, name: str, old_uid: str) -> dict | None:
        """The JobSet called name if it is not the one with old_uid (Trainer made a new one)."""
        js = self.jobset(name)
        return js if js is not None and js["metadata"]["uid"] != old_uid else None

    def condition(self, obj: dict | None, type_: str) -> bool:
        conditions = ((obj or {}).get("status") or {}).get("conditions") or []
        return any(c["type"] == type_ and c["status"] == "True" for c in conditions)

    def jobs(self) -> list[client.V1Job]:
        return self.batch.list_namespaced_job(self.ns).items

    def pods(self, jobset: str) -> list[client.V1Pod]:
        selector = f"jobset.sigs.k8s.io/jobset-name={jobset}"
        return self.core.list_namespaced_pod(self.ns, label_selector=selector).items

    def running(self, jobset: str, count: int = 2) -> list[client.V1Pod] | None:
        pods = [p for p in self.pods(jobset) if not p.metadata.deletion_timestamp]
        ok = len(pods) == count and all(
            p.status.phase == "Running"
            and p.status.container_statuses
            and p.status.container_statuses[0].state.running
            for p in pods
        )
        return pods if ok else None

    def delete(self, group_version, plural: str, name: str, propagation: str) -> None:
        body = {"propagationPolicy": propagation}
        self.custom.delete_namespaced_custom_object(*group_version, self.ns, plural, name, body=body)

    def patch(self, group_version, plural: str, name: str, body: dict) -> None:
        self.custom.patch_namespaced_custom_object(*group_version, self.ns, plural, name, body)


def controller_of(obj) -> dict | None:
    refs = obj["metadata"].get("ownerReferences") if isinstance(obj, dict) else obj.metadata.owner_references
    for ref in refs or []:
        ref = ref if isinstance(ref, dict) else client.ApiClient().sanitize_for_serialization(ref)
        if ref.get("controller"):
            return ref
    return None
