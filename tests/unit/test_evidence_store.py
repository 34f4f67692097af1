"""The evidence store, bounded and trusted: its byte budget whatever the logs hold, container
text only where the knobs allow it, a store the API refuses or that is someone else's never
a 503, and a finish mark that counts only if podsweeper made it for this job."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import REGISTRY

from podsweeper import evidence, kinds
from podsweeper.cluster.kube.records import EVIDENCE_LABEL, FINISH_MARK_LABEL, Whose, predates, whose
from podsweeper.cluster.simulated import SimulatedCluster
from podsweeper.config import Settings
from podsweeper.evidence import (
    CONFIGMAP_DATA_LIMIT,
    MAX_CONTAINERS,
    MAX_LOG_BYTES,
    MAX_MESSAGE,
    RECENT_PER_CONTAINER,
    STORE_BUDGET,
    Failure,
    Source,
    bounded,
    decode,
    encode,
    merge,
    store_name,
)
from podsweeper.keeper import EvidenceKeeper
from podsweeper.model import JobRef, Namespace
from podsweeper.namespaces import Resolved
from podsweeper.pipeline import Pipeline
from podsweeper.policy import Knob, resolve
from tests.fixtures.builders import at, event, job, pod
from tests.fixtures.builders import container_status as cs
from tests.fixtures.parse import parse_job
from tests.unit.test_evidence import RUNNING, Counting, send

JOB = JobRef(kinds.BY_KIND["PyTorchJob"], "default", "big", "job-uid", "kubeflow.org/v1")
CJK = "训练失败：显存不足，梯度爆炸。"  # 3 UTF-8 bytes a character, 6 as a \u escape
T0 = datetime(2025, 1, 1, tzinfo=UTC)

NOW = datetime(2025, 1, 1, 1, tzinfo=UTC)  # when a keeper is asked to keep (a Namespace warning's time)


def size(records):
    return len(encode(records).encode())


def run(
    container: int, restarts: int, logs: str | None = CJK * 200, message: str | None = CJK * 80
) -> Failure:
    """One failed run of worker `container` (its own pod), with a long CJK log and message."""
    finished = (T0 + timedelta(seconds=10 * restarts, milliseconds=container)).isoformat()
    return Failure(
        pod=f"big-worker-{container}",
        pod_uid=f"uid-{container}",
        container="pytorch",
        node=f"node-{container % 8}",
        exit_code=1 + restarts % 7,  # another exit code each run: every run is worth keeping
        signal=None,
        reason="Error",
        message=(message or "")[:MAX_MESSAGE] or None,
        restart_count=restarts,
        started_at=finished,
        finished_at=finished,
        gpus=8,
        source=Source.TERMINATED,
    ).with_logs(logs)


def firsts(records):
    """Each container's earliest run kept (its restart count)."""
    found: dict[str, int] = {}
    for r in records:
        found[r["pod_uid"]] = min(found.get(r["pod_uid"], r["restart_count"]), r["restart_count"])
    return found


# -- the byte budget ----------------------------------------------------------------------------


def test_the_budget_is_well_below_what_the_api_server_accepts():
    assert STORE_BUDGET + len("evidence.json") <= CONFIGMAP_DATA_LIMIT - 100 * 1024


def test_the_store_is_utf8_not_escapes_and_survives_a_lone_surrogate():
    text = encode([{"logs": CJK}])
    assert text == '[{"logs":"' + CJK + '"}]' and size([{"logs": CJK}]) == 13 + 3 * len(CJK)
    assert size([{"logs": CJK}]) < len(json.dumps([{"logs": CJK}]).encode())  # 3 bytes a character, not 6
    assert decode(encode([{"logs": "bad \ud800 half"}])) == [{"logs": "bad ? half"}]


def test_64_crash_looping_workers_logging_cjk_stay_within_the_budget_and_keep_their_first_failures():
    """Issue 38's store: 64 workers, each failing again and again with long CJK logs. Before
    the bound it passed 1 MiB at record 239 and every write after was refused."""
    records: list = []
    unbounded = 0  # what the store would hold without the budget
    for restarts in range(1, 13):
        merged = merge(records, [run(c, restarts) for c in range(MAX_CONTAINERS)])
        assert merged is not None
        records = merged
        unbounded += sum(len(encode([run(c, restarts).as_dict()]).encode()) for c in range(MAX_CONTAINERS))
        assert size(records) <= STORE_BUDGET
        assert firsts(records) == {f"uid-{c}": 1 for c in range(MAX_CONTAINERS)}
    assert unbounded > CONFIGMAP_DATA_LIMIT  # the case is reached: without the bound it is refused
    assert len(records) > MAX_CONTAINERS  # more than the first failures still fit
    with_logs = ["logs" in r for r in records]
    assert any(with_logs) and with_logs == sorted(with_logs)  # the oldest logs went first


@pytest.mark.parametrize("seed", range(4))
def test_the_budget_holds_for_any_mix_of_logs_and_containers(seed):
    """Property-style: many containers, runs in any order, logs of any text (CJK, control
    characters that take 6 bytes each, quotes), messages at their longest."""
    import random

    draw = random.Random(seed)
    alphabet = [CJK, "\x1b[31m", '"\\', "ascii line\n", "🔥"]
    records: list = []
    restarts = dict.fromkeys(range(MAX_CONTAINERS + 8), 0)  # more containers than the store keeps
    logged = set()  # the runs made with a log
    for _ in range(40):
        batch = []
        for c in draw.sample(sorted(restarts), draw.randint(1, 20)):
            restarts[c] += draw.randint(1, 3)
            text = "".join(draw.choice(alphabet) for _ in range(draw.randint(0, 800)))
            batch.append(
                run(c, restarts[c], logs=text or None, message=text[: draw.randint(0, 2000)] or None)
            )
        logged.update(f.key for f in batch if f.logs)
        merged = merge(records, batch)
        if merged is not None:
            records = merged
        assert size(records) <= STORE_BUDGET
        kept = {r["pod_uid"] for r in records}
        assert len(kept) <= MAX_CONTAINERS
        for r in records:
            assert sum(1 for o in records if o["pod_uid"] == r["pod_uid"]) <= 1 + RECENT_PER_CONTAINER
    stripped = [r for r in records if "logs" not in r and evidence._key(r) in logged]
    assert stripped, ("the budget was never reached: the draw proves nothing", size(records), len(records))


def test_over_budget_the_oldest_logs_go_first_then_the_oldest_runs_never_a_first_failure():
    records = [run(0, 1).as_dict(), run(1, 1).as_dict(), run(0, 2).as_dict(), run(1, 2).as_dict()]
    first = [True, True, False, False]
    one = size([records[0]])
    logs = len(json.dumps(records[0]["logs"], ensure_ascii=False).encode()) + len(',"logs":')

    # room for all but about one log: only the oldest record's log goes
    cut = bounded(records, first, size(records) - logs // 2)
    assert ["logs" in r for r in cut] == [False, True, True, True]
    # room for two and a half records without logs: every log goes, then the oldest runs but
    # the first failures
    budget = 2 * (one - logs) + 3 + (one - logs) // 2
    cut = bounded(records, first, budget)
    assert [(r["pod_uid"], r["restart_count"]) for r in cut] == [("uid-0", 1), ("uid-1", 1)]
    assert not any("logs" in r for r in cut) and all("message" in r for r in cut)
    assert size(cut) <= budget


def test_the_first_failures_podsweeper_makes_fit_the_budget_whatever_they_hold():
    """The worst a record podsweeper makes can hold: names at their longest, every message
    and reason character a 6-byte escape. The 64 first failures still fit with their messages
    once the logs are gone: no first failure is ever dropped for its size."""
    worst = "\x00" * 5000
    records = []
    for c in range(MAX_CONTAINERS):
        f = run(c, 1, logs=worst, message=worst)
        big = {**f.as_dict(), "pod": "p" * 253, "node": "n" * 253, "container": "c" * 63}
        big["reason"] = worst[: evidence.MAX_REASON]
        records.append(big)
    cut = bounded(records, [True] * len(records), STORE_BUDGET)
    assert size(cut) <= STORE_BUDGET and len(cut) == MAX_CONTAINERS
    assert all("message" in r for r in cut)
    assert len(run(0, 1, logs=worst).logs.encode()) <= MAX_LOG_BYTES


def test_records_podsweeper_did_not_write_cannot_pass_the_budget_either():
    huge = [
        {"pod_uid": f"u{i}", "container": "c", "restart_count": 1, "junk": "x" * 300_000} for i in range(5)
    ]
    cut = bounded(huge, [True] * 5, STORE_BUDGET)
    assert size(cut) <= STORE_BUDGET and [r["pod_uid"] for r in cut] == ["u0", "u1", "u2"]


# -- a store the API refuses, or that is someone else's: logged, counted, never a 503 --------------


def dropped(record: str, reason: str) -> float:
    return (
        REGISTRY.get_sample_value("podsweeper_records_dropped_total", {"record": record, "reason": reason})
        or 0.0
    )


def test_a_store_the_api_refuses_is_logged_counted_remembered_and_no_503(monkeypatch, caplog):
    monkeypatch.setattr(evidence, "STORE_BUDGET", 4 * CONFIGMAP_DATA_LIMIT)  # as if unbounded
    cluster, keeper = Counting(), EvidenceKeeper(Settings())
    before = dropped("evidence", "refused")
    with caplog.at_level(logging.WARNING, logger="podsweeper.records"):
        for restarts in range(1, 8):
            keeper.keep(
                cluster, JOB, [run(c, restarts) for c in range(MAX_CONTAINERS)], read_logs=False, now=NOW
            )
    assert dropped("evidence", "refused") > before  # the API's 1 MiB was passed, and refused
    line = json.loads(caplog.records[-1].getMessage())
    assert (line["record"], line["reason"], line["job"]) == ("evidence", "refused", "big")
    cluster.calls.clear()
    keeper.keep(cluster, JOB, [run(c, 7) for c in range(MAX_CONTAINERS)], read_logs=False, now=NOW)
    assert cluster.calls == []  # remembered: not tried again on every event


def test_within_the_budget_the_same_job_is_never_refused():
    cluster, keeper = Counting(), EvidenceKeeper(Settings())
    before = dropped("evidence", "refused")
    for restarts in range(1, 13):
        keeper.keep(cluster, JOB, [run(c, restarts) for c in range(MAX_CONTAINERS)], read_logs=False, now=NOW)
    assert dropped("evidence", "refused") == before
    text, _ = cluster.evidence[("default", store_name("big"))]
    assert len(text.encode()) <= STORE_BUDGET
    assert firsts(decode(text)) == {f"uid-{c}": 1 for c in range(MAX_CONTAINERS)}


def test_a_configmap_at_the_stores_name_that_is_not_podsweepers_is_left_and_counted():
    cluster, keeper = Counting(), EvidenceKeeper(Settings())
    cluster.foreign_stores.add(("default", store_name("big")))
    before = dropped("evidence", "foreign")
    assert keeper.keep(cluster, JOB, [run(0, 1)], read_logs=False, now=NOW) == 1
    assert dropped("evidence", "foreign") == before + 1
    assert cluster.calls == ["read"] and cluster.evidence == {}
    keeper.keep(cluster, JOB, [run(0, 1)], read_logs=False, now=NOW)
    assert cluster.calls == ["read"]  # remembered


# -- container text only where the knobs allow it -----------------------------------------------


def with_message(raw: dict, message: str) -> dict:
    for status in raw["status"]["containerStatuses"]:
        status["lastState"]["terminated"]["message"] = message
    return raw


def looping_with_message(j, restarts=1):
    raw = pod(
        j, "Worker", 0, phase="Running", containers=[cs(state="waiting", restarts=restarts, last_exit=1)]
    )
    return with_message(raw, "Traceback: token=hunter2 (FallbackToLogsOnError: the log's tail)")


def failed_run_kept(annotations=None, **settings):
    j = job(conditions=RUNNING)
    cluster = Counting(namespaces={"default": Namespace("default", "ns-uid", annotations or {})})
    cluster.observe("add", parse_job(j))
    send(Pipeline(cluster, Settings(crashloop_restarts=50, **settings)), cluster, looping_with_message(j), 20)
    (record,) = cluster.records(j)
    return record, cluster.calls


def test_where_log_text_is_allowed_the_message_and_logs_are_kept():
    record, calls = failed_run_kept()
    assert "hunter2" in record["message"] and record["logs"] and calls[0].startswith("log")


@pytest.mark.parametrize(
    ("annotations", "settings"),
    [
        ({}, {"evidence_log_lines": 0}),
        ({}, {"evidence_logs_exclude_namespaces": "default"}),
        ({"podsweeper.dev/evidence-logs": "off"}, {}),
    ],
    ids=["log-lines-0", "namespace-excluded", "namespace-annotation-off"],
)
def test_where_log_text_is_not_allowed_no_termination_message_is_kept_either(annotations, settings):
    record, calls = failed_run_kept(annotations, **settings)
    assert "message" not in record and "logs" not in record and "hunter2" not in json.dumps(record)
    assert calls == ["read", "write"]  # no log read either
    assert record["exit_code"] == 1 and record["restart_count"] == 1  # the run itself is kept


def test_a_namespace_can_only_narrow_log_text_never_widen_it():
    on, off = {"podsweeper.dev/evidence-logs": "on"}, {"podsweeper.dev/evidence-logs": "off"}
    for settings in (
        Settings(),
        Settings(evidence_log_lines=0),
        Settings(evidence_logs_exclude_namespaces="team-a"),
        Settings(namespace_policy=False),
    ):
        globally = settings.evidence_log_lines > 0 and "team-a" not in settings.evidence_logs_excluded
        for notes in ({}, on, off, {"podsweeper.dev/evidence-logs": "bogus"}):
            policy = resolve(settings, "team-a", notes)
            assert policy.evidence_logs <= globally, (settings, notes)
            if annotations == off and settings.namespace_policy:
                assert not policy.evidence_logs and Knob.EVIDENCE_LOGS in policy.from_namespace
    refused = resolve(Settings(evidence_log_lines=0), "team-a", on)
    assert not refused.evidence_logs and "evidence-logs" in refused.problems[0]
    assert (
        "is not on or off"
        in resolve(Settings(), "team-a", {"podsweeper.dev/evidence-logs": "no"}).problems[0]
    )
    assert resolve(Settings(), "team-a", off).mode is resolve(Settings(), "team-a", {}).mode  # nothing else


def test_the_keeper_reads_the_namespace_policy_to_strip_text():
    """The keeper, given a policy that turns text off, keeps the run and drops its text even
    when the global settings would have kept it (after_acting: logs read before)."""
    cluster = Counting()
    off = resolve(Settings(), "default", {"podsweeper.dev/evidence-logs": "off"})

    class Policies:  # every namespace admitted, under the policy that turns text off
        def admit(self, _cluster, _namespace, _now):
            return Resolved(off, Settings())

    keeper = EvidenceKeeper(Settings(), Policies())
    keeper.keep(cluster, JOB, [run(0, 1)], read_logs=False, now=NOW)
    (record,) = decode(cluster.evidence[("default", store_name("big"))][0])
    assert "logs" not in record and "message" not in record and record["restart_count"] == 1


# -- whose a ConfigMap is, and when a finish mark counts ----------------------------------------


def configmap(label: str | None, owners: list[dict], created: str = "2025-01-01T00:00:10Z") -> dict:
    meta: dict = {"name": "x", "ownerReferences": owners, "creationTimestamp": created}
    if label is not None:
        meta["labels"] = {label: "big"}
    return {"metadata": meta}


OWNER = {"kind": "PyTorchJob", "name": "big", "uid": "job-uid"}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (configmap(FINISH_MARK_LABEL, [OWNER]), Whose.THIS_JOB),
        (configmap(FINISH_MARK_LABEL, [{**OWNER, "uid": "older-uid"}]), Whose.EARLIER_JOB),
        (configmap(None, [OWNER]), Whose.FOREIGN),  # no label: someone else's, owner or not
        (configmap(EVIDENCE_LABEL, [OWNER]), Whose.FOREIGN),  # another record's label
        (configmap(FINISH_MARK_LABEL, []), Whose.FOREIGN),  # nobody's
        (configmap(FINISH_MARK_LABEL, [{**OWNER, "uid": "u", "kind": "ConfigMap"}]), Whose.FOREIGN),
        ({"metadata": {"labels": {FINISH_MARK_LABEL: "other"}, "ownerReferences": [OWNER]}}, Whose.FOREIGN),
    ],
)
def test_whose_a_configmap_is(body, expected):
    assert whose(body, JOB, FINISH_MARK_LABEL) is expected


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (configmap(EVIDENCE_LABEL, [OWNER]), Whose.THIS_JOB),
        (configmap(EVIDENCE_LABEL, [{**OWNER, "kind": "TrainJob", "uid": "tj-uid"}]), Whose.THIS_JOB),
        (configmap(None, [OWNER]), Whose.FOREIGN),
        (configmap(EVIDENCE_LABEL, []), Whose.FOREIGN),
        (configmap(EVIDENCE_LABEL, [{**OWNER, "name": "other"}]), Whose.FOREIGN),
    ],
)
def test_a_read_by_name_alone_finds_the_store_of_whichever_job_of_the_name(body, expected):
    """`podsweeper evidence NS/JOB`: a person names the job, not its kind or uid; the store of
    the job of that name (whatever its kind) is podsweeper's, a ConfigMap without its label not."""
    by_name = JobRef(kinds.TRAINING_KINDS[0], "default", "big")
    assert whose(body, by_name, EVIDENCE_LABEL) is expected


def test_a_mark_made_before_its_job_is_not_the_jobs():
    body = configmap(FINISH_MARK_LABEL, [OWNER], created="2025-01-01T00:00:10Z")
    assert predates(body, datetime(2025, 1, 1, 0, 0, 11, tzinfo=UTC))
    assert not predates(body, datetime(2025, 1, 1, 0, 0, 10, tzinfo=UTC))  # the same second: may be
    assert not predates(body, None)  # the job's creation unknown
    assert predates(configmap(FINISH_MARK_LABEL, [OWNER], created="yesterday"), T0)


def test_a_simulated_cluster_takes_the_jobs_creation_time():
    cluster = SimulatedCluster()
    assert cluster.read_finish_mark(JOB, created=T0) is None


def test_the_drop_reasons_are_a_bounded_label_set():
    assert {r.value for r in evidence.Dropped} == {"foreign", "earlier", "refused", "unsigned"}
    assert event and at  # the builders the other evidence tests share are importable here
