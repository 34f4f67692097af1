"""podsweeper's own records against the real API server, as the function's user: the evidence
store of a big failing job stays under what a ConfigMap may hold, a store the API refuses is
never a 503, a ConfigMap podsweeper did not make is never replaced, and a finish mark counts
only if podsweeper made it for this job, after the job.

The logs are fed directly (Failures with their log text, through EvidenceKeeper.keep): the
pods/log path goes through a kubelet this control plane does not run.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from kubernetes import client

from podsweeper import evidence, kinds
from podsweeper.cluster.kube import KubeCluster, load_api
from podsweeper.cluster.kube.records import EVIDENCE_KEY, FINISH_MARK_LABEL, finish_mark_name, sign
from podsweeper.config import Settings
from podsweeper.evidence import CONFIGMAP_DATA_LIMIT, MAX_CONTAINERS, STORE_BUDGET, decode, encode, store_name
from podsweeper.keeper import EvidenceKeeper
from podsweeper.model import FinishMark, JobRef
from tests.support.stack.players import Play
from tests.unit.test_evidence_store import dropped, firsts, run

PYTORCH = kinds.BY_KIND["PyTorchJob"]
ONE_MIB = 1024 * 1024

NOW = datetime(2025, 1, 1, 1, tzinfo=UTC)  # when a keeper is asked to keep (a Namespace warning's time)


@pytest.fixture
def core(admin_api):
    return client.CoreV1Api(admin_api)


@pytest.fixture
def cluster(control_plane):
    return KubeCluster(load_api(str(control_plane.function_kubeconfig)))


@pytest.fixture
def operator(admin_api, namespace):
    return Play(admin_api, namespace, node=None)


def ref_of(job: dict) -> JobRef:
    meta = job["metadata"]
    return JobRef(PYTORCH, meta["namespace"], meta["name"], meta["uid"], job["apiVersion"])


def stored(core, namespace: str, name: str) -> client.V1ConfigMap:
    return core.read_namespaced_config_map(name, namespace)


def data_bytes(configmap: client.V1ConfigMap) -> int:
    """What the API server measures against its 1 MiB: keys and values of data."""
    return sum(len(k.encode()) + len(v.encode()) for k, v in (configmap.data or {}).items())


def test_a_big_failing_jobs_store_stays_under_1_mib_and_keeps_every_first_failure(
    cluster, operator, core, namespace
):
    """64 workers crash-looping with long CJK logs, kept through 12 runs each: before the
    byte budget the store passed 1 MiB at record 239, the API refused every write after it
    (422) and each event of the job was answered 503."""
    ref = ref_of(operator.create_job(name="big"))
    keeper = EvidenceKeeper(Settings(dry_run=False))
    refused, unbounded = dropped("evidence", "refused"), 0
    for restarts in range(1, 13):
        runs = [run(c, restarts) for c in range(MAX_CONTAINERS)]
        assert (
            keeper.keep(cluster, ref, runs, read_logs=False, now=NOW) == MAX_CONTAINERS
        )  # no ApiUnavailable
        unbounded += sum(len(encode([f.as_dict()]).encode()) for f in runs)
        store = stored(core, namespace, store_name("big"))
        assert data_bytes(store) <= STORE_BUDGET + len(EVIDENCE_KEY) < ONE_MIB
        records = decode(store.data[EVIDENCE_KEY])
        assert firsts(records) == {f"uid-{c}": 1 for c in range(MAX_CONTAINERS)}
        assert {r["restart_count"] for r in records} >= {1, restarts}  # the newest run is there too
    assert unbounded > CONFIGMAP_DATA_LIMIT  # the size the API refuses was reached, and bounded
    assert dropped("evidence", "refused") == refused  # every write was accepted
    assert "训练失败" in store.data[EVIDENCE_KEY]  # stored as UTF-8 text, not \u escapes
    (owner,) = store.metadata.owner_references
    assert (owner.kind, owner.uid) == ("PyTorchJob", ref.uid)


def test_a_store_the_api_refuses_is_counted_and_never_a_503(cluster, operator, core, namespace, monkeypatch):
    """Without the budget (as if it were set too high), the API refuses the store past
    1 MiB: 422, which is counted and remembered, not raised as ApiUnavailable."""
    monkeypatch.setattr(evidence, "STORE_BUDGET", 4 * ONE_MIB)
    ref = ref_of(operator.create_job(name="big"))
    keeper = EvidenceKeeper(Settings(dry_run=False))
    before = dropped("evidence", "refused")
    for restarts in range(1, 8):
        keeper.keep(cluster, ref, [run(c, restarts) for c in range(MAX_CONTAINERS)], read_logs=False, now=NOW)
    assert dropped("evidence", "refused") > before
    assert data_bytes(stored(core, namespace, store_name("big"))) <= ONE_MIB  # the last one accepted


@pytest.mark.parametrize(
    "metadata",
    [
        {},  # no label, no owner: someone's own ConfigMap that happens to have the name
        {"labels": {"podsweeper.dev/evidence-for": "big"}},  # the label, but nobody's
        {"ownerReferences": "job"},  # owned by the job, but not labelled by podsweeper
    ],
    ids=["plain", "label-only", "owner-only"],
)
def test_a_configmap_at_the_stores_name_that_is_not_podsweepers_is_never_replaced(
    cluster, operator, core, namespace, metadata
):
    job = operator.create_job(name="big")
    ref = ref_of(job)
    if metadata.get("ownerReferences") == "job":
        metadata = {"ownerReferences": [owner_reference(job)]}
    theirs = {
        "metadata": {"name": store_name("big"), **metadata},
        "data": {EVIDENCE_KEY: "[]", "theirs": "yes"},
    }
    made = core.create_namespaced_config_map(namespace, theirs)
    before = dropped("evidence", "foreign")
    assert (
        EvidenceKeeper(Settings(dry_run=False)).keep(cluster, ref, [run(0, 1)], read_logs=False, now=NOW) == 1
    )
    assert dropped("evidence", "foreign") == before + 1
    after = stored(core, namespace, store_name("big"))
    assert after.metadata.resource_version == made.metadata.resource_version
    assert after.data == {EVIDENCE_KEY: "[]", "theirs": "yes"}


def test_an_earlier_jobs_store_of_the_same_name_is_replaced_without_its_records(
    cluster, operator, core, namespace
):
    """The garbage collector has not removed it yet: podsweeper's label, owned by another
    PyTorchJob named so. This job's store replaces it, with this job's records only."""
    job = operator.create_job(name="big")
    earlier = {**owner_reference(job), "uid": "0a1b2c3d-0000-4000-8000-000000000000"}
    core.create_namespaced_config_map(
        namespace,
        {
            "metadata": {
                "name": store_name("big"),
                "labels": {"podsweeper.dev/evidence-for": "big"},
                "ownerReferences": [earlier],
            },
            "data": {EVIDENCE_KEY: encode([run(9, 1).as_dict()])},
        },
    )
    EvidenceKeeper(Settings(dry_run=False)).keep(cluster, ref_of(job), [run(0, 1)], read_logs=False, now=NOW)
    store = stored(core, namespace, store_name("big"))
    assert [r["pod"] for r in decode(store.data[EVIDENCE_KEY])] == ["big-worker-0"]
    assert [o.uid for o in store.metadata.owner_references] == [job["metadata"]["uid"]]


def owner_reference(job: dict) -> dict:
    meta = job["metadata"]
    return {"apiVersion": job["apiVersion"], "kind": job["kind"], "name": meta["name"], "uid": meta["uid"]}


def created_of(job: dict) -> datetime:
    return datetime.fromisoformat(job["metadata"]["creationTimestamp"])


def mark_configmap(name: str, labelled: bool, owners: list[dict]) -> dict:
    metadata: dict = {"name": finish_mark_name(name), "ownerReferences": owners}
    if labelled:
        metadata["labels"] = {FINISH_MARK_LABEL: name}
    return {"metadata": metadata, "data": {"condition": "Failed", "at": "", "top_uid": "planted"}}


def test_a_planted_finish_mark_without_podsweepers_label_counts_for_nothing_and_is_left(
    cluster, operator, core, namespace
):
    job = operator.create_job(name="tj")
    ref = ref_of(job)
    made = core.create_namespaced_config_map(namespace, mark_configmap("tj", False, [owner_reference(job)]))
    assert cluster.read_finish_mark(ref, created_of(job)) is None
    before = dropped("finish-mark", "foreign")
    cluster.write_finish_mark(ref, FinishMark("Complete", None, "js-uid"))  # no ApiUnavailable
    assert dropped("finish-mark", "foreign") == before + 1
    after = stored(core, namespace, finish_mark_name("tj"))
    assert after.metadata.resource_version == made.metadata.resource_version
    assert after.data["top_uid"] == "planted"


def test_a_finish_mark_made_before_its_job_does_not_count(cluster, operator, core, namespace):
    """Made first (the job's uid unknown yet), then pointed at the job once it exists: it has
    podsweeper's label and the job's uid as owner, but the API server set its creation time
    before the job's."""
    core.create_namespaced_config_map(namespace, mark_configmap("tj", True, []))
    time.sleep(1.1)  # creationTimestamp has whole seconds: the job's comes at least 1 s later
    job = operator.create_job(name="tj")
    ref = ref_of(job)
    # Signed with podsweeper's own key (as a mark of an earlier job of the name would be):
    # label, owner and signature alone would let it count.
    data = {"condition": "Failed", "at": "", "top_uid": "planted"}
    signature = sign(cluster._record_key(), ref, data)
    core.patch_namespaced_config_map(
        finish_mark_name("tj"),
        namespace,
        {"metadata": {"ownerReferences": [owner_reference(job)]}, "data": {"signature": signature}},
    )
    assert cluster.read_finish_mark(ref) is not None
    assert cluster.read_finish_mark(ref, created_of(job)) is None


def test_a_finish_mark_podsweeper_did_not_sign_counts_for_nothing(cluster, operator, core, namespace):
    """Made after the job, with podsweeper's label and the job as owner: all a user who may
    create ConfigMaps in the namespace can write. Without podsweeper's signature (none, one of
    another key, one of another job's mark) it is not podsweeper's record."""
    job = operator.create_job(name="tj")
    ref = ref_of(job)
    other = ref_of(operator.create_job(name="other"))
    data = {"condition": "Failed", "at": "", "top_uid": "planted"}
    for signature in ("", sign(b"another key", ref, data), sign(cluster._record_key(), other, data)):
        planted = mark_configmap("tj", True, [owner_reference(job)])
        planted["data"]["signature"] = signature
        core.create_namespaced_config_map(namespace, planted)
        assert cluster.read_finish_mark(ref, created_of(job)) is None
        core.delete_namespaced_config_map(finish_mark_name("tj"), namespace)
    own = FinishMark("Failed", None, "planted")
    cluster.write_finish_mark(ref, own)
    assert cluster.read_finish_mark(ref, created_of(job)) == own


def test_podsweepers_own_finish_mark_counts_for_its_job(cluster, operator, namespace):
    job = operator.create_job(name="tj")
    ref = ref_of(job)
    mark = FinishMark("Failed", datetime.now(UTC).replace(microsecond=0), "js-uid-1")
    cluster.write_finish_mark(ref, mark)
    assert cluster.read_finish_mark(ref, created_of(job)) == mark
    later = FinishMark("Failed", mark.at, "js-uid-2")
    cluster.write_finish_mark(ref, later)  # its own mark: replaced
    assert cluster.read_finish_mark(ref, created_of(job)) == later


def test_a_long_job_name_cut_for_the_label_still_gets_its_records(cluster, operator, namespace):
    """A name cut at 63 characters for podsweeper's label may end in '-' or '.', which the API
    server refuses in a label value: the label is cut back to an alphanumeric, and the records of
    such a job are written and read like any other's."""
    name = "a" * 62 + "-tail"  # [:63] ends in "-"
    job = operator.create_job(name=name)
    ref = ref_of(job)
    mark = FinishMark("Failed", datetime.now(UTC).replace(microsecond=0), "js-uid-1")
    cluster.write_finish_mark(ref, mark)
    assert cluster.read_finish_mark(ref, created_of(job)) == mark
    assert cluster.write_evidence(ref, [{"pod": "p", "container": "c", "restart_count": 1}], None)
    records, _ = cluster.read_evidence(ref)
    assert records == [{"pod": "p", "container": "c", "restart_count": 1}]


def test_podsweeper_evidence_shows_a_jobs_store_by_its_name_alone(
    cluster, operator, namespace, capsys, control_plane
):
    """What a person runs: `podsweeper evidence NS/JOB` names neither the kind nor the uid; the
    store podsweeper keeps for the job of that name is shown (it was once read as an earlier
    job's, and shown empty)."""
    import json as json_

    from podsweeper.cli import main

    job = operator.create_job(name="shown")
    record = {"pod": "shown-worker-0", "container": "pytorch", "restart_count": 1, "exit_code": 1}
    assert cluster.write_evidence(ref_of(job), [record], None)
    kubeconfig = str(control_plane.admin_kubeconfig)
    assert main(["evidence", f"{namespace}/shown", "--json", "--kubeconfig", kubeconfig]) == 0
    shown = [json_.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["pod"], r["exit_code"]) for r in shown] == [("shown-worker-0", 1)]
