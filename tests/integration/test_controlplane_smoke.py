"""The test control plane is what the integration tests assume it is.

A real API server, the real Kubeflow CRDs, and the function running with exactly the
permissions knative/function-rbac.yaml grants: every call the function makes is allowed,
and nothing else is (checked with real requests and with SelfSubjectAccessReviews).
"""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from podsweeper import kinds
from tests.controlplane.versions import KUBERNETES_VERSION

pytestmark = pytest.mark.integration

# (group, plural) of every kind podsweeper knows, and of the links of their chains: the
# installed CRDs must serve them.
TRAINING_KINDS = {(k.group, k.plural) for k in kinds.TRAINING_KINDS}
LINK_CRDS = {(link.group, link.plural) for link in kinds.LINKS if link.group != "batch"}


def pod(name: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "main", "image": "busybox"}]}}


def pytorchjob(name: str, **extra_spec) -> dict:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": 1,
                    "restartPolicy": "OnFailure",
                    "template": {"spec": {"containers": [{"name": "pytorch", "image": "busybox"}]}},
                }
            },
            **extra_spec,
        },
    }


def assert_forbidden(call, *args, **kwargs) -> None:
    with pytest.raises(ApiException) as err:
        call(*args, **kwargs)
    assert err.value.status == 403, err.value.body


def test_api_server_answers(control_plane, admin_api):
    info = client.VersionApi(admin_api).get_code()
    assert (info.major, info.minor) == tuple(KUBERNETES_VERSION.removeprefix("v").split(".")[:2])
    assert info.git_version == KUBERNETES_VERSION  # stamped as Kubernetes' own build does
    assert {ns.metadata.name for ns in client.CoreV1Api(admin_api).list_namespace().items} >= {
        "default",
        "kube-system",
        "podsweeper",
    }


def test_training_crds_are_established(admin_api):
    listing = client.ApiextensionsV1Api(admin_api).list_custom_resource_definition(_preload_content=False)
    established = {
        (item["spec"]["group"], item["spec"]["names"]["plural"])
        for item in json.loads(listing.data)["items"]
        if any(c["type"] == "Established" and c["status"] == "True" for c in item["status"]["conditions"])
    }
    assert established >= TRAINING_KINDS | LINK_CRDS
    # Nothing else in the training operator's group: a kind there that kinds.py lacks fails.
    assert {crd for crd in established if crd[0] == kinds.GROUP} == {
        crd for crd in TRAINING_KINDS if crd[0] == kinds.GROUP
    }


def test_pytorchjob_round_trip_uses_the_real_schema(admin_api, namespace):
    custom = client.CustomObjectsApi(admin_api)
    custom.create_namespaced_custom_object(
        "kubeflow.org", "v1", namespace, "pytorchjobs", pytorchjob("smoke", notAField=True)
    )
    job = custom.get_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", "smoke")
    assert job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] == 1
    assert "notAField" not in job["spec"]  # pruned: a structural schema, not a schemaless stub


def test_function_can_do_its_job(admin_api, function_api, namespace):
    client.CoreV1Api(admin_api).create_namespaced_pod(namespace, pod("worker-0"))
    client.CustomObjectsApi(admin_api).create_namespaced_custom_object(
        "kubeflow.org", "v1", namespace, "pytorchjobs", pytorchjob("job")
    )

    core = client.CoreV1Api(function_api)
    assert core.read_namespaced_pod("worker-0", namespace).metadata.name == "worker-0"
    assert [p.metadata.name for p in core.list_namespaced_pod(namespace).items] == ["worker-0"]
    assert any(p.metadata.namespace == namespace for p in core.list_pod_for_all_namespaces().items)

    event = core.create_namespaced_event(
        namespace,
        {
            "metadata": {"name": "worker-0.cleanup"},
            "involvedObject": {"kind": "Pod", "name": "worker-0", "namespace": namespace},
            "reason": "OrphanPodDeleted",
            "message": "smoke test",
            "type": "Normal",
            "count": 1,
        },
    )
    assert core.read_namespaced_event(event.metadata.name, namespace).count == 1
    core.patch_namespaced_event(event.metadata.name, namespace, {"count": 2})
    assert core.read_namespaced_event(event.metadata.name, namespace).count == 2

    custom = client.CustomObjectsApi(function_api)
    assert (
        custom.get_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", "job")[
            "metadata"
        ]["name"]
        == "job"
    )
    for kind in kinds.TRAINING_KINDS:
        version = kind.preferred_version
        custom.list_namespaced_custom_object(kind.group, version, namespace, kind.plural)
        custom.list_cluster_custom_object(kind.group, version, kind.plural)

    core.delete_namespaced_pod("worker-0", namespace)
    assert core.list_namespaced_pod(namespace).items == []


def test_function_cannot_do_anything_else(admin_api, function_api, namespace):
    client.CustomObjectsApi(admin_api).create_namespaced_custom_object(
        "kubeflow.org", "v1", namespace, "pytorchjobs", pytorchjob("job")
    )
    client.AppsV1Api(admin_api).create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx"}]},
                },
            },
        },
    )
    client.CoreV1Api(admin_api).create_namespaced_secret(
        namespace, {"metadata": {"name": "token"}, "stringData": {"k": "v"}}
    )

    core, custom = client.CoreV1Api(function_api), client.CustomObjectsApi(function_api)
    assert_forbidden(client.AppsV1Api(function_api).delete_namespaced_deployment, "web", namespace)
    assert_forbidden(core.read_namespaced_secret, "token", namespace)
    assert_forbidden(core.create_namespaced_pod, namespace, pod("intruder"))
    assert_forbidden(
        custom.patch_namespaced_custom_object,
        "kubeflow.org",
        "v1",
        namespace,
        "pytorchjobs",
        "job",
        {"metadata": {"labels": {"touched": "yes"}}},
    )
    assert_forbidden(
        custom.delete_namespaced_custom_object, "kubeflow.org", "v1", namespace, "pytorchjobs", "job"
    )


# (verb, group, resource, subresource, allowed): the whole ClusterRole, plus its edges.
ACCESS = [
    ("get", "", "pods", "", True),
    ("list", "", "pods", "", True),
    ("delete", "", "pods", "", True),
    ("get", "", "events", "", True),
    ("create", "", "events", "", True),
    ("patch", "", "events", "", True),
    *[
        (verb, group, plural, "", True)
        for group, plural in sorted(TRAINING_KINDS)
        for verb in ("get", "list")
    ],
    ("watch", "", "pods", "", False),
    ("create", "", "pods", "", False),
    ("update", "", "pods", "", False),
    ("patch", "", "pods", "", False),
    ("deletecollection", "", "pods", "", False),
    ("patch", "", "pods", "status", False),
    ("create", "", "pods", "eviction", False),
    ("list", "", "events", "", False),
    ("delete", "", "events", "", False),
    ("get", "", "secrets", "", False),
    ("get", "", "configmaps", "", True),
    ("create", "", "configmaps", "", True),
    ("update", "", "configmaps", "", True),
    ("get", "", "pods", "log", True),
    ("list", "", "configmaps", "", False),
    ("watch", "", "configmaps", "", False),
    ("patch", "", "configmaps", "", False),
    ("delete", "", "configmaps", "", False),
    ("delete", "apps", "deployments", "", False),
    ("patch", "kubeflow.org", "pytorchjobs", "", False),
    ("update", "kubeflow.org", "pytorchjobs", "status", False),
    ("delete", "kubeflow.org", "tfjobs", "", False),
    ("watch", "kubeflow.org", "pytorchjobs", "", False),
    ("get", "kubeflow.org", "mxjobs", "", False),
    ("create", "rbac.authorization.k8s.io", "clusterrolebindings", "", False),
    # Trainer v2: a chained job is read, and suspended by a merge patch (rule
    # finished-trainjob-restarted), never created, replaced or deleted; its chain's links
    # (JobSet, batch Job) are read and deleted (with a uid precondition, by rule orphan),
    # never created or changed.
    *[("patch", kind.group, kind.plural, "", True) for kind in kinds.TRAINING_KINDS if kind.chain],
    # mpi-operator: an MPIJob Failed but still run by its operator is suspended (merge patch).
    *[("patch", kind.group, kind.plural, "", True) for kind in kinds.TRAINING_KINDS if kind.launcher],
    *[
        (verb, kind.group, kind.plural, "", False)
        for kind in kinds.TRAINING_KINDS
        if kind.chain is not None
        for verb in ("create", "update", "delete", "deletecollection", "watch")
    ],
    *[
        (verb, kind.group, kind.plural, sub, False)
        for kind in kinds.TRAINING_KINDS
        if kind.chain is not None
        for verb, sub in (("update", "status"), ("patch", "status"), ("update", "finalizers"))
    ],
    *[
        (verb, link.group, link.plural, "", True)
        for link in kinds.LINKS
        for verb in ("get", "list", "delete")
    ],
    *[
        (verb, link.group, link.plural, "", False)
        for link in kinds.LINKS
        for verb in ("create", "update", "patch", "deletecollection", "watch")
    ],
    *[
        (verb, link.group, link.plural, "status", False)
        for link in kinds.LINKS
        for verb in ("update", "patch")
    ],
    ("delete", "batch", "cronjobs", "", False),
    ("list", "batch", "cronjobs", "", False),
    ("delete", "apps", "statefulsets", "", False),
    ("get", "jobset.x-k8s.io", "jobsets", "status", False),
]


@pytest.mark.parametrize(
    "verb,group,resource,subresource,allowed",
    ACCESS,
    ids=[f"{'can' if a[4] else 'cannot'}-{a[0]}-{a[2]}{'/' + a[3] if a[3] else ''}" for a in ACCESS],
)
def test_function_access_review(function_api, verb, group, resource, subresource, allowed):
    review = client.AuthorizationV1Api(function_api).create_self_subject_access_review(
        {
            "spec": {
                "resourceAttributes": {
                    "namespace": "anywhere",
                    "verb": verb,
                    "group": group,
                    "resource": resource,
                    "subresource": subresource,
                }
            }
        }
    )
    assert review.status.allowed is allowed, review.status.reason
