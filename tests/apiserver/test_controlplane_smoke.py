"""The test control plane is what the integration tests assume it is.

A real API server, the real Kubeflow CRDs, and the function running with exactly the
permissions knative/function/rbac.yaml grants: every call the function makes is allowed,
and nothing else is (checked with real requests and with SelfSubjectAccessReviews).
"""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.fixtures import facts
from tests.support.controlplane.versions import KUBERNETES_VERSION

# (group, plural) of every training kind and of the chain's custom links, as the test side
# writes them out (tests/fixtures/facts.py; never podsweeper.kinds): the installed CRDs must
# serve exactly these.
TRAINING_KINDS = {(k.group, k.plural) for k in facts.TRAINING_KINDS}
LINK_CRDS = {(link.group, link.plural) for link in facts.LINKS if link.group != "batch"}


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
    items = {
        (item["spec"]["group"], item["spec"]["names"]["plural"]): item
        for item in json.loads(listing.data)["items"]
        if any(c["type"] == "Established" and c["status"] == "True" for c in item["status"]["conditions"])
    }
    established = set(items)
    assert established >= TRAINING_KINDS | LINK_CRDS
    # Nothing else in the training operator's group: a kind there that the facts lack fails.
    assert {crd for crd in established if crd[0] == facts.KUBEFLOW_GROUP} == {
        crd for crd in TRAINING_KINDS if crd[0] == facts.KUBEFLOW_GROUP
    }
    # The facts are the real CRDs': kind, scope, served versions (the mpi-operator's v2beta1
    # MPIJob replaces the v1 one only in World(mpi_operator=True)), the replica-spec key.
    for k in facts.TRAINING_KINDS:
        crd = items[(k.group, k.plural)]["spec"]
        assert (crd["names"]["kind"], crd["scope"]) == (k.kind, "Namespaced"), k.kind
        served = [v for v in crd["versions"] if v["served"]]
        assert [v["name"] for v in served] == [k.versions[0]], k.kind
        spec = served[0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        if k.replica_specs_key:
            assert k.replica_specs_key in spec, (k.kind, sorted(spec))
        assert k.suspend_path[0] in spec, (k.kind, sorted(spec))
        assert ("cleanPodPolicy" in spec) is k.top_level_clean_pod_policy, (k.kind, sorted(spec))
    for link in facts.LINKS:
        if link.group != "batch":
            crd = items[(link.group, link.plural)]["spec"]
            assert crd["names"]["kind"] == link.kind
            assert [v["name"] for v in crd["versions"] if v["served"]] == [link.version]


def test_pytorchjob_round_trip_uses_the_real_schema(admin_api, namespace):
    custom = client.CustomObjectsApi(admin_api)
    custom.create_namespaced_custom_object(
        "kubeflow.org", "v1", namespace, "pytorchjobs", pytorchjob("smoke", notAField=True)
    )
    job = custom.get_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", "smoke")
    assert job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] == 1
    assert "notAField" not in job["spec"]  # pruned: a structural schema, not a schemaless stub


def test_function_can_do_its_job(admin_api, function_api, namespace):
    worker = pod(
        "worker-0"
    )  # a training pod, by the operator's labels (the admission policy deletes no other)
    worker["metadata"]["labels"] = {
        "training.kubeflow.org/job-name": "job",
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
    }
    client.CoreV1Api(admin_api).create_namespaced_pod(namespace, worker)
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
            # About a job, as podsweeper's Events are (its admission policy refuses any other).
            "metadata": {"name": "worker-0.cleanup"},
            "involvedObject": {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "name": "worker",
                "namespace": namespace,
            },
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
    for kind in facts.TRAINING_KINDS:
        version = kind.versions[0]
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
    # patch: only Events, an MPIJob's and a TrainJob's suspend; never a pod, a ConfigMap
    # (replaced whole, with its resourceVersion), a Deployment or a namespace.
    client.CoreV1Api(admin_api).create_namespaced_pod(namespace, pod("worker-0"))
    client.CoreV1Api(admin_api).create_namespaced_config_map(namespace, {"metadata": {"name": "cm"}})
    label = {"metadata": {"labels": {"touched": "yes"}}}
    assert_forbidden(core.patch_namespaced_pod, "worker-0", namespace, label)
    assert_forbidden(core.patch_namespaced_pod_status, "worker-0", namespace, {"status": {}})
    assert_forbidden(core.patch_namespaced_config_map, "cm", namespace, label)
    assert_forbidden(client.AppsV1Api(function_api).patch_namespaced_deployment, "web", namespace, label)
    assert_forbidden(core.patch_namespace, namespace, label)


# The function's user may do exactly what knative/function/rbac.yaml grants (facts.FUNCTION_RBAC,
# written out) and what Kubernetes grants every authenticated user (facts.EVERY_USER); asked
# for every verb on those resources, and on resources no manifest names (facts.UNNAMED).
EXPECTED = facts.merged(facts.FUNCTION_RBAC, facts.EVERY_USER)
PROBED = sorted(
    {*facts.FUNCTION_RBAC, *facts.SOURCE_RBAC, *facts.SUSPEND_RBAC, *facts.NODES_RBAC}
    | {*facts.EVERY_USER, *facts.UNNAMED}
)


def test_function_access_review_grants_exactly_the_literal_table(function_api):
    """(tests/apiserver/test_security.py asks every resource the API serves, by real requests.)"""
    namespace = "anywhere"
    authz = client.AuthorizationV1Api(function_api)

    def allowed(verb: str, group: str, resource: str) -> bool:
        resource, _, subresource = resource.partition("/")
        attributes = {"namespace": namespace, "verb": verb, "group": group, "resource": resource}
        review = authz.create_self_subject_access_review(
            {"spec": {"resourceAttributes": {**attributes, "subresource": subresource}}}
        )
        return bool(review.status.allowed)

    granted = {
        (group, resource): verbs
        for group, resource in PROBED
        if (verbs := {verb for verb in facts.VERBS if allowed(verb, group, resource)})
    }
    wider = {key: sorted(verbs - EXPECTED.get(key, set())) for key, verbs in granted.items()}
    narrower = {key: sorted(verbs - granted.get(key, set())) for key, verbs in EXPECTED.items()}
    assert granted == EXPECTED, (
        f"allowed beyond the table: { {k: v for k, v in wider.items() if v} }; "
        f"in the table, refused: { {k: v for k, v in narrower.items() if v} }"
    )
