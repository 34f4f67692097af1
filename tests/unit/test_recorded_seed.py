"""The seed's experiments as recorded from a real run (tests/fixtures/recorded/), replayed.

No control plane needed: these files were written by `podsweeper record` while
tests/fixtures/recorded/record_seed.py (`python -m tests.fixtures.recorded.record_seed --world real`) ran the experiments
in the real Kubeflow world (tests/support/world: training operator v1.9.4, garbage collector,
scheduler, kwok nodes), so they carry what the operator and the API really write (its
status, replicaStatuses, Services' owners, kwok's pod statuses, managedFields,
resourceVersions) in exactly the adapter's format.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from podsweeper.config import Settings
from podsweeper.replay import replay

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "recorded"
SEED_1 = RECORDED / "seed-experiment-1.jsonl"
SEED_2 = RECORDED / "seed-experiment-2.jsonl"


def _deleted(run) -> list[str]:
    return sorted(a.decision.name for s in run.steps for a in s.outcome.applied if a.result == "deleted")


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("path", [SEED_1, SEED_2], ids=lambda p: p.stem)
def test_recorded_files_look_like_what_the_adapter_sends(path):
    events = _events(path)
    assert events
    for event in events:
        assert set(event) == {
            "specversion",
            "id",
            "source",
            "type",
            "subject",
            "time",
            "datacontenttype",
            "kind",
            "apiversion",
            "name",
            "namespace",
            "data",
        }
        assert event["type"].startswith("dev.knative.apiserver.resource.")
        assert event["data"]["metadata"]["uid"] and event["data"]["metadata"]["resourceVersion"]
        assert event["data"]["metadata"].get("managedFields"), "the API's own metadata is kept"
    assert {e["subject"] for e in events} >= {
        "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/pytest",
        *(f"/apis/v1/namespaces/default/pods/pytest-worker-{i}" for i in range(3)),
        "/apis/v1/namespaces/default/pods/pytest-master-0",
    }


def test_recorded_seed_experiment_2_deletes_the_three_workers_and_keeps_the_master():
    run = replay([str(SEED_2)], Settings(dry_run=False))
    assert _deleted(run) == ["pytest-worker-0", "pytest-worker-1", "pytest-worker-2"]
    assert sorted(run.cluster.pods) == [("default", "pytest-master-0")]
    rules = {a.decision.rule.value for s in run.steps for a in s.outcome.applied if a.result == "deleted"}
    assert rules == {"finished-job-active-pod"}
    # They go on the job's Succeeded event, not later when they crash-loop again.
    succeeded = next(
        i for i, s in enumerate(run.steps) if any(a.result == "deleted" for a in s.outcome.applied)
    )
    event = _events(SEED_2)[succeeded]
    assert event["kind"] == "PyTorchJob"
    assert any(
        c["type"] == "Succeeded" and c["status"] == "True" for c in event["data"]["status"]["conditions"]
    )


def test_recorded_seed_experiment_1_leaves_nothing_to_delete():
    """cleanPodPolicy All: the operator wrote Succeeded and deleted every pod ~10 ms later,
    well inside PODSWEEPER_OPERATOR_GRACE_SECONDS: nothing is left for podsweeper."""
    run = replay([str(SEED_1)], Settings(dry_run=False))
    assert _deleted(run) == []
    assert run.cluster.pods == {}
