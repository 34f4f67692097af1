"""Kubeflow Trainer v2 objects the real API server accepts, for the RBAC and source tests.

TrainJob (Trainer v2.3.0's CRD), JobSet (JobSet v0.12.0's CRD), batch/v1 Job and Pod, created
as the admin the way the controllers leave them: the JobSet named like its TrainJob, the Jobs
and pods labelled with the JobSet's name and uid, Trainer's mark on the Jobs, a controller
ownerReference at each step. No controller runs in the test cluster, so nothing is reconciled
and nothing is garbage-collected: `trainer_namespace` deletes what it made itself (the
conftest `namespace` fixture knows only the v1 kinds).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.fixtures import facts
from tests.fixtures import trainer as built
from tests.fixtures.builders import controller_ref, for_create

TRAINJOB, JOBSET, BATCH_JOB = facts.TRAINJOB, facts.JOBSET, facts.BATCH_JOB
TRAINJOB_API_VERSION = built.TRAINER
CONTAINER = {"name": "node", "image": "busybox"}


class TrainerObjects:
    """Creates Trainer v2 objects (tests/fixtures/trainer.py's) in one namespace as admin, and
    deletes them all at the end."""

    def __init__(self, admin_api: client.ApiClient, namespace: str):
        self.namespace = namespace
        self.core = client.CoreV1Api(admin_api)
        self.custom = client.CustomObjectsApi(admin_api)

    def _create(self, group: str, version: str, plural: str, body: dict) -> dict:
        return self.custom.create_namespaced_custom_object(
            group, version, self.namespace, plural, for_create(body)
        )

    def trainjob(self, name: str = "tj") -> dict:
        body = built.trainjob(name, self.namespace)
        return self._create(TRAINJOB.group, TRAINJOB.versions[0], TRAINJOB.plural, body)

    def jobset(self, name: str = "tj", owner: dict | None = None) -> dict:
        body = built.jobset(owner, name, self.namespace, marked=False, job_spec=built.SERVED_JOB)
        return self._create(JOBSET.group, JOBSET.version, JOBSET.plural, body)

    def batch_job(self, jobset: dict | None, name: str = "", *, labelled: bool = True) -> dict:
        """A Job as a JobSet makes it (`labelled`: its name/uid labels and Trainer's mark), or
        with `jobset` None a plain Job `name`."""
        body = built.batch_job(jobset, name=name, ns=self.namespace, spec=built.SERVED_JOB)
        if not labelled:
            body["metadata"]["labels"] = {}
        return self._create(BATCH_JOB.group, BATCH_JOB.version, BATCH_JOB.plural, body)

    def pod(self, name: str, labels: dict[str, str], owner: dict | None = None) -> dict:
        metadata: dict = {"name": name, "labels": labels}
        if owner is not None:
            metadata["ownerReferences"] = [controller_ref(owner)]
        body = {"metadata": metadata, "spec": {"containers": [CONTAINER]}}
        pod = self.core.create_namespaced_pod(self.namespace, body)
        return client.ApiClient().sanitize_for_serialization(pod)

    def chain_pod(self, job: dict, index: int = 0) -> dict:
        """A pod of a JobSet's Job: the JobSet's labels, the Job as controller."""
        labels = {k: v for k, v in job["metadata"]["labels"].items() if k != facts.TRAINER_MARK_LABEL}
        return self.pod(f"{job['metadata']['name']}-{index}", labels, owner=job)

    def delete_all(self) -> None:
        """Every training job (v1 and v2), every chain link, every pod of the namespace; a
        kind this API server does not serve (404) has nothing to delete."""
        collections = [(k.group, k.versions[0], k.plural) for k in facts.TRAINING_KINDS]
        collections += [(link.group, link.version, link.plural) for link in facts.LINKS]
        for group, version, plural in collections:
            try:
                self.custom.delete_collection_namespaced_custom_object(group, version, self.namespace, plural)
            except ApiException as error:
                if error.status != 404:
                    raise
        self.core.delete_collection_namespaced_pod(self.namespace, grace_period_seconds=0)


@contextlib.contextmanager
def trainer_namespace(admin_api: client.ApiClient) -> Iterator[TrainerObjects]:
    """A fresh namespace `t-<random>`; its objects and itself are deleted at the end."""
    name = f"t-{secrets.token_hex(4)}"
    core = client.CoreV1Api(admin_api)
    core.create_namespace({"metadata": {"name": name}})
    objects = TrainerObjects(admin_api, name)
    try:
        yield objects
    finally:
        objects.delete_all()
        with contextlib.suppress(ApiException):
            core.delete_namespace(name)
