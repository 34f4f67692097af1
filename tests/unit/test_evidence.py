"""Evidence that outlives the pod: which runs are kept, the bound, and what it costs."""

from __future__ import annotations

import pytest

from podsweeper.cluster.simulated import SimulatedCluster
from podsweeper.config import Settings
from podsweeper.evidence import RECENT_PER_CONTAINER, TERMINATED, decode, failures_of, merge, store_name
from podsweeper.intake import parse_event
from podsweeper.objects import parse_job, parse_pod
from podsweeper.pipeline import Pipeline
from tests.fixtures.builders import SECRET, at, event, job, pod, split
from tests.fixtures.builders import container_status as cs

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

    def records(self, j):
        found = self.evidence.get((j["metadata"]["namespace"], store_name(j["metadata"]["name"])))
        return decode(found[0]) if found else []


def setup(**kw):
    j = job(conditions=RUNNING)
    cluster = Counting()
    cluster.observe("add", parse_job(j))
    return j, cluster, Pipeline(cluster, Settings(crashloop_restarts=50, **kw))


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


def test_the_pods_podsweeper_deletes_leave_their_evidence_first():
    j = job(conditions=SUCCEEDED)
    cluster = Counting()
    cluster.observe("add", parse_job(j))
    for i in range(3):
        cluster.observe("add", parse_pod(looping(j, 4, index=i)))
    pipeline = Pipeline(cluster, Settings())
    pipeline.handle(parse_event(*split(event("update", j, at(40)))), at(40))
    kept = cluster.records(j)
    assert sorted(r["pod"] for r in kept) == ["pytest-worker-0", "pytest-worker-1", "pytest-worker-2"]
    assert {r["source"] for r in kept} == {"deleted by podsweeper"} and all(r["logs"] for r in kept)
    assert not cluster.pods


def test_merge_is_pure_and_says_when_nothing_is_new():
    j = job(conditions=RUNNING)
    failures = failures_of(parse_pod(looping(j, 3)), 1, TERMINATED)
    first = merge([], failures)
    assert first is not None and merge(first, failures) is None
