"""Every Kubernetes call the function makes, against the real API server, as the function's user.

The function's client authenticates as system:serviceaccount:podsweeper:podsweeper, bound
to knative/function/rbac.yaml: a call the ClusterRole does not allow fails here.
"""

from __future__ import annotations

import base64
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import requests
import yaml
from kubernetes import client

from podsweeper import kinds
from podsweeper.cluster.kube import KubeCluster, calls, load_api
from podsweeper.config import Settings
from podsweeper.decisions import Result
from podsweeper.errors import ApiUnavailable
from podsweeper.model import EventRecord, FinishMark, JobRef
from podsweeper.namespaces import POLICY_WARNING_REASON, NamespacePolicies
from podsweeper.policy import Mode
from podsweeper.service import Service
from tests.fixtures.builders import at, event, ping, split
from tests.fixtures.builders import container_status as cs
from tests.fixtures.parse import parse_pod
from tests.support.stack.players import Play
from tests.support.trainer_objects import trainer_namespace

SUSPEND_RBAC = Path(__file__).resolve().parents[2] / "knative/overlays/crashloop-suspend/suspend-rbac.yaml"
PYTORCH = kinds.BY_KIND["PyTorchJob"]


@pytest.fixture
def cluster(control_plane):
    return KubeCluster(load_api(str(control_plane.function_kubeconfig)))


@pytest.fixture
def operator(admin_api, namespace):
    return Play(admin_api, namespace, node=None)


def test_get_job_found_missing_and_replaced(cluster, operator, namespace):
    created = operator.create_job()
    ref = JobRef(PYTORCH, namespace, "pytest")
    job = cluster.get_job(ref)
    assert job is not None and job.uid == created["metadata"]["uid"] and job.finished is None
    assert cluster.get_job(JobRef(PYTORCH, namespace, "absent")) is None
    operator.custom.delete_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", "pytest")
    operator.create_job()
    assert cluster.get_job(ref).uid != created["metadata"]["uid"]


def test_list_job_pods_by_label_follows_pagination(cluster, operator, namespace, monkeypatch):
    job = operator.create_job(replicas={"Master": 1, "Worker": 6})
    for i in range(6):
        operator.create_pod(job, "Worker", i)
    operator.create_pod(job, "Master", 0)
    other = operator.create_job(name="other")
    operator.create_pod(other, "Worker", 0)
    monkeypatch.setattr(calls, "PAGE_SIZE", 2)
    pods = cluster.list_job_pods(JobRef(PYTORCH, namespace, "pytest"))
    assert sorted(p.name for p in pods) == ["pytest-master-0"] + [f"pytest-worker-{i}" for i in range(6)]
    assert all(p.job.uid == job["metadata"]["uid"] for p in pods)


def test_delete_with_uid_precondition_spares_a_recreated_pod(cluster, operator, namespace):
    job = operator.create_job()
    old = parse_pod(operator.create_pod(job, "Worker", 0))
    operator.core.delete_namespaced_pod(old.name, namespace, grace_period_seconds=0)
    new = operator.create_pod(job, "Worker", 0)
    assert cluster.delete_pod(namespace, old.name, old.uid) is Result.CONFLICT
    assert cluster.get_pod(namespace, old.name).uid == new["metadata"]["uid"]
    assert cluster.delete_pod(namespace, old.name, new["metadata"]["uid"]) is Result.DELETED
    assert cluster.get_pod(namespace, old.name) is None
    assert cluster.delete_pod(namespace, old.name, new["metadata"]["uid"]) is Result.GONE


def test_delete_with_a_stale_resource_version_keeps_the_pod(cluster, operator, namespace):
    """The resourceVersion precondition: a pod changed since it was read (say, just opted out)
    is not deleted on the stale facts; DELETED then means this call deleted it."""
    job = operator.create_job()
    read = parse_pod(operator.create_pod(job, "Worker", 0))
    operator.core.patch_namespaced_pod(read.name, namespace, {"metadata": {"labels": {"touched": "yes"}}})
    assert cluster.delete_pod(namespace, read.name, read.uid, read.resource_version) is Result.CONFLICT
    fresh = cluster.get_pod(namespace, read.name)
    assert fresh is not None and fresh.uid == read.uid
    assert cluster.delete_pod(namespace, read.name, read.uid, fresh.resource_version) is Result.DELETED


def test_an_ordinary_delete_keeps_the_pods_grace_period_and_only_a_force_delete_drops_it(
    cluster, admin_api, namespace
):
    """A pod on a node (no kubelet here to finish the delete) deleted by podsweeper's ordinary
    delete keeps its terminationGracePeriodSeconds: it stays, terminating, with that grace
    (its containers get SIGTERM and their grace when a kubelet is there). Only a force delete
    (rule stuck-terminating) sends grace period 0, and the API server then removes it at once."""
    player = Play(admin_api, namespace, node="lost-node")
    job = player.create_job()
    pod = parse_pod(player.create_pod(job, "Worker", 0))
    assert cluster.delete_pod(namespace, pod.name, pod.uid) is Result.DELETED
    raw = player.core.read_namespaced_pod(pod.name, namespace)
    assert raw.metadata.deletion_timestamp is not None
    assert raw.metadata.deletion_grace_period_seconds == raw.spec.termination_grace_period_seconds == 30
    assert cluster.delete_pod(namespace, pod.name, pod.uid, force=True) is Result.DELETED
    assert cluster.get_pod(namespace, pod.name) is None


def test_a_finish_mark_counts_only_for_the_trainjob_it_was_written_for(cluster, admin_api):
    """A TrainJob created again under a finished one's name is not judged by the earlier one's
    finish (once KNOWN BUG 3): the mark's ConfigMap is owned by the uid it was written for,
    and until the garbage collector removes it, it means nothing for another uid."""
    with trainer_namespace(admin_api) as trainer:
        tj = trainer.trainjob("tj")
        ref = JobRef(kinds.TRAINJOB, trainer.namespace, "tj", tj["metadata"]["uid"], tj["apiVersion"])
        mark = FinishMark("Failed", datetime.now(UTC).replace(microsecond=0), "js-uid")
        cluster.write_finish_mark(ref, mark)
        assert cluster.read_finish_mark(ref) == mark
        later = JobRef(kinds.TRAINJOB, trainer.namespace, "tj", "another-uid", tj["apiVersion"])
        assert cluster.read_finish_mark(later) is None


def test_record_event_creates_then_counts(cluster, operator, namespace):
    job = operator.create_job()
    ref = JobRef(PYTORCH, namespace, "pytest", job["metadata"]["uid"], "kubeflow.org/v1")
    now = datetime.now(UTC)
    for message in ("first", "second", "third"):
        cluster.record_event(
            EventRecord("pytest.abc123", ref, "Warning", "CrashLoopWithoutLimit", message, now)
        )
    (event,) = operator.events("CrashLoopWithoutLimit")
    assert event.count == 3 and event.message == "third"
    assert event.involved_object.uid == job["metadata"]["uid"] and event.involved_object.kind == "PyTorchJob"


def test_a_namespace_policy_is_read_and_a_bad_value_is_warned_on_the_namespace(cluster, admin_api, namespace):
    """The function's user reads a Namespace (RBAC get on namespaces) and writes the Warning on
    it, in that namespace (the API server requires the involvedObject's namespace to be the
    Event's)."""
    core = client.CoreV1Api(admin_api)
    notes = {"podsweeper.dev/mode": "dry-run", "podsweeper.dev/orphan-grace-seconds": "soon"}
    core.patch_namespace(namespace, {"metadata": {"annotations": notes}})
    found = cluster.get_namespace(namespace)
    assert found is not None and found.uid and found.annotations["podsweeper.dev/mode"] == "dry-run"
    assert cluster.get_namespace(f"absent-{namespace}") is None
    resolved = NamespacePolicies(Settings()).for_namespace(cluster, namespace, datetime.now(UTC))
    assert resolved.policy.mode is Mode.DRY_RUN and len(resolved.policy.problems) == 1
    (warning,) = core.list_namespaced_event(namespace, field_selector=f"reason={POLICY_WARNING_REASON}").items
    assert (warning.involved_object.kind, warning.involved_object.name) == ("Namespace", namespace)
    assert warning.type == "Warning" and "orphan-grace-seconds" in warning.message


def test_record_event_with_progress_is_written_again_only_when_it_grew(cluster, operator, namespace):
    """A crash-loop warning carries the restart count; the same count again writes nothing."""
    job = operator.create_job()
    ref = JobRef(PYTORCH, namespace, "pytest", job["metadata"]["uid"], "kubeflow.org/v1")
    now = datetime.now(UTC)
    written = [
        cluster.record_event(
            EventRecord(
                "pytest.loop", ref, "Warning", "CrashLoopWithoutLimit", f"{n} restarts", now, progress=n
            )
        )
        for n in (5, 5, 6, 6, 4, 7)
    ]
    assert written == [True, False, True, False, False, True]
    (event,) = operator.events("CrashLoopWithoutLimit")
    assert event.count == 3 and event.message == "7 restarts"
    assert event.metadata.annotations == {"podsweeper.dev/restarts": "7"}


def test_two_writers_of_one_warning_write_each_restart_count_once(
    cluster, control_plane, operator, namespace
):
    """Two instances see the same crash loop grow: the one whose write lands second read the
    Event before the other's write, and is refused (its patch names the version it read): it
    reads again, finds the count already recorded and writes nothing."""
    job = operator.create_job()
    ref = JobRef(PYTORCH, namespace, "pytest", job["metadata"]["uid"], "kubeflow.org/v1")
    now = datetime.now(UTC)

    def warning(n: int) -> EventRecord:
        return EventRecord(
            "pytest.race", ref, "Warning", "CrashLoopWithoutLimit", f"{n} restarts", now, progress=n
        )

    other = KubeCluster(load_api(str(control_plane.function_kubeconfig)))
    assert cluster.record_event(warning(5))
    read = cluster._call
    raced = []

    def racing(what, method, path, **kwargs):
        found = read(what, method, path, **kwargs)
        if method == "GET" and not raced:  # the other instance writes between our read and write
            raced.append(other.record_event(warning(6)))
        return found

    cluster._call = racing
    assert cluster.record_event(warning(6)) is False
    assert raced == [True]
    (event,) = operator.events("CrashLoopWithoutLimit")
    assert event.count == 2 and event.metadata.annotations == {"podsweeper.dev/restarts": "6"}


def training_pods(cluster, namespace, resume=None):
    return [p for page in cluster.training_pod_pages(namespace, resume=resume) for p in page.pods]


def test_cluster_wide_lists_for_the_sweep(cluster, operator, namespace):
    job = operator.create_job(kind="TFJob", name="tf", replicas={"Worker": 2})
    operator.create_pod(job, "Worker", 0)
    assert any(j.name == "tf" and j.namespace == namespace for j in cluster.list_jobs(None))
    assert any(p.name == "tf-worker-0" for p in training_pods(cluster, None))
    assert [p.name for p in training_pods(cluster, namespace)] == ["tf-worker-0"]


def test_a_pod_listing_goes_on_from_a_page_token_in_a_later_call(cluster, operator, namespace, monkeypatch):
    """The sweep's rounds: a page's token, used by a later listing, goes on after that page
    with the API server's own continue token; each pod once, both label sets included."""
    monkeypatch.setattr(calls, "PAGE_SIZE", 2)
    job = operator.create_job(kind="TFJob", name="tfp", replicas={"Worker": 5})
    for i in range(5):
        operator.create_pod(job, "Worker", i)
    first = next(iter(cluster.training_pod_pages(namespace)))
    assert len(first.pods) == 2 and first.resume is not None
    rest = training_pods(cluster, namespace, resume=first.resume)
    names = [p.name for p in first.pods + rest]
    assert sorted(names) == [f"tfp-worker-{i}" for i in range(5)] and len(names) == 5


def test_a_job_listing_goes_on_from_a_page_token_in_a_later_call(cluster, operator, namespace, monkeypatch):
    """The sweep reads a big kind's index across ticks: a job page's token, used by a later
    listing, goes on after that page; each job once, and the last page says it is the last."""
    monkeypatch.setattr(calls, "PAGE_SIZE", 2)
    for i in range(5):
        operator.create_job(kind="TFJob", name=f"tfj-{i}", replicas={"Worker": 1})
    tfjob = kinds.lookup("kubeflow.org/v1", "TFJob")
    assert tfjob is not None
    first = next(iter(cluster.job_pages(namespace, tfjob)))
    assert len(first.jobs) == 2 and first.resume is not None
    rest = list(cluster.job_pages(namespace, tfjob, first.resume))
    names = [j.name for j in first.jobs] + [j.name for page in rest for j in page.jobs]
    assert sorted(names) == [f"tfj-{i}" for i in range(5)] and len(names) == 5
    assert rest[-1].resume is None and all(page.resume is not None for page in rest[:-1])


def compact_etcd(etcd_url: str) -> int:
    """Compact etcd's history up to now as kube-apiserver's own compactor does (through etcd's
    JSON gateway): record the revision under compact_rev_key, which the API server watches
    (its watch cache then drops older snapshots, within its 15 s poll), then compact."""

    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    def post(path: str, body: dict) -> dict:
        answer = requests.post(f"{etcd_url}/v3/{path}", json=body, timeout=30)
        answer.raise_for_status()
        return answer.json()

    revision = int(post("kv/range", {"key": b64("/registry")})["header"]["revision"])
    post(
        "kv/txn", {"success": [{"requestPut": {"key": b64("compact_rev_key"), "value": b64(str(revision))}}]}
    )
    post("kv/compaction", {"revision": str(revision), "physical": True})
    return revision


def test_a_listing_goes_on_after_its_continue_token_expired(
    cluster, operator, namespace, monkeypatch, control_plane, caplog
):
    """A sweep's next tick may come after etcd compacted the snapshot its token was for: the
    API server then answers 410 with a token that goes on at the newest state, and the
    listing takes it. Every pod still comes once."""
    monkeypatch.setattr(calls, "PAGE_SIZE", 2)
    job = operator.create_job(kind="TFJob", name="tfx", replicas={"Worker": 6})
    for i in range(6):
        operator.create_pod(job, "Worker", i)
    first = next(iter(cluster.training_pod_pages(namespace)))
    operator.create_pod(job, "Worker", 6)  # a write after the token's snapshot
    compact_etcd(control_plane.etcd_url)
    deadline = time.monotonic() + 45  # the watch cache drops its snapshots within its 15 s poll
    with caplog.at_level("INFO", logger="podsweeper.cluster"):
        while True:
            caplog.clear()
            rest = training_pods(cluster, namespace, resume=first.resume)
            names = [p.name for p in first.pods + rest]
            assert len(names) == len(set(names)) and set(names) >= {f"tfx-worker-{i}" for i in range(6)}, (
                names
            )
            if "continue token expired" in caplog.text or time.monotonic() > deadline:
                break
            time.sleep(1)
    assert "continue token expired, going on at the newest state" in caplog.text


def seed_experiment_2(operator: Play):
    """The seed's PyTorchJob: master succeeds at 33s, workers crash-loop, job Succeeded at 34s."""
    job = operator.create_job()
    pods = {"master": operator.create_pod(job, "Master", 0)}
    pods |= {f"worker-{i}": operator.create_pod(job, "Worker", i) for i in range(3)}
    for i in range(3):
        pods[f"worker-{i}"] = operator.set_pod_status(
            pods[f"worker-{i}"],
            "Running",
            [cs(state="waiting", reason="CrashLoopBackOff", restarts=4, last_exit=1)],
        )
    pods["master"] = operator.set_pod_status(
        pods["master"], "Succeeded", [cs(state="terminated", exit_code=0, reason="Completed")]
    )
    job = operator.set_job_conditions(job, [("Created", at(0)), ("Running", at(2)), ("Succeeded", at(34))])
    return job, pods


def handle(service: Service, raw_event: dict):
    return service.handle(*split(raw_event))


def test_seed_experiment_2_end_to_end_through_the_handler(control_plane, operator, namespace):
    job, pods = seed_experiment_2(operator)
    service = Service(Settings(dry_run=False), kubeconfig=str(control_plane.function_kubeconfig))
    for name in ("worker-0", "worker-1", "worker-2"):  # pod events: below the crash-loop threshold
        assert handle(service, event("update", pods[name], at(40))).applied == []
    outcome = handle(service, event("update", job, at(34)))
    assert sorted(a.decision.name for a in outcome.applied if a.result == "deleted") == [
        "pytest-worker-0",
        "pytest-worker-1",
        "pytest-worker-2",
    ]
    assert operator.pod_names() == ["pytest-master-0"]
    (cleanup,) = operator.events("PodsCleanedUp")
    assert cleanup.involved_object.name == "pytest" and "exit code 1" in cleanup.message
    assert all(f"pytest-worker-{i}" in cleanup.message for i in range(3)) and "4 restarts" in cleanup.message
    # The same event again (a retry or duplicate) changes nothing.
    assert [a.result for a in handle(service, event("update", job, at(34))).applied] == []


def test_stale_event_changes_nothing_on_the_real_cluster(control_plane, operator, namespace):
    """A payload saying Succeeded while the real job runs: fresh state wins, nothing deleted."""
    job = operator.create_job()
    worker = operator.create_pod(job, "Worker", 0)
    operator.set_pod_status(worker, "Running", [cs()])
    stale = dict(job, status={"conditions": [{"type": "Succeeded", "status": "True"}]})
    service = Service(Settings(dry_run=False), kubeconfig=str(control_plane.function_kubeconfig))
    assert handle(service, event("update", stale, at(34))).applied == []
    assert operator.pod_names() == ["pytest-worker-0"]


def test_orphans_after_job_delete_and_the_sweep(control_plane, operator, namespace):
    job = operator.create_job()
    operator.create_pod(job, "Worker", 0)
    operator.custom.delete_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", "pytest")
    service = Service(
        Settings(dry_run=False, orphan_grace_seconds=0, namespaces=namespace),
        kubeconfig=str(control_plane.function_kubeconfig),
    )
    outcome = handle(service, ping(at(0)))
    assert [(a.decision.rule.value, a.result) for a in outcome.applied] == [("orphan", "deleted")]
    assert operator.pod_names() == []


def test_cli_sweep_dry_run_then_for_real(control_plane, operator, namespace, capsys):
    from podsweeper.cli import main

    job = operator.create_job()
    worker = operator.create_pod(job, "Worker", 0)
    operator.set_pod_status(worker, "Running", [cs()])
    operator.set_job_conditions(job, [("Created", at(0)), ("Failed", at(10))])
    argv = ["sweep", "--kubeconfig", str(control_plane.function_kubeconfig), "-n", namespace]
    assert main(argv + ["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert '"result": "dry-run"' in out and '"rule": "finished-job-active-pod"' in out
    assert operator.pod_names() == ["pytest-worker-0"]
    assert main(argv) == 0  # without --live: a dry run again, ending with what --live would do
    out, err = capsys.readouterr()
    assert '"result": "dry-run"' in out and operator.pod_names() == ["pytest-worker-0"]
    assert f"  delete  finished-job-active-pod  {namespace}  1 Pod  1 GPU" in err
    assert (
        f"To act: podsweeper sweep --kubeconfig {control_plane.function_kubeconfig} -n {namespace} --live"
        in err
    )
    assert main([*argv, "--live"]) == 0
    assert '"result": "deleted"' in capsys.readouterr().out and operator.pod_names() == []


def test_suspend_job_needs_the_opt_in_rbac_and_keeps_the_rest_of_run_policy(
    cluster, operator, namespace, admin_api
):
    """Without knative/overlays/crashloop-suspend the function may not patch a job (403 ->
    503); with it, the patch sets runPolicy.suspend only, and a re-created job (another uid)
    is never touched."""
    created = operator.create_job(clean_pod_policy="Running")
    ref = JobRef(PYTORCH, namespace, "pytest", created["metadata"]["uid"], "kubeflow.org/v1")
    with pytest.raises(ApiUnavailable, match="403"):
        cluster.suspend_job(ref)

    rbac = client.RbacAuthorizationV1Api(admin_api)
    docs = [d for d in yaml.safe_load_all(SUSPEND_RBAC.read_text()) if d]
    try:
        rbac.create_cluster_role(docs[0])
        rbac.create_cluster_role_binding(docs[1])
        assert _eventually(lambda: cluster.suspend_job(ref) is Result.SUSPENDED)
        job = operator.custom.get_namespaced_custom_object(
            "kubeflow.org", "v1", namespace, "pytorchjobs", "pytest"
        )
        assert job["spec"]["runPolicy"]["suspend"] is True
        assert job["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"

        stale = JobRef(PYTORCH, namespace, "pytest", "0000-not-the-uid", "kubeflow.org/v1")
        assert cluster.suspend_job(stale) is Result.CONFLICT
        assert (
            cluster.suspend_job(JobRef(PYTORCH, namespace, "absent", "x", "kubeflow.org/v1")) is Result.GONE
        )
    finally:
        rbac.delete_cluster_role_binding(docs[1]["metadata"]["name"])
        rbac.delete_cluster_role(docs[0]["metadata"]["name"])


def _eventually(check, seconds: float = 10.0) -> bool:
    """RBAC changes reach the authorizer's cache within a moment."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if check():
                return True
        except ApiUnavailable:
            pass
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


def test_a_300_pod_job_is_cleaned_by_its_own_event(control_plane, operator, namespace):
    """Bounded by what the job declares (300 workers), not by the fixed cap: one event deletes
    them all, concurrently, within the event's time bound; one PodsCleanedUp records it."""
    from concurrent.futures import ThreadPoolExecutor

    job = operator.create_job(replicas={"Worker": 300})
    with ThreadPoolExecutor(8) as pool:
        pods = list(pool.map(lambda i: operator.create_pod(job, "Worker", i), range(300)))
    for pod in pods[:5]:
        operator.set_pod_status(pod, "Running")
    job = operator.set_job_conditions(job, [("Created", at(0)), ("Running", at(2)), ("Succeeded", at(30))])
    service = Service(
        Settings(dry_run=False, max_deletes_per_event=100, event_timeout_seconds=30),
        kubeconfig=str(control_plane.function_kubeconfig),
    )
    started = time.monotonic()
    outcome = handle(service, event("update", job, at(40)))
    took = time.monotonic() - started
    results = [a.result for a in outcome.applied]
    assert results == [Result.DELETED] * 300 and outcome.deferred == 0, sorted(set(results))
    assert operator.pod_names() == []
    (cleaned,) = operator.events("PodsCleanedUp")
    assert cleaned.message.startswith("podsweeper deleted 300 pod(s)")
    print(f"300-pod job cleaned by one event in {took:.2f} s")


def test_the_evidence_store_as_the_function_user(cluster, operator, namespace, admin_api):
    """A ConfigMap the job owns (so the garbage collector removes it with the job), written
    with the version read (a concurrent write is refused, not overwritten); a log that
    cannot be read (no kubelet here) is no log, not a failure."""
    created = operator.create_job()
    ref = JobRef(PYTORCH, namespace, "pytest", created["metadata"]["uid"], "kubeflow.org/v1")
    assert cluster.read_evidence(ref) is None
    assert cluster.write_evidence(ref, [{"pod": "pytest-worker-0", "exit_code": 1}], None)
    records, version = cluster.read_evidence(ref)
    assert records == [{"pod": "pytest-worker-0", "exit_code": 1}]
    assert cluster.write_evidence(ref, records + [{"pod": "pytest-worker-1"}], version)
    assert not cluster.write_evidence(ref, [{"pod": "stale"}], version)  # written since
    store = client.CoreV1Api(admin_api).read_namespaced_config_map("podsweeper-evidence-pytest", namespace)
    (owner,) = store.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid, owner.controller) == ("PyTorchJob", "pytest", ref.uid, False)
    assert len(cluster.read_evidence(ref)[0]) == 2
    pod = operator.create_pod(created, "Worker", 0)
    log = cluster.container_log(namespace, pod["metadata"]["name"], "pytorch", False, 20, 2048)
    assert log is None
