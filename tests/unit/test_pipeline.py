"""The pipeline against the simulated cluster: fresh reads, uid preconditions, caps, dry-run, Events."""

from __future__ import annotations

import json
import logging

import pytest

from podsweeper.cluster.simulated import SimulatedCluster
from podsweeper.config import Settings
from podsweeper.decisions import Result, Rule
from podsweeper.intake import parse_event
from podsweeper.pipeline import Pipeline
from tests.fixtures.builders import at, event, job, ping, pod, split
from tests.fixtures.builders import container_status as cs
from tests.fixtures.parse import parse_job, parse_pod

SUCCEEDED = [("Created", at(0)), ("Running", at(2)), ("Succeeded", at(30))]
RUNNING_ONLY = [("Created", at(0)), ("Running", at(2))]


def cluster_with(job_raw, pods_raw) -> SimulatedCluster:
    cluster = SimulatedCluster()
    if job_raw is not None:
        cluster.observe("add", parse_job(job_raw))
    for raw in pods_raw:
        cluster.observe("add", parse_pod(raw))
    return cluster


def handle(cluster, raw_event, **kw):
    return Pipeline(cluster, Settings(**{"dry_run": False, **kw})).handle(
        parse_event(*split(raw_event)), at(600)
    )


def crash_looping_workers(j, n=3):
    return [
        pod(
            j,
            "Worker",
            i,
            phase="Running",
            containers=[cs(state="waiting", reason="CrashLoopBackOff", restarts=4, last_exit=1)],
        )
        for i in range(n)
    ]


def test_decides_on_fresh_state_not_on_a_stale_payload():
    """A job payload says Succeeded but the cluster's job is running again: nothing is deleted."""
    running = job(conditions=[("Created", at(0)), ("Running", at(2))])
    cluster = cluster_with(running, crash_looping_workers(running))
    outcome = handle(cluster, event("update", job(conditions=SUCCEEDED), at(40)))
    assert outcome.applied == [] and len(cluster.pods) == 3


def test_duplicate_event_deletes_nothing_twice():
    j = job(conditions=SUCCEEDED)
    cluster = cluster_with(j, crash_looping_workers(j))
    first = event("update", j, at(40))
    assert [a.result for a in handle(cluster, first).applied] == ["deleted"] * 3
    assert handle(cluster, first).applied == []
    assert len(cluster.events) == 1  # one PodsCleanedUp


def test_uid_precondition_protects_a_pod_recreated_under_the_same_name():
    j = job(conditions=SUCCEEDED)
    cluster = cluster_with(j, crash_looping_workers(j, 1))
    stale = parse_pod(crash_looping_workers(j, 1)[0])
    recreated = pod(j, "Worker", 0, phase="Running", pod_uid="new-uid")
    cluster.observe("add", parse_pod(recreated))
    assert cluster.delete_pod(stale.namespace, stale.name, stale.uid) is Result.CONFLICT
    assert cluster.pods[("default", "pytest-worker-0")].uid == "new-uid"


def test_a_job_pass_deletes_up_to_what_the_job_declares_whatever_the_fixed_cap():
    """A finished 1,024-worker job is cleaned by its own event: the bound is its declared size."""
    j = job(conditions=SUCCEEDED, replicas={"Master": 1, "Worker": 40})
    cluster = cluster_with(j, crash_looping_workers(j, 40))
    outcome = handle(cluster, event("update", j, at(40)), max_deletes_per_event=2)
    assert [a.result for a in outcome.applied] == [Result.DELETED] * 40 and outcome.deferred == 0


def test_pods_beyond_the_declared_size_and_margin_are_deferred():
    j = job(conditions=SUCCEEDED, replicas={"Worker": 3})  # declared 3 + margin 2 = 5
    cluster = cluster_with(j, crash_looping_workers(j, 8))
    outcome = handle(cluster, event("update", j, at(40)))
    assert sorted(a.result for a in outcome.applied) == [Result.DEFERRED] * 3 + [Result.DELETED] * 5
    assert outcome.deferred == 3 and len(cluster.pods) == 3


def test_orphans_have_no_declared_size_and_get_the_fixed_cap():
    j = job(conditions=RUNNING_ONLY)
    cluster = cluster_with(j, crash_looping_workers(j, 3))
    cluster.observe("delete", parse_job(j))
    outcome = handle(cluster, event("delete", j, at(600)), max_deletes_per_event=2)
    assert sorted(a.result for a in outcome.applied) == ["deferred", "deleted", "deleted"]
    assert (
        handle(cluster, event("delete", j, at(601)), max_deletes_per_event=2).applied[0].result == "deleted"
    )


def test_dry_run_decides_everything_and_deletes_nothing():
    j = job(conditions=SUCCEEDED)
    cluster = cluster_with(j, crash_looping_workers(j))
    outcome = handle(cluster, event("update", j, at(40)), dry_run=True)
    assert [a.result for a in outcome.applied] == ["dry-run"] * 3
    assert len(cluster.pods) == 3 and not cluster.events


def test_pods_cleaned_up_event_carries_the_evidence():
    j = job(conditions=SUCCEEDED)
    cluster = cluster_with(j, crash_looping_workers(j))
    handle(cluster, event("update", j, at(40)))
    (recorded,) = cluster.events.values()
    record = recorded.record
    assert record.reason == "PodsCleanedUp" and record.type == "Normal"
    assert record.involved.name == "pytest" and record.involved.uid == j["metadata"]["uid"]
    for i in range(3):
        assert f"pytest-worker-{i}" in record.message
    assert "exit code 1" in record.message and "4 restarts" in record.message


def test_a_pass_logs_its_deletes_only_after_their_event_is_written():
    """A pass killed between its deletes and their PodsCleanedUp Event leaves no decision line
    either: the order the real-node kill test relies on to tell a lost Event (the killed
    replica's) from a pass that deleted and never wrote one."""
    order: list[str] = []

    class Recording(SimulatedCluster):
        def record_event(self, record):
            order.append(f"event {record.reason}")
            return super().record_event(record)

    class Lines(logging.Handler):
        def emit(self, line):
            item = json.loads(line.getMessage())
            order.append(f"decision {item['name']} {item['result']}")

    j = job(conditions=SUCCEEDED)
    cluster = Recording()
    cluster.observe("add", parse_job(j))
    for raw in crash_looping_workers(j):
        cluster.observe("add", parse_pod(raw))
    lines, log = Lines(), logging.getLogger("podsweeper.decisions")
    level = log.level
    log.addHandler(lines)
    log.setLevel(logging.INFO)
    try:
        handle(cluster, event("update", j, at(40)))
    finally:
        log.removeHandler(lines)
        log.setLevel(level)
    deleted = [i for i, said in enumerate(order) if said.endswith(" deleted")]
    assert len(deleted) == 3 and order.count("event PodsCleanedUp") == 1, order
    assert order.index("event PodsCleanedUp") < min(deleted), order


def test_repeated_crash_loop_warnings_update_one_event():
    j = job(conditions=[("Created", at(0)), ("Running", at(2))])
    cluster = cluster_with(j, [])
    for restarts in (5, 6, 7):
        looping = pod(
            j,
            "Worker",
            0,
            phase="Running",
            containers=[cs(state="waiting", reason="CrashLoopBackOff", restarts=restarts)],
        )
        cluster.observe("update", parse_pod(looping))
        outcome = handle(cluster, event("update", looping, at(100 + restarts)))
        assert [a.decision.rule for a in outcome.applied] == [Rule.CRASH_LOOP]
    (warning,) = cluster.events.values()
    assert warning.count == 3 and warning.record.type == "Warning"
    assert "7 restarts" in warning.record.message


def test_crash_loop_warning_is_written_again_only_when_restarts_grew():
    """Each pod event triggers a pass over the whole job; a pod whose restart count did not
    grow since its last warning is not warned again (counts follow crashes, not passes)."""
    j = job(conditions=[("Created", at(0)), ("Running", at(2))])
    cluster = cluster_with(j, [])

    def looping(index, restarts):
        return pod(
            j,
            "Worker",
            index,
            phase="Running",
            containers=[cs(state="waiting", reason="CrashLoopBackOff", restarts=restarts, last_exit=1)],
        )

    for index in (0, 1):
        cluster.observe("update", parse_pod(looping(index, 5)))
    first = handle(cluster, event("update", looping(0, 5), at(100)))
    assert sorted(a.result for a in first.applied) == [Result.WARNED, Result.WARNED]
    cluster.observe("update", parse_pod(looping(1, 6)))  # worker 1 crashed again, worker 0 did not
    second = handle(cluster, event("update", looping(1, 6), at(110)))
    results = {a.decision.name: a.result for a in second.applied}
    assert results == {"pytest-worker-0": Result.ALREADY_WARNED, "pytest-worker-1": Result.WARNED}
    counts = sorted((r.record.message.split(":")[0], r.count) for r in cluster.events.values())
    assert counts == [("Pod pytest-worker-0", 1), ("Pod pytest-worker-1", 2)]


def test_irrelevant_pod_event_reads_nothing():
    class NoReads(SimulatedCluster):
        def __getattribute__(self, name):
            if name in ("get_job", "get_pod", "list_job_pods", "list_jobs", "training_pod_pages"):
                raise AssertionError(f"unexpected API call {name}")
            return super().__getattribute__(name)

    j = job(conditions=SUCCEEDED)
    plain = pod(j, "Worker", 0, phase="Running", owner=False, labels=False)
    outcome = handle(NoReads(), event("update", plain, at(1)))
    assert outcome.applied == [] and "not a pod of a training job" in outcome.note
    running_pod = pod(j, "Worker", 0, phase="Running")
    assert handle(NoReads(), event("update", running_pod, at(1))).applied == []


def test_job_delete_event_makes_remaining_pods_orphans():
    j = job(conditions=[("Created", at(0))])
    cluster = cluster_with(j, crash_looping_workers(j, 2))
    cluster.observe("delete", parse_job(j))
    outcome = handle(cluster, event("delete", j, at(500)))
    assert {a.decision.rule for a in outcome.applied} == {Rule.ORPHAN} and not cluster.pods


def test_job_never_seen_in_a_replay_is_unknown_not_gone():
    j = job(conditions=[("Created", at(0))])
    cluster = cluster_with(None, crash_looping_workers(j, 2))
    outcome = handle(cluster, ping(at(900)))
    assert outcome.applied == [] and len(cluster.pods) == 2


def test_sweep_finds_what_events_missed():
    j = job(conditions=SUCCEEDED)
    cluster = cluster_with(j, crash_looping_workers(j))
    outcome = handle(cluster, ping(at(900)))
    assert [a.result for a in outcome.applied] == ["deleted"] * 3


def test_sweep_limited_to_allowed_namespaces():
    inside, outside = (
        job(namespace="team-a", conditions=SUCCEEDED),
        job(namespace="team-b", conditions=SUCCEEDED),
    )
    cluster = cluster_with(inside, crash_looping_workers(inside, 1))
    cluster.observe("add", parse_job(outside))
    for raw in crash_looping_workers(outside, 1):
        cluster.observe("add", parse_pod(raw))
    handle(cluster, ping(at(900)), namespaces="team-a")
    assert sorted(cluster.pods) == [("team-b", "pytest-worker-0")]


def test_reference_mode_reads_the_object():
    j = job(conditions=SUCCEEDED)
    cluster = cluster_with(j, crash_looping_workers(j))
    outcome = handle(cluster, event("update", j, at(40), mode="ref"))
    assert len([a for a in outcome.applied if a.result == "deleted"]) == 3


@pytest.mark.parametrize("verb", ["add", "update"])
def test_reference_mode_pod_that_no_longer_exists_is_ignored(verb):
    j = job(conditions=SUCCEEDED)
    outcome = handle(cluster_with(j, []), event(verb, pod(j, "Worker", 0), at(40), mode="ref"))
    assert outcome.applied == [] and "no longer exists" in outcome.note
