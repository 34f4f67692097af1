"""Playing the training operator and the kubelet against the real API server.

The operator creates the job and its labelled, owned pods; the kubelet writes pod status
through the status subresource; the operator writes job conditions through the job's
status subresource. Objects come from tests/fixtures/builders.py.
"""

from __future__ import annotations

import copy
import json

from kubernetes import client

from tests.fixtures import builders

# Written by the API server, never by a client.
SERVER_FIELDS = (
    "uid",
    "resourceVersion",
    "managedFields",
    "creationTimestamp",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
)


def for_create(obj: dict) -> dict:
    """A builder object as a client would POST it: no server-set metadata, no status."""
    body = copy.deepcopy(obj)
    for key in SERVER_FIELDS:
        body["metadata"].pop(key, None)
    body.pop("status", None)
    return body


class Operator:
    """Creates and updates training jobs and their pods with the admin client."""

    def __init__(self, api: client.ApiClient, namespace: str):
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace

    def create_job(self, kind: str = "PyTorchJob", name: str = "pytest", **kw) -> dict:
        obj = builders.job(kind, name, self.namespace, **kw)
        created = self.custom.create_namespaced_custom_object(
            "kubeflow.org", "v1", self.namespace, builders.PLURALS[kind], for_create(obj)
        )
        return created

    def set_job_conditions(self, job: dict, conditions) -> dict:
        body = builders.set_conditions(job, conditions)
        return self.custom.patch_namespaced_custom_object_status(
            "kubeflow.org",
            "v1",
            self.namespace,
            builders.PLURALS[job["kind"]],
            job["metadata"]["name"],
            {"status": body["status"]},
        )

    def create_pod(self, job: dict, replica_type: str, index: int, **kw) -> dict:
        """A pod the way the operator makes it (no nodeName: without a kubelet, deletes are immediate)."""
        obj = builders.pod(job, replica_type, index, node=None, **kw)
        created = self.core.create_namespaced_pod(self.namespace, for_create(obj), _preload_content=False)
        return json.loads(created.data)

    def set_pod_status(self, pod: dict, phase: str, containers=None) -> dict:
        status = {"phase": phase}
        if containers is not None:
            status["containerStatuses"] = containers
        response = self.core.patch_namespaced_pod_status(
            pod["metadata"]["name"], self.namespace, {"status": status}, _preload_content=False
        )
        return json.loads(response.data)

    def pod_names(self) -> list[str]:
        return sorted(p.metadata.name for p in self.core.list_namespaced_pod(self.namespace).items)

    def events(self, reason: str | None = None) -> list:
        items = self.core.list_namespaced_event(self.namespace).items
        return [e for e in items if reason is None or e.reason == reason]
