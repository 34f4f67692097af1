"""kubeflow/trainer#4052 against the real controllers: what becomes of a finished TrainJob.

Trainer v2.3.0 has no `ttlSecondsAfterFinished` of its own (only the JobSet it makes has one, set
through the runtime; none of the shipped runtimes sets it), so a TTL for finished TrainJobs would be
podsweeper's (an opt-in rule). These tests pin what such a rule relies on, on one World(trainer=True)
for the module (Trainer v2.3.0, JobSet v0.12.0, kube-controller-manager's garbage collector), a
namespace per test, TrainJobs from tests/fixtures/trainer.py on `torch-distributed` (2 nodes):

1. The served TrainJob schema has no `spec.ttlSecondsAfterFinished`: a TrainJob created with one
   is stored without it (pruned, with a warning; refused under strict field validation).
   `spec.managedBy` is in the schema, defaulted to Trainer's own controller; the API server's
   CEL rules (not Trainer's webhook) take only that value and `kueue.x-k8s.io/multikueue`, and
   make it immutable. Trainer leaves a multikueue TrainJob alone: no JobSet, no status.
2. A Complete and a Failed TrainJob keep what they have: nothing deletes the JobSet, the batch Job
   or a Complete one's Succeeded pods (a Failed one's pods were deleted by the Job controller at
   its backoffLimit, before Failed). The finish condition carries a lastTransitionTime.
3. Deleting a finished TrainJob (Background, uid precondition) removes it at once (no finalizer),
   the garbage collector removes its ConfigMap, JobSet, Service, Job and pods, and nothing is made
   again, for a Failed TrainJob too (Trainer makes a new JobSet only for a TrainJob that still
   exists). A DELETE whose uid precondition does not match answers 409 and deletes nothing.
4. `spec.suspend: true` on a Complete TrainJob is accepted (Suspended=True) and changes nothing
   else: it stays, Complete, with its JobSet, Job and pods.

The tests read what happened from the API server's watch history (a watch from a resourceVersion
taken before, replayed afterwards): an object made and collected between two polls shows there.
Run with -s to see the timings; the README of tests/support/world has them.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.fixtures.builders import for_create
from tests.fixtures.trainer import trainjob
from tests.support import figures
from tests.support.harness.waiting import wait_for
from tests.support.world.fixtures import world_fixtures
from tests.support.world.trainjobs import JOBSET, TRAINER, Cluster

# What the upstream controllers do, pinned: run by `make world-facts` when a pinned version
# changes (tests/support/world/facts.py), not by every CI run.
pytestmark = pytest.mark.world_facts

TRAINER_CONTROLLER = "trainer.kubeflow.org/trainjob-controller"
MULTIKUEUE = "kueue.x-k8s.io/multikueue"
# How long a finished TrainJob's objects are watched for a delete; and how long after a delete,
# or after a multikueue TrainJob's create, for anything made again. Trainer acted within 20 ms
# in every case it acts (tests/support/world/README.md), the garbage collector within 0.1 s.
HOLD = 10
AFTER = 5
# Bounds on the deletes, measured from before the DELETE to the first read that no longer finds
# them (polled every 20 ms): the TrainJob 5-15 ms, its JobSet, Job and pods 50-120 ms. Asserted:
# "at once" and "the garbage collector removes them", each with a margin of 1-2 orders of
# magnitude for a 2-core machine busy with the whole world: 1 s and 10 s.
GONE_WITHIN = 1.0
COLLECTED_WITHIN = 10.0


world, api, admin_api = world_fixtures(scope="module", trainer=True)


@pytest.fixture
def k(api, namespace):
    """A fresh namespace per test, deleted afterwards (the shared `namespace` fixture, on this
    world), as a Cluster."""
    return Cluster(api, namespace)


def say(text: str) -> None:
    print(f"trainer-ttl: {text}", flush=True)


def revision(k: Cluster) -> str:
    """The API server's resourceVersion now (one etcd revision for every kind)."""
    return k.custom.list_namespaced_custom_object(*JOBSET, k.ns, "jobsets")["metadata"]["resourceVersion"]


def history(k: Cluster, since: str) -> list[tuple[int, str, str, str, str]]:
    """Every change since the resourceVersion `since` to the namespace's TrainJobs, JobSets, Jobs,
    pods, ConfigMaps and Services, as (resourceVersion, type, kind, name, uid) in etcd order."""
    sources = [
        ("TrainJob", k.custom.list_namespaced_custom_object, (*TRAINER, k.ns, "trainjobs")),
        ("JobSet", k.custom.list_namespaced_custom_object, (*JOBSET, k.ns, "jobsets")),
        ("Job", k.batch.list_namespaced_job, (k.ns,)),
        ("Pod", k.core.list_namespaced_pod, (k.ns,)),
        ("ConfigMap", k.core.list_namespaced_config_map, (k.ns,)),
        ("Service", k.core.list_namespaced_service, (k.ns,)),
    ]

    def replay(kind, lister, args) -> list[tuple[int, str, str, str, str]]:
        # A watch from `since` replays the API server's history; the server ends it after 1 s.
        out = []
        for change in watch.Watch().stream(lister, *args, resource_version=since, timeout_seconds=1):
            obj = change["object"]
            meta = obj["metadata"] if isinstance(obj, dict) else obj.metadata.to_dict()
            rv, uid = meta.get("resourceVersion") or meta["resource_version"], meta["uid"]
            out.append((int(rv), change["type"], kind, meta["name"], uid))
        return out

    with ThreadPoolExecutor(len(sources)) as pool:
        return sorted(change for changes in pool.map(lambda s: replay(*s), sources) for change in changes)


def delete_trainjob(k: Cluster, name: str, uid: str):
    """DELETE the TrainJob as a TTL rule would: Background, on the uid it decided on."""
    options = client.V1DeleteOptions(
        propagation_policy="Background", preconditions=client.V1Preconditions(uid=uid)
    )
    return k.custom.delete_namespaced_custom_object(*TRAINER, k.ns, "trainjobs", name, body=options)


def finish_both(k: Cluster) -> tuple[dict, dict]:
    """A Complete TrainJob `ok` (pods run 2 s) and a Failed one `bad` (pods exit 1 after 1 s,
    crash-looping to the Job's backoffLimit), as read once both are finished."""
    t0 = time.monotonic()
    k.create_trainjob(trainjob("ok", run_for="2s"))
    k.create_trainjob(trainjob("bad", exit_code="1", run_for="1s"))
    ok = wait_for("ok Complete", lambda: k.condition(tj := k.trainjob("ok"), "Complete") and tj, timeout=60)
    say(f"ok Complete {time.monotonic() - t0:.1f} s after create")
    bad = wait_for("bad Failed", lambda: k.condition(tj := k.trainjob("bad"), "Failed") and tj, timeout=120)
    say(f"bad Failed {time.monotonic() - t0:.1f} s after create")
    return k.trainjob("ok") or ok, k.trainjob("bad") or bad


def owned(k: Cluster, name: str) -> dict[str, set[str]]:
    """The uids of the TrainJob `name`'s JobSet, batch Jobs and pods (those not being deleted)."""
    js = k.jobset(name)
    return {
        "JobSet": {js["metadata"]["uid"]} if js and not js["metadata"].get("deletionTimestamp") else set(),
        "Job": {
            j.metadata.uid
            for j in k.jobs()
            if j.metadata.name.startswith(f"{name}-node-") and not j.metadata.deletion_timestamp
        },
        "Pod": {p.metadata.uid for p in k.pods(name) if not p.metadata.deletion_timestamp},
    }


def stamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_trainjob_has_no_ttl_and_managed_by_multikueue_is_left_alone(k, api):
    """The schema: no ttlSecondsAfterFinished (pruned on create), managedBy defaulted, limited to
    two values by CEL and immutable; a multikueue TrainJob gets nothing from Trainer."""
    crd = client.ApiextensionsV1Api(api).read_custom_resource_definition("trainjobs.trainer.kubeflow.org")
    (version,) = [v for v in crd.spec.versions if v.name == TRAINER[1]]
    assert version.served and version.storage
    spec = version.schema.open_apiv3_schema.properties["spec"]
    assert "ttlSecondsAfterFinished" not in spec.properties
    assert not any("ttl" in name.lower() for name in spec.properties), sorted(spec.properties)
    assert not spec.x_kubernetes_preserve_unknown_fields, "spec drops what its schema does not name"
    managed_by = spec.properties["managedBy"]
    assert managed_by.default == TRAINER_CONTROLLER
    rules = {rule.rule for rule in managed_by.x_kubernetes_validations}
    assert rules == {f"self in ['{TRAINER_CONTROLLER}', '{MULTIKUEUE}']", "self == oldSelf"}

    body = for_create(trainjob("ttl", run_for="1s"), k.ns)
    body["spec"]["ttlSecondsAfterFinished"] = 30
    with pytest.raises(ApiException) as strict:
        k.custom.create_namespaced_custom_object(
            *TRAINER, k.ns, "trainjobs", body, field_validation="Strict", dry_run="All"
        )
    assert strict.value.status == 400
    assert 'unknown field \\"spec.ttlSecondsAfterFinished\\"' in strict.value.body
    created, status, headers = k.custom.create_namespaced_custom_object_with_http_info(
        *TRAINER, k.ns, "trainjobs", body
    )
    assert status == 201
    assert headers.get("Warning") == '299 - "unknown field \\"spec.ttlSecondsAfterFinished\\""'
    stored = k.trainjob("ttl")
    for tj in (created, stored):
        assert "ttlSecondsAfterFinished" not in tj["spec"], "pruned by the API server"
        assert tj["spec"]["managedBy"] == TRAINER_CONTROLLER, "the CRD's default"
        assert not tj["metadata"].get("finalizers")

    made_up = for_create(trainjob("mine", run_for="1s"), k.ns)
    made_up["spec"]["managedBy"] = "example.com/my-controller"
    with pytest.raises(ApiException) as refused:
        k.custom.create_namespaced_custom_object(*TRAINER, k.ns, "trainjobs", made_up)
    assert refused.value.status == 422
    assert "ManagedBy must be trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue" in (
        refused.value.body
    ), "the CRD's CEL rule (Trainer's webhook has no managedBy check)"
    assert k.trainjob("mine") is None

    since = revision(k)
    kueue = for_create(trainjob("kueue", run_for="1s"), k.ns)
    kueue["spec"]["managedBy"] = MULTIKUEUE
    made = k.custom.create_namespaced_custom_object(*TRAINER, k.ns, "trainjobs", kueue)
    assert made["spec"]["managedBy"] == MULTIKUEUE
    with pytest.raises(ApiException) as immutable:
        k.patch(TRAINER, "trainjobs", "kueue", {"spec": {"managedBy": TRAINER_CONTROLLER}})
    assert immutable.value.status == 422 and "field is immutable" in immutable.value.body
    time.sleep(AFTER)
    tj = k.trainjob("kueue")
    assert not tj.get("status"), "Trainer writes no status on a TrainJob it does not manage"
    assert not tj["metadata"].get("finalizers")
    assert k.jobset("kueue") is None and not k.pods("kueue")
    made_since = [
        (kind, name)
        for _, type_, kind, name, _ in history(k, since)
        if type_ == "ADDED" and name.startswith("kueue")  # ttl's objects are made meanwhile
    ]
    assert made_since == [("TrainJob", "kueue")], "no JobSet, ConfigMap, Service, Job or pod was made"


def test_finished_trainjobs_keep_their_jobset_job_and_pods(k):
    """Complete and Failed TrainJobs on the default runtime (no JobSet TTL): nothing is deleted
    for HOLD seconds after both finished; a Failed one has no pods left (deleted at backoffLimit)."""
    ok, bad = finish_both(k)
    for tj, type_ in ((ok, "Complete"), (bad, "Failed")):
        (finish,) = [c for c in tj["status"]["conditions"] if c["type"] == type_ and c["status"] == "True"]
        assert stamp(finish["lastTransitionTime"]) >= stamp(tj["metadata"]["creationTimestamp"])
        assert not tj["metadata"].get("finalizers")
        say(f"{tj['metadata']['name']}: {type_} at {finish['lastTransitionTime']} ({finish['reason']})")
        js = k.jobset(tj["metadata"]["name"])
        assert "ttlSecondsAfterFinished" not in js["spec"], "torch-distributed sets no JobSet TTL"
        assert not js["metadata"].get("finalizers")
    kept = {name: owned(k, name) for name in ("ok", "bad")}
    assert [len(kept["ok"][kind]) for kind in ("JobSet", "Job", "Pod")] == [1, 1, 2]
    assert [len(kept["bad"][kind]) for kind in ("JobSet", "Job", "Pod")] == [1, 1, 0], (
        "the Job controller deleted the crash-looping pods at the backoffLimit"
    )
    assert all(p.status.phase == "Succeeded" for p in k.pods("ok"))

    since = revision(k)
    deadline = time.monotonic() + HOLD
    while time.monotonic() < deadline:
        assert {name: owned(k, name) for name in ("ok", "bad")} == kept
        time.sleep(0.5)
    changes = [(type_, kind, name) for _, type_, kind, name, _ in history(k, since) if type_ != "MODIFIED"]
    assert not changes, f"nothing is made or deleted for a finished TrainJob: {changes}"
    assert k.condition(k.trainjob("ok"), "Complete") and k.condition(k.trainjob("bad"), "Failed")
    say(f"both finished TrainJobs kept everything for {HOLD} s")


def test_background_delete_of_finished_trainjobs_collects_everything_and_makes_nothing(k):
    """A wrong uid precondition: 409, nothing deleted. The right one, Background: the TrainJob gone
    at once (no finalizer), the garbage collector removes the rest, and nothing is made again:
    the Failed TrainJob gets no new JobSet."""
    ok, bad = finish_both(k)
    since = revision(k)
    kept = owned(k, "bad")
    with pytest.raises(ApiException) as conflict:
        delete_trainjob(k, "bad", "00000000-0000-0000-0000-000000000000")
    assert conflict.value.status == 409
    assert "the UID in the precondition" in conflict.value.body
    still = k.trainjob("bad")
    assert still["metadata"]["uid"] == bad["metadata"]["uid"]
    assert not still["metadata"].get("deletionTimestamp") and owned(k, "bad") == kept
    refused = [(type_, kind, name) for _, type_, kind, name, _ in history(k, since) if type_ != "MODIFIED"]
    assert not refused, f"the refused DELETE deleted nothing: {refused}"

    for tj in (bad, ok):
        name, uid = tj["metadata"]["name"], tj["metadata"]["uid"]
        assert not k.trainjob(name)["metadata"].get("finalizers")
        t0 = time.monotonic()
        answer = delete_trainjob(k, name, uid)
        assert (answer["kind"], answer["status"]) == ("Status", "Success"), "removed, not marked for deletion"
        gone = (
            wait_for(f"{name} gone", lambda n=name: k.trainjob(n) is None and time.monotonic(), 10, 0.02) - t0
        )

        def collected(n=name):
            jobs = [j for j in k.jobs() if j.metadata.name.startswith(f"{n}-node-")]
            return k.jobset(n) is None and not jobs and not k.pods(n) and time.monotonic()

        rest = wait_for(f"{name}'s JobSet, Job and pods gone", collected, 30, 0.02) - t0
        say(f"{name}: TrainJob gone {gone:.3f} s after the DELETE, its JobSet, Job and pods {rest:.3f} s")
        assert figures.within(
            "trainer: s from a finished TrainJob's DELETE to it gone", gone, "<=", GONE_WITHIN
        )
        assert figures.within(
            "trainer: s from a finished TrainJob's DELETE to its JobSet, Job and pods gone",
            rest,
            "<=",
            COLLECTED_WITHIN,
        )
    time.sleep(AFTER)
    assert k.trainjob("ok") is None and k.trainjob("bad") is None
    assert k.jobset("ok") is None and k.jobset("bad") is None and not k.jobs()
    assert not k.pods("ok") and not k.pods("bad")

    changes = history(k, since)
    made = [(kind, name) for _, type_, kind, name, _ in changes if type_ == "ADDED"]
    assert not made, f"nothing is made again after the delete: {made}"
    deleted = {(kind, name): rv for rv, type_, kind, name, _ in changes if type_ == "DELETED"}
    for name in ("ok", "bad"):
        pods = [
            rv for (kind, pod), rv in deleted.items() if kind == "Pod" and pod.startswith(f"{name}-node-0-")
        ]
        assert len(pods) == (2 if name == "ok" else 0)
        # The garbage collector's order: owner first, then what it owned, level by level.
        assert (
            deleted["TrainJob", name]
            < deleted["JobSet", name]
            < deleted["Job", f"{name}-node-0"]
            < min(pods, default=float("inf"))
        )
        assert deleted["TrainJob", name] < deleted["ConfigMap", f"{name}-runtime-snapshot"]
        assert deleted["JobSet", name] < deleted["Service", name]


def test_suspending_a_complete_trainjob_is_accepted_and_it_stays(k):
    """`spec.suspend: true` on a Complete TrainJob: accepted, Suspended=True; it stays Complete,
    and its JobSet (not suspended), Job and pods stay as they were."""
    k.create_trainjob(trainjob("ok", run_for="2s"))
    wait_for("ok Complete", lambda: k.condition(k.trainjob("ok"), "Complete"), timeout=60)
    kept = owned(k, "ok")
    assert [len(kept[kind]) for kind in ("JobSet", "Job", "Pod")] == [1, 1, 2]
    since = revision(k)
    k.patch(TRAINER, "trainjobs", "ok", {"spec": {"suspend": True}})
    wait_for("ok Suspended=True", lambda: k.condition(k.trainjob("ok"), "Suspended"), timeout=30)
    time.sleep(AFTER)
    tj = k.trainjob("ok")
    assert tj["spec"]["suspend"] is True and k.condition(tj, "Complete")
    assert owned(k, "ok") == kept
    assert k.jobset("ok")["spec"]["suspend"] is False, "a finished TrainJob's JobSet is not updated"
    changes = [(type_, kind, name) for _, type_, kind, name, _ in history(k, since) if kind != "TrainJob"]
    assert not changes, f"nothing but the TrainJob changed: {changes}"
