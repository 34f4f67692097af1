"""Evidence that outlives the pod: which runs are kept, the bound, what it costs, and that
each record tells what happened to its pod (never a delete that did not happen)."""

from __future__ import annotations

import io

import pytest

from podsweeper.cluster.simulated import SimulatedCluster
from podsweeper.config import Settings
from podsweeper.decisions import Result
from podsweeper.errors import ApiUnavailable
from podsweeper.evidence import (
    RECENT_PER_CONTAINER,
    Source,
    decode,
    failures_of,
    merge,
    source_of,
    store_name,
)
from podsweeper.intake import parse_event
from podsweeper.model import Verb
from podsweeper.pipeline import Pipeline
from podsweeper.timeline import print_evidence
from tests.fixtures import trainer as v2
from tests.fixtures.builders import SECRET, at, event, job, pod, split
from tests.fixtures.builders import container_status as cs
from tests.fixtures.parse import parse_intermediate, parse_job, parse_pod

TERMINATED = Source.TERMINATED

RUNNING = [("Created", at(0)), ("Running", at(2))]
SUCCEEDED = RUNNING + [("Succeeded", at(30))]


def looping(j, restarts, index=0, exit_code=1):
    return pod(
        j,
        "Worker",
        index,
        phase="Running",
        containers=[cs(state="waiting", reason="CrashLoopBackOff", restarts=restarts, last_exit=exit_code)],
    )


class Counting(SimulatedCluster):
    """Counts the evidence store's reads and writes and the log reads, with a log to read."""

    def __post_init__(self):
        super().__post_init__()
        self.calls: list[str] = []

    def read_evidence(self, job):
        self.calls.append("read")
        return super().read_evidence(job)

    def write_evidence(self, job, records, version):
        self.calls.append("write")
        return super().write_evidence(job, records, version)

    def container_log(self, namespace, pod, container, previous, lines, limit_bytes):
        self.calls.append(f"log previous={previous}")
        return "\n".join(f"line {i}" for i in range(lines)) + "\nTraceback: CUDA error"

    def delete_pod(self, namespace, name, uid, resource_version="", force=False):
        self.calls.append("delete")
        return super().delete_pod(namespace, name, uid, resource_version, force)

    def records(self, j):
        found = self.evidence.get((j["metadata"]["namespace"], store_name(j["metadata"]["name"])))
        return decode(found[0]) if found else []


def setup(**kw):
    j = job(conditions=RUNNING)
    cluster = Counting()
    cluster.observe("add", parse_job(j))
    return j, cluster, Pipeline(cluster, Settings(**{"dry_run": False, "crashloop_restarts": 50, **kw}))


def send(pipeline, cluster, raw, seconds):
    cluster.observe("update", parse_pod(raw))
    return pipeline.handle(parse_event(*split(event("update", raw, at(seconds)))), at(seconds))


def test_a_failed_run_is_kept_with_its_last_log_lines_and_no_environment_value():
    j, cluster, pipeline = setup(evidence_log_lines=5)
    send(pipeline, cluster, looping(j, 1), 20)
    (record,) = cluster.records(j)
    assert (record["pod"], record["container"], record["exit_code"], record["restart_count"]) == (
        "pytest-worker-0",
        "pytorch",
        1,
        1,
    )
    assert record["node"] == "las1" and record["gpus"] == 1 and record["source"] == TERMINATED
    assert record["logs"].endswith("CUDA error") and "line 4" in record["logs"]
    assert cluster.calls == ["log previous=True", "read", "write"]  # the previous run's log
    assert SECRET not in str(cluster.evidence)


def test_a_pod_event_with_no_new_termination_costs_no_request():
    j, cluster, pipeline = setup()
    send(pipeline, cluster, pod(j, "Worker", 0, phase="Running", containers=[cs()]), 5)  # healthy
    assert cluster.calls == []
    send(pipeline, cluster, looping(j, 1), 20)
    cluster.calls.clear()
    send(pipeline, cluster, looping(j, 1), 25)  # the same run seen again
    assert cluster.calls == []


def test_a_crash_loop_keeps_the_first_failure_and_the_recent_ones_and_stops_writing_every_restart():
    j, cluster, pipeline = setup(evidence_log_lines=0)
    writes = []
    for restarts in range(1, 41):
        before = cluster.calls.count("write")
        send(pipeline, cluster, looping(j, restarts), 10 * restarts)
        writes.append(cluster.calls.count("write") - before)
    kept = cluster.records(j)
    assert [r["restart_count"] for r in kept][0] == 1  # the first failure stays
    assert len(kept) == 1 + RECENT_PER_CONTAINER
    # within the bound every failure, beyond it only when the restart count doubled (8, 16, 32)
    assert [i + 1 for i, w in enumerate(writes) if w] == [1, 2, 3, 4, 8, 16, 32]
    assert "log" not in " ".join(cluster.calls)  # PODSWEEPER_EVIDENCE_LOG_LINES=0


def test_another_exit_code_is_kept_even_beyond_the_bound():
    j, cluster, pipeline = setup(evidence_log_lines=0)
    for restarts in range(1, 6):
        send(pipeline, cluster, looping(j, restarts), 10 * restarts)
    send(pipeline, cluster, looping(j, 6, exit_code=137), 60)
    assert cluster.records(j)[-1]["exit_code"] == 137


@pytest.mark.parametrize(
    "setting", [{"evidence_logs_exclude_namespaces": "default"}, {"evidence_log_lines": 0}]
)
def test_logs_can_be_turned_off_per_namespace_or_everywhere(setting):
    j, cluster, pipeline = setup(**setting)
    send(pipeline, cluster, looping(j, 1), 20)
    assert "logs" not in cluster.records(j)[0] and cluster.calls == ["read", "write"]


def test_evidence_can_be_turned_off():
    j, cluster, pipeline = setup(evidence=False)
    send(pipeline, cluster, looping(j, 1), 20)
    assert cluster.calls == [] and cluster.evidence == {}


def finished_with_loopers(cluster=None, pods=3, **job_kw):
    """A Succeeded job whose crash-looping workers podsweeper is to delete (rule
    finished-job-active-pod), in a Counting cluster."""
    j = job(conditions=SUCCEEDED, **job_kw)
    cluster = cluster or Counting()
    cluster.observe("add", parse_job(j))
    for i in range(pods):
        cluster.observe("add", parse_pod(looping(j, 4, index=i)))
    return j, cluster


def job_pass(pipeline, j, seconds=40):
    return pipeline.handle(parse_event(*split(event("update", j, at(seconds)))), at(seconds))


def sources(cluster, j):
    return {r["pod"]: r["source"] for r in cluster.records(j)}


def test_the_pods_podsweeper_deletes_leave_their_evidence_read_before_and_written_after():
    j, cluster = finished_with_loopers()
    job_pass(Pipeline(cluster, Settings(dry_run=False)), j)
    kept = cluster.records(j)
    assert sorted(r["pod"] for r in kept) == ["pytest-worker-0", "pytest-worker-1", "pytest-worker-2"]
    assert {r["source"] for r in kept} == {"deleted by podsweeper"} and all(r["logs"] for r in kept)
    assert not cluster.pods
    # the logs while the pods exist, the store once the deletes are known: one write
    assert cluster.calls == ["log previous=True"] * 3 + ["delete"] * 3 + ["read", "write"]


def test_in_dry_run_no_record_says_podsweeper_deleted_a_pod():
    j, cluster = finished_with_loopers()
    outcome = job_pass(Pipeline(cluster, Settings(dry_run=True)), j)
    assert [a.result for a in outcome.applied] == [Result.DRY_RUN] * 3 and len(cluster.pods) == 3
    kept = cluster.records(j)
    assert len(kept) == 3 and all(r["logs"] for r in kept)  # what a dry run shows, logs included
    assert {r["source"] for r in kept} == {"would be deleted (dry-run)"}
    assert "delete" not in cluster.calls


def test_a_pod_deferred_by_the_bound_is_recorded_deferred_then_upgraded_once_deleted():
    j, cluster = finished_with_loopers(pods=5, replicas={"Worker": 1})  # declared 1 + margin 2 = 3
    pipeline = Pipeline(cluster, Settings(dry_run=False))
    outcome = job_pass(pipeline, j)
    deferred = {a.decision.name for a in outcome.applied if a.result is Result.DEFERRED}
    assert len(deferred) == 2
    by_pod = sources(cluster, j)
    assert {by_pod[name] for name in deferred} == {"deferred to the next event"}
    assert {s for name, s in by_pod.items() if name not in deferred} == {"deleted by podsweeper"}

    # The next event deletes them: the instance's memory of "deferred" does not swallow it,
    # and the logs read while they existed stay (not read again).
    cluster.calls.clear()
    job_pass(pipeline, j, 41)
    assert set(sources(cluster, j).values()) == {"deleted by podsweeper"} and not cluster.pods
    assert all(r["logs"] for r in cluster.records(j))
    assert cluster.calls == ["delete", "delete", "read", "write"]


class Refusing(Counting):
    """The API answers every pod delete with `result` (409: the pod changed; 404: gone)."""

    result = Result.CONFLICT

    def delete_pod(self, namespace, name, uid, resource_version="", force=False):
        self.calls.append("delete")
        return self.result


@pytest.mark.parametrize(
    ("result", "source"),
    [(Result.CONFLICT, "kept after a conflict"), (Result.GONE, "already gone")],
)
def test_a_delete_refused_by_the_api_is_recorded_as_what_it_was(result, source):
    cluster = Refusing()
    cluster.result = result
    j, cluster = finished_with_loopers(cluster)
    outcome = job_pass(Pipeline(cluster, Settings(dry_run=False)), j)
    assert [a.result for a in outcome.applied] == [result] * 3
    assert set(sources(cluster, j).values()) == {source}


def test_each_delete_result_has_one_source_and_none_but_deleted_claims_podsweepers_delete():
    deleting = {Result.DELETED, Result.DRY_RUN, Result.DEFERRED, Result.CONFLICT, Result.GONE}
    claims = {r for r in deleting if source_of(r) is Source.DELETED_BY_PODSWEEPER}
    assert claims == {Result.DELETED}
    assert len({source_of(r) for r in deleting}) == len(deleting)
    assert source_of(None) is Source.TERMINATED  # no result known: merely seen terminated


def test_a_run_seen_terminated_is_upgraded_when_podsweeper_deletes_its_pod():
    j, cluster, pipeline = setup(evidence_log_lines=5)
    send(pipeline, cluster, looping(j, 4), 20)
    assert sources(cluster, j) == {"pytest-worker-0": "terminated"}
    cluster.calls.clear()
    finished = job(conditions=SUCCEEDED)
    cluster.observe("update", parse_job(finished))
    job_pass(pipeline, finished)
    (record,) = cluster.records(j)  # the same run: replaced, not added
    assert record["source"] == "deleted by podsweeper" and record["logs"].endswith("CUDA error")
    assert cluster.calls == ["delete", "read", "write"]  # its log was read before, and is kept


def test_a_later_sighting_never_downgrades_a_record_and_costs_nothing():
    j, cluster = finished_with_loopers(pods=1)
    pipeline = Pipeline(cluster, Settings(dry_run=True))
    job_pass(pipeline, j)
    assert sources(cluster, j) == {"pytest-worker-0": "would be deleted (dry-run)"}
    cluster.calls.clear()
    send(pipeline, cluster, looping(j, 4), 45)  # the same run, seen again in a pod event
    assert cluster.calls == [] and sources(cluster, j) == {"pytest-worker-0": "would be deleted (dry-run)"}
    Pipeline(cluster, Settings(dry_run=False)).handle(
        parse_event(*split(event("update", looping(j, 4), at(46)))), at(46)
    )
    assert sources(cluster, j) == {"pytest-worker-0": "would be deleted (dry-run)"}  # another instance

    # Deleted for real (another instance: no memory), then its delete event, seen by a third.
    job_pass(Pipeline(cluster, Settings(dry_run=False)), j, 50)
    assert sources(cluster, j) == {"pytest-worker-0": "deleted by podsweeper"}
    cluster.calls.clear()
    gone = looping(j, 4)
    Pipeline(cluster, Settings(dry_run=False)).handle(
        parse_event(*split(event("delete", gone, at(51)))), at(51)
    )
    assert sources(cluster, j) == {"pytest-worker-0": "deleted by podsweeper"}
    assert "write" not in cluster.calls


class FailingAfterFirstDelete(Counting):
    """The API fails from the second pod delete on (and, with `store_down`, for the store)."""

    store_down = False

    def delete_pod(self, namespace, name, uid, resource_version="", force=False):
        if "delete" in self.calls:
            raise ApiUnavailable("the API went away")
        return super().delete_pod(namespace, name, uid, resource_version, force)

    def write_evidence(self, job, records, version):
        if self.store_down:
            raise ApiUnavailable("the store went away too")
        return super().write_evidence(job, records, version)


def test_when_the_api_fails_mid_pass_what_was_deleted_is_kept_and_the_failure_goes_on():
    j, cluster = finished_with_loopers(FailingAfterFirstDelete())
    with pytest.raises(ApiUnavailable, match="the API went away"):
        job_pass(Pipeline(cluster, Settings(dry_run=False), concurrent_deletes=False), j)
    by_pod = sources(cluster, j)
    assert by_pod["pytest-worker-0"] == "deleted by podsweeper"
    # The others are still there, their fate unknown: merely seen terminated.
    assert by_pod["pytest-worker-1"] == by_pod["pytest-worker-2"] == "terminated"
    assert set(by_pod) - {"pytest-worker-0"} == {p.name for p in cluster.pods.values()}


def test_when_the_store_fails_too_the_deletes_failure_is_the_one_that_goes_on():
    cluster = FailingAfterFirstDelete()
    cluster.store_down = True
    j, cluster = finished_with_loopers(cluster)
    with pytest.raises(ApiUnavailable, match="the API went away"):
        job_pass(Pipeline(cluster, Settings(dry_run=False), concurrent_deletes=False), j)


class DeleteEventMeanwhile(Counting):
    """Each pod delete is followed at once by the pod's delete event, handled by the same
    instance while its pass is still acting (Knative delivers them concurrently)."""

    pipeline = None

    def delete_pod(self, namespace, name, uid, resource_version="", force=False):
        gone = self.pods[(namespace, name)]
        result = super().delete_pod(namespace, name, uid, resource_version, force)
        raw = looping(job(conditions=SUCCEEDED), 4, index=int(gone.name.rsplit("-", 1)[1]))
        self.pipeline.handle(parse_event(*split(event("delete", raw, at(40)))), at(40))
        return result


def test_a_pods_delete_event_during_the_pass_waits_for_the_passs_record():
    j, cluster = finished_with_loopers(DeleteEventMeanwhile())
    cluster.pipeline = pipeline = Pipeline(cluster, Settings(dry_run=False), concurrent_deletes=False)
    job_pass(pipeline, j)
    assert set(sources(cluster, j).values()) == {"deleted by podsweeper"}
    assert cluster.calls.count("write") == 1  # the delete events wrote nothing of their own


@pytest.mark.parametrize("dry_run", [False, True])
def test_the_pods_a_chain_delete_takes_with_it_are_kept_as_seen_terminated(dry_run):
    """An orphaned batch Job of a TrainJob (its JobSet deleted with propagation Orphan): its
    pods go with it by the garbage collector's hand, or stay (dry-run). Never "deleted by
    podsweeper"."""
    tj, js, _, _ = v2.chain()
    orphan_job = v2.batch_job(js, owned=False)
    failed = v2.pod(orphan_job, 1, phase="Failed", exit_code=3)
    cluster = Counting()
    for obj in (tj, orphan_job, v2.pod(orphan_job, 0), failed):
        parse = {"Pod": parse_pod, "TrainJob": parse_job}.get(obj["kind"], parse_intermediate)
        cluster.observe(Verb.ADD, parse(obj))
    outcome = Pipeline(cluster, Settings(dry_run=dry_run)).handle(
        parse_event(*split(event("update", orphan_job, at(100)))), at(100)
    )
    assert [a.result for a in outcome.applied] == [Result.DRY_RUN if dry_run else Result.DELETED]
    (records,) = [decode(text) for text, _ in cluster.evidence.values()]
    assert [(r["pod"], r["source"]) for r in records] == [(failed["metadata"]["name"], "terminated")]


def test_merge_is_pure_and_says_when_nothing_is_new():
    j = job(conditions=RUNNING)
    failures = failures_of(parse_pod(looping(j, 3)), 1, TERMINATED)
    first = merge([], failures)
    assert first is not None and merge(first, failures) is None


def run(source, logs=None, restarts=3):
    (failure,) = failures_of(parse_pod(looping(job(conditions=RUNNING), restarts)), 1, TERMINATED)
    return failure.kept_as(source).with_logs(logs)


@pytest.mark.parametrize(
    ("kept", "new", "upgraded"),
    [
        (Source.TERMINATED, Source.DELETED_BY_PODSWEEPER, True),
        (Source.WOULD_BE_DELETED, Source.DELETED_BY_PODSWEEPER, True),
        (Source.DEFERRED, Source.DELETED_BY_PODSWEEPER, True),
        (Source.KEPT_AFTER_CONFLICT, Source.DELETED_BY_PODSWEEPER, True),
        (Source.TERMINATED, Source.WOULD_BE_DELETED, True),
        (Source.TERMINATED, Source.ALREADY_GONE, True),
        (Source.DELETED, Source.DELETED_BY_PODSWEEPER, True),  # its delete event came first
        # never downgraded
        (Source.DELETED_BY_PODSWEEPER, Source.TERMINATED, False),
        (Source.DELETED_BY_PODSWEEPER, Source.WOULD_BE_DELETED, False),
        (Source.DELETED_BY_PODSWEEPER, Source.DELETED, False),
        (Source.DELETED_BY_PODSWEEPER, Source.ALREADY_GONE, False),
        (Source.DELETED, Source.WOULD_BE_DELETED, False),
        (Source.DELETED, Source.TERMINATED, False),
        (Source.WOULD_BE_DELETED, Source.TERMINATED, False),
        (Source.DEFERRED, Source.WOULD_BE_DELETED, False),
        # a sighting never rewrites a run already kept (a delete event would write per pod)
        (Source.TERMINATED, Source.DELETED, False),
        (Source.WOULD_BE_DELETED, Source.DELETED, False),
    ],
)
def test_a_run_kept_is_replaced_only_by_a_stronger_outcome(kept, new, upgraded):
    records = merge([], [run(kept)])
    assert records is not None
    merged = merge(records, [run(new)])
    assert (merged is not None) is upgraded
    if merged is not None:
        assert [r["source"] for r in merged] == [new.value]


def test_an_upgrade_keeps_the_logs_read_earlier_unless_it_has_its_own():
    records = merge([], [run(Source.DEFERRED, logs="Traceback: NCCL timeout")])
    assert records is not None
    (upgraded,) = merge(records, [run(Source.DELETED_BY_PODSWEEPER)]) or []
    assert upgraded["logs"] == "Traceback: NCCL timeout"
    (fresh,) = merge(records, [run(Source.DELETED_BY_PODSWEEPER, logs="newer")]) or []
    assert fresh["logs"] == "newer"


def test_a_source_this_version_does_not_know_is_never_replaced():
    records = [{**run(TERMINATED).as_dict(), "source": "seen by a newer podsweeper"}]
    assert merge(records, [run(Source.DELETED_BY_PODSWEEPER)]) is None


def test_the_stores_already_written_stay_readable():
    assert [Source(v) for v in ("terminated", "deleted", "deleted by podsweeper")] == [
        Source.TERMINATED,
        Source.DELETED,
        Source.DELETED_BY_PODSWEEPER,
    ]


def test_a_crash_loops_end_by_podsweepers_hand_is_kept_beyond_the_bound():
    """Past the bound a loop is written only on a change: podsweeper's delete is one."""
    records: list = []
    for restarts in range(1, 1 + RECENT_PER_CONTAINER + 1):
        records = merge(records, [run(TERMINATED, restarts=restarts)]) or records
    assert len(records) == 1 + RECENT_PER_CONTAINER and records[-1]["restart_count"] == 4
    assert merge(records, [run(TERMINATED, restarts=6)]) is None  # 6 < 2 x 4: not kept
    merged = merge(records, [run(Source.DELETED_BY_PODSWEEPER, restarts=6)])
    assert merged is not None and merged[-1]["source"] == "deleted by podsweeper"
    assert merged[0]["restart_count"] == 1 and len(merged) == 1 + RECENT_PER_CONTAINER


def test_the_timeline_says_what_became_of_each_pod_in_words():
    records = [
        {**run(Source.WOULD_BE_DELETED).as_dict(), "pod": "dry"},
        {**run(TERMINATED).as_dict(), "source": "seen by a newer podsweeper"},
    ]
    out = io.StringIO()
    print_evidence("default/pytest", records, out)
    text = out.getvalue()
    assert "source: would be deleted (dry-run) (podsweeper decided to delete the pod; dry-run: it was" in text
    assert "source: seen by a newer podsweeper\n" in text
    assert "deleted by podsweeper" not in text


def _kubelet_status(restarts: int, state: dict, last: dict | None) -> dict:
    return {"name": "pytorch", "restartCount": restarts, "state": state, "lastState": last or {}}


def _ended(run: int, finished: str) -> dict:
    return {
        "terminated": {
            "exitCode": 1,
            "reason": "Error",
            "startedAt": finished,
            "finishedAt": finished,
            "containerID": f"containerd://run{run}",
        }
    }


def test_a_run_shown_three_ways_by_a_real_kubelet_is_kept_once():
    """The real kubelet (v1.36.3, docs/seed.md "On a real node") shows a failed run k as the
    container's state at restart count k, then in CrashLoopBackOff as its last state still at
    k, then running again as its last state at k + 1: one run (its containerID), one record."""
    j = job(backoff_limit=None, conditions=RUNNING)
    first, second = _ended(0, "2026-11-01T10:00:14Z"), _ended(1, "2026-11-01T10:00:25Z")
    crash = {"waiting": {"reason": "CrashLoopBackOff"}}
    running = {"running": {"startedAt": "2026-11-01T10:00:15Z"}}
    shown = [
        _kubelet_status(0, first, None),
        _kubelet_status(1, running, first),
        _kubelet_status(1, second, first),
        _kubelet_status(1, crash, second),
        _kubelet_status(2, running, second),
    ]
    records: list = []
    for status in shown:
        raw = pod(j, "Worker", 0, phase="Running", containers=[status])
        records = merge(records, failures_of(parse_pod(raw), 0, TERMINATED)) or records
    assert [(r["run_id"], r["restart_count"]) for r in records] == [
        ("containerd://run0", 0),
        ("containerd://run1", 1),
    ]
