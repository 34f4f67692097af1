"""Kubeflow Trainer v2 against the real API server, as the function's user: every call the
function makes for a TrainJob's chain (TrainJob -> JobSet -> batch Job -> Pod) is allowed by
knative/function/rbac.yaml, and what it must never do is refused.

The function's v2 calls (podsweeper/cluster/kube/): GET and LIST trainjobs, and PATCH one's
spec.suspend (uid in the merge patch); GET and LIST jobsets (a namespace or all of them); LIST
batch Jobs by `jobset.sigs.k8s.io/jobset-name` (GET one only for a Reference-mode event);
DELETE a JobSet or batch Job with preconditions.uid and propagationPolicy Background; Events,
the evidence ConfigMap and the finish mark ConfigMap on the TrainJob. The ConfigMaps'
ownerReference is also checked under the OwnerReferencesPermissionEnforcement admission
plugin, which many clusters enable and the shared test control plane does not: a second API
server with it on.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from podsweeper import kinds
from podsweeper.cluster.kube import KubeCluster, load_api
from podsweeper.decisions import Result
from podsweeper.evidence import store_name
from podsweeper.model import EventRecord, FinishMark, JobRef
from tests.fixtures import facts
from tests.support.trainer_objects import TRAINJOB_API_VERSION, TrainerObjects, trainer_namespace

# The kinds as the test side writes them out (group, version, plural: tests/fixtures/facts.py),
# and the package's own objects for them, looked up by those facts (a package that names them
# otherwise fails here, not silently elsewhere): the package's calls take the package's kinds.
TJ, JS, BJ = facts.TRAINJOB, facts.JOBSET, facts.BATCH_JOB
TRAINJOB = kinds.lookup(TRAINJOB_API_VERSION, TJ.kind)
JOBSET = kinds.intermediate_lookup(f"{JS.group}/{JS.version}", JS.kind)
BATCH_JOB = kinds.intermediate_lookup(f"{BJ.group}/{BJ.version}", BJ.kind)
assert TRAINJOB and JOBSET and BATCH_JOB, "podsweeper.kinds lacks a kind tests/fixtures/facts.py names"
NAME_LABEL = facts.JOBSET_NAME_LABEL
ENFORCE_OWNER_REFERENCES = "OwnerReferencesPermissionEnforcement"


@pytest.fixture
def trainer(admin_api, namespace):
    """The shared `namespace` fixture with the Trainer v2 objects made in it; they are deleted
    here first, as `trainer_namespace` does (the shared fixture knows only the v1 kinds)."""
    objects = TrainerObjects(admin_api, namespace)
    yield objects
    objects.delete_all()


@pytest.fixture
def cluster(control_plane):
    return KubeCluster(load_api(str(control_plane.function_kubeconfig)))


def forbidden(call, *args, **kwargs) -> str:
    with pytest.raises(ApiException) as err:
        call(*args, **kwargs)
    assert err.value.status == 403, err.value.body
    return err.value.body


def test_function_reads_a_trainjob_and_its_chain(cluster, function_api, trainer):
    ns = trainer.namespace
    tj = trainer.trainjob("tj")
    js = trainer.jobset("tj", owner=tj)
    job = trainer.batch_job(js)
    trainer.batch_job(None, "nightly-backup", labelled=False)  # not a JobSet's: never listed
    pod = trainer.chain_pod(job)
    ref = JobRef(TRAINJOB, ns, "tj")

    found = cluster.get_job(ref)
    assert found is not None and found.uid == tj["metadata"]["uid"]
    assert [j.name for j in cluster.list_jobs(ns, TRAINJOB)] == ["tj"]
    assert ("tj", ns) in {(j.name, j.namespace) for j in cluster.list_jobs(None, TRAINJOB)}

    assert cluster.get_intermediate(JOBSET, ns, "tj").uid == js["metadata"]["uid"]
    assert [w.uid for w in cluster.list_intermediates(JOBSET, ns, "")] == [js["metadata"]["uid"]]
    assert js["metadata"]["uid"] in {w.uid for w in cluster.list_intermediates(JOBSET, None, "")}

    # The batch Jobs, by label, in the namespace and across all of them (the sweep): allowed.
    # (What cluster/kube/ makes of the answer is test_batch_jobs_listed_by_the_function_are_read.)
    batch = client.BatchV1Api(function_api)
    listed = batch.list_namespaced_job(ns, label_selector=f"{NAME_LABEL}=tj").items
    assert [j.metadata.uid for j in listed] == [job["metadata"]["uid"]]
    swept = batch.list_job_for_all_namespaces(label_selector=NAME_LABEL).items
    assert (ns, job["metadata"]["name"]) in {(j.metadata.namespace, j.metadata.name) for j in swept}
    assert (ns, "nightly-backup") not in {(j.metadata.namespace, j.metadata.name) for j in swept}
    # Reference mode: an event names the Job, the function reads it.
    assert cluster.get_intermediate(BATCH_JOB, ns, job["metadata"]["name"]).uid == job["metadata"]["uid"]

    assert [p.uid for p in cluster.list_job_pods(ref)] == [pod["metadata"]["uid"]]


def test_batch_jobs_listed_by_the_function_are_read(cluster, trainer):
    ns = trainer.namespace
    js = trainer.jobset("tj", owner=trainer.trainjob("tj"))
    job = trainer.batch_job(js)
    trainer.batch_job(None, "nightly-backup", labelled=False)
    by_name = list(cluster.list_intermediates(BATCH_JOB, ns, f"{NAME_LABEL}=tj"))
    assert [w.uid for w in by_name] == [job["metadata"]["uid"]]
    swept = {(w.namespace, w.name) for w in cluster.list_intermediates(BATCH_JOB, None, NAME_LABEL)}
    assert (ns, job["metadata"]["name"]) in swept and (ns, "nightly-backup") not in swept


@pytest.mark.parametrize("link", [JOBSET, BATCH_JOB], ids=lambda link: link.plural)
def test_function_deletes_a_link_only_by_its_uid(cluster, trainer, admin_api, link):
    """What a v2 rule deletes, deleted as the function does it: uid precondition, background."""
    ns = trainer.namespace
    tj = trainer.trainjob("tj")
    js = trainer.jobset("tj", owner=tj)
    job = trainer.batch_job(js)
    target = js if link is JOBSET else job
    name, uid = target["metadata"]["name"], target["metadata"]["uid"]

    assert (
        cluster.delete_intermediate(link, ns, name, "00000000-0000-0000-0000-000000000000") is Result.CONFLICT
    )
    assert cluster.get_intermediate(link, ns, name).uid == uid
    assert cluster.delete_intermediate(link, ns, name, uid) is Result.DELETED
    assert cluster.get_intermediate(link, ns, name) is None  # background: gone at once, GC does the rest
    assert cluster.delete_intermediate(link, ns, name, uid) is Result.GONE
    # The TrainJob is not the function's to delete: still there.
    custom = client.CustomObjectsApi(admin_api)
    custom.get_namespaced_custom_object(TJ.group, TJ.versions[0], ns, TJ.plural, "tj")


def test_function_suspends_a_trainjob_only_by_its_uid(cluster, trainer, admin_api):
    """Rule finished-trainjob-restarted: spec.suspend on the TrainJob, the uid a precondition."""
    ns = trainer.namespace
    tj = trainer.trainjob("tj")
    uid = tj["metadata"]["uid"]
    assert cluster.suspend_job(JobRef(TRAINJOB, ns, "tj", "00000000-0000-0000-0000-000000000000")) is (
        Result.CONFLICT
    )
    assert not cluster.get_job(JobRef(TRAINJOB, ns, "tj")).suspended
    assert cluster.suspend_job(JobRef(TRAINJOB, ns, "tj", uid)) is Result.SUSPENDED
    found = client.CustomObjectsApi(admin_api).get_namespaced_custom_object(
        TJ.group, TJ.versions[0], ns, TJ.plural, "tj"
    )
    assert found["spec"]["suspend"] is True and found["metadata"]["uid"] == uid
    assert cluster.suspend_job(JobRef(TRAINJOB, ns, "gone", uid)) is Result.GONE


def test_function_writes_events_and_evidence_about_a_trainjob(cluster, trainer, admin_api):
    ns = trainer.namespace
    tj = trainer.trainjob("tj")
    ref = JobRef(TRAINJOB, ns, "tj", tj["metadata"]["uid"], tj["apiVersion"])
    now = datetime.now(UTC).replace(microsecond=0)
    warning = EventRecord("tj.podsweeper-test", ref, "Warning", "UnboundedJobSetRestarts", "test", now)
    assert cluster.record_event(warning)
    assert cluster.record_event(warning)  # the same again: create answers 409, then a patch
    event = client.CoreV1Api(admin_api).read_namespaced_event("tj.podsweeper-test", ns)
    assert (event.involved_object.kind, event.involved_object.uid, event.count) == (
        "TrainJob",
        tj["metadata"]["uid"],
        2,
    )

    assert cluster.write_evidence(ref, [{"pod": "tj-node-0-0", "exit_code": 1}], None)
    records, version = cluster.read_evidence(ref)
    assert cluster.write_evidence(ref, [*records, {"pod": "tj-node-0-1", "exit_code": 2}], version)
    assert len(cluster.read_evidence(ref)[0]) == 2
    store = client.CoreV1Api(admin_api).read_namespaced_config_map(store_name("tj"), ns)
    (owner,) = store.metadata.owner_references
    assert (owner.api_version, owner.kind, owner.uid) == (TRAINJOB_API_VERSION, "TrainJob", ref.uid)

    # The finish mark: created, then replaced by a later finish.
    assert cluster.read_finish_mark(ref) is None
    cluster.write_finish_mark(ref, FinishMark("Failed", now, "js-uid-1"))
    cluster.write_finish_mark(ref, FinishMark("Failed", now, "js-uid-2"))
    assert cluster.read_finish_mark(ref) == FinishMark("Failed", now, "js-uid-2")


def test_function_cannot_change_the_chain(function_api, trainer):
    """Delete, with a uid, is the one write on a JobSet or batch Job; a patch (its suspend)
    the one write on a TrainJob."""
    ns = trainer.namespace
    tj = trainer.trainjob("tj")
    js = trainer.jobset("tj", owner=tj)
    job = trainer.batch_job(js)
    custom = client.CustomObjectsApi(function_api)
    batch, apps = client.BatchV1Api(function_api), client.AppsV1Api(function_api)
    label = {"metadata": {"labels": {"touched": "yes"}}}

    forbidden(
        custom.delete_namespaced_custom_object,
        TJ.group,
        TJ.versions[0],
        ns,
        TJ.plural,
        "tj",
    )
    forbidden(
        custom.replace_namespaced_custom_object,
        TJ.group,
        TJ.versions[0],
        ns,
        TJ.plural,
        "tj",
        tj,
    )
    forbidden(
        custom.patch_namespaced_custom_object_status,
        TJ.group,
        TJ.versions[0],
        ns,
        TJ.plural,
        "tj",
        {"status": {}},
    )
    copy = {
        "apiVersion": TRAINJOB_API_VERSION,
        "kind": TJ.kind,
        "metadata": {"name": "tj-copy"},
        "spec": tj["spec"],
    }
    forbidden(custom.create_namespaced_custom_object, TJ.group, TJ.versions[0], ns, TJ.plural, copy)
    forbidden(custom.delete_collection_namespaced_custom_object, TJ.group, TJ.versions[0], ns, TJ.plural)
    for link, obj in ((JS, js), (BJ, job)):
        name = obj["metadata"]["name"]
        fresh = {k: v for k, v in obj.items() if k != "status"}
        fresh["metadata"] = {"name": f"{name}-copy", "labels": obj["metadata"].get("labels") or {}}
        forbidden(custom.create_namespaced_custom_object, link.group, link.version, ns, link.plural, fresh)
        forbidden(
            custom.patch_namespaced_custom_object, link.group, link.version, ns, link.plural, name, label
        )
        forbidden(
            custom.replace_namespaced_custom_object, link.group, link.version, ns, link.plural, name, obj
        )
        forbidden(
            custom.patch_namespaced_custom_object_status,
            link.group,
            link.version,
            ns,
            link.plural,
            name,
            {"status": {}},
        )
        forbidden(
            custom.delete_collection_namespaced_custom_object, link.group, link.version, ns, link.plural
        )
    forbidden(batch.delete_collection_namespaced_job, ns)
    forbidden(batch.list_namespaced_cron_job, ns)
    forbidden(apps.list_namespaced_deployment, ns)
    forbidden(apps.delete_collection_namespaced_deployment, ns)


# -- evidence under OwnerReferencesPermissionEnforcement ------------------------------------------


@pytest.fixture(scope="module")
def enforcing_plane():
    """A second control plane whose kube-apiserver also runs OwnerReferencesPermissionEnforcement
    (off by default in kube-apiserver): the only CRDs it needs are Trainer's."""
    from tests.support.controlplane import launcher, manifests

    plugins = (f"--enable-admission-plugins={ENFORCE_OWNER_REFERENCES}",)
    plane = launcher.ControlPlane(install_crds=False, apiserver_args=plugins).start()
    try:
        admin = plane.api_client("admin")
        manifests.install_crds(admin, manifests.trainer_crds(), timeout=90)
        admin.close()
        yield plane
    finally:
        plane.stop()


def test_configmaps_owned_by_a_trainjob_need_no_finalizers_grant(enforcing_plane):
    """cluster/kube/records.py writes its ConfigMaps' ownerReference (evidence, finish mark) with
    blockOwnerDeletion false: the plugin then asks nothing beyond creating and replacing the
    ConfigMap, so the ClusterRole needs no `update trainjobs/finalizers`. The control: the
    same ownerReference with blockOwnerDeletion true is refused to the function, so the
    plugin is on."""
    admin = enforcing_plane.api_client("admin")
    try:
        with trainer_namespace(admin) as trainer:
            ns = trainer.namespace
            tj = trainer.trainjob("tj")
            ref = JobRef(TRAINJOB, ns, "tj", tj["metadata"]["uid"], tj["apiVersion"])
            cluster = KubeCluster(load_api(str(enforcing_plane.function_kubeconfig)))
            assert cluster.write_evidence(ref, [{"pod": "tj-node-0-0", "exit_code": 1}], None)
            records, version = cluster.read_evidence(ref)
            assert cluster.write_evidence(ref, [*records, {"pod": "tj-node-0-1"}], version)
            cluster.write_finish_mark(ref, FinishMark("Failed", None, "js-uid-1"))
            cluster.write_finish_mark(ref, FinishMark("Complete", None, "js-uid-2"))
            assert cluster.read_finish_mark(ref).condition == "Complete"

            function_api = enforcing_plane.api_client("function")
            core = client.CoreV1Api(function_api)
            blocking = {
                "metadata": {
                    "name": "blocking",
                    "ownerReferences": [
                        {
                            "apiVersion": tj["apiVersion"],
                            "kind": "TrainJob",
                            "name": "tj",
                            "uid": tj["metadata"]["uid"],
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "data": {},
            }
            body = forbidden(core.create_namespaced_config_map, ns, blocking)
            function_api.close()
            assert "blockOwnerDeletion" in json.loads(body)["message"], body
    finally:
        admin.close()
