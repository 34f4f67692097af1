"""The replay contract: seed experiments, --json fields, malformed lines -> exit 2 naming file:line,
late older events (resourceVersion) ignored."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from podsweeper.cli import main
from podsweeper.config import Settings
from podsweeper.replay import replay
from tests.fixtures import scenarios, trainer
from tests.fixtures.builders import at, event, job, pod

FIXTURES = Path(scenarios.__file__).parent
SEED_1 = str(FIXTURES / "seed-experiment-1.jsonl")
SEED_2 = str(FIXTURES / "seed-experiment-2.jsonl")


def test_fixture_files_are_what_the_generator_writes(tmp_path):
    for written in scenarios.write(tmp_path):
        assert written.read_text() == (FIXTURES / written.name).read_text(), written.name


def deletes(run):
    return sorted(a.decision.name for s in run.steps for a in s.outcome.applied if a.result == "deleted")


def test_seed_experiment_2_deletes_the_three_workers_and_keeps_the_master():
    run = replay([SEED_2], Settings(dry_run=False))
    assert deletes(run) == ["pytest-worker-0", "pytest-worker-1", "pytest-worker-2"]
    assert sorted(run.cluster.pods) == [("default", "pytest-master-0")]
    later = [s for s in run.steps if s.observed]
    assert later and all("already deleted by podsweeper" in s.observed for s in later)


def test_seed_experiment_1_ends_with_nothing_left_to_delete():
    run = replay([SEED_1], Settings(dry_run=False))
    assert deletes(run) == [] and run.cluster.pods == {}


@pytest.mark.parametrize(
    "name, expected",
    [
        ("rule-finished-job-active-pod", {("finished-job-active-pod", "delete"): 2}),
        ("rule-clean-pod-policy-all", {("clean-pod-policy-all", "delete"): 3}),
        ("rule-orphan", {("orphan", "delete"): 3}),
        # two warnings as the restarts grow, and the final sweep's (already-warned) one
        ("rule-crash-loop", {("crash-loop", "warn"): 3, ("no-backoff-limit", "warn"): 1}),
        ("rule-no-backoff-limit", {("no-backoff-limit", "warn"): 1}),
    ],
)
def test_one_stream_per_rule(name, expected):
    run = replay([str(FIXTURES / f"{name}.jsonl")], Settings(dry_run=False))
    counts: dict = {}
    for step in run.steps:
        for a in step.outcome.applied:
            key = (a.decision.rule.value, a.decision.action.value)
            counts[key] = counts.get(key, 0) + 1
    assert counts == expected


def test_json_output_has_the_contract_fields(capsys):
    assert main(["replay", SEED_2, "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    deleted = [line for line in lines if line["action"] == "delete"]
    assert len(deleted) == 3
    for line in lines:
        assert {"event_id", "rule", "action", "kind", "namespace", "name", "uid", "reason"} <= line.keys()
    assert {line["name"] for line in deleted} == {f"pytest-worker-{i}" for i in range(3)}


def test_human_output_says_what_and_why(capsys):
    assert main(["replay", SEED_2]) == 0
    out = capsys.readouterr().out
    assert "DELETE Pod default/pytest-worker-2" in out and "[finished-job-active-pod]" in out
    assert "pods left in the simulated cluster: default/pytest-master-0" in out


@pytest.mark.parametrize("env, result", [(None, "deleted"), ("false", "deleted"), ("true", "dry-run")])
def test_the_cli_replay_shows_a_live_function_unless_the_environment_sets_dry_run(
    monkeypatch, capsys, env, result
):
    """A replay touches nothing real: unset, PODSWEEPER_DRY_RUN is live there (the code's
    default is a dry run); set, it is what the replay shows."""
    monkeypatch.delenv("PODSWEEPER_DRY_RUN", raising=False)
    if env is not None:
        monkeypatch.setenv("PODSWEEPER_DRY_RUN", env)
    assert main(["replay", SEED_2, "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    deletes_of_workers = {line["name"]: line["result"] for line in lines if line["action"] == "delete"}
    assert deletes_of_workers == {f"pytest-worker-{i}": result for i in range(3)}


def test_dry_run_in_replay_reports_but_keeps(monkeypatch):
    monkeypatch.setenv("PODSWEEPER_DRY_RUN", "true")
    run = replay([SEED_2], Settings())
    assert deletes(run) == [] and len(run.cluster.pods) == 4


@pytest.mark.parametrize(
    "bad_line, reason",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "not a JSON object"),
        (
            json.dumps(
                {
                    "specversion": "1.0",
                    "id": "x",
                    "source": "s",
                    "type": "other",
                    "time": "2026-01-01T00:00:00Z",
                }
            ),
            "unknown CloudEvent type",
        ),
        (json.dumps({k: v for k, v in event("add", job(), at(0)).items() if k != "time"}), "no 'time'"),
    ],
)
def test_malformed_line_stops_with_exit_2_naming_file_and_line(tmp_path, bad_line, reason):
    good = json.dumps(event("add", job(), at(0)))
    path = tmp_path / "events.jsonl"
    path.write_text(f"{good}\n\n{good}\n{bad_line}\n{good}\n")
    result = subprocess.run(
        [sys.executable, "-m", "podsweeper", "replay", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert f"{path}:4:" in result.stderr and reason in result.stderr


def test_missing_file_is_a_clear_error(tmp_path, capsys):
    assert main(["replay", str(tmp_path / "nope.jsonl")]) == 2
    assert "nope.jsonl" in capsys.readouterr().err


def test_out_of_order_streams_reach_the_live_functions_deletes_through_the_final_sweep():
    """The job's Succeeded arrives before any pod event: only the final sweep finds the
    workers, and it deletes what the in-order replay (and the live function) deletes."""
    in_order = deletes(replay([SEED_2], Settings(dry_run=False)))
    out_of_order = str(FIXTURES / "seed-experiment-2-out-of-order.jsonl")
    run = replay([out_of_order], Settings(dry_run=False))
    assert deletes(run) == in_order == ["pytest-worker-0", "pytest-worker-1", "pytest-worker-2"]
    final = run.steps[-1]
    assert final.final and final.path == "(final sweep)" and final.time == max(s.time for s in run.steps)
    assert sorted(a.decision.name for a in final.outcome.applied if a.result == "deleted") == in_order
    assert deletes(replay([out_of_order], Settings(dry_run=False), final_sweep=False)) == []


def test_no_final_sweep_on_the_command_line(capsys):
    out_of_order = str(FIXTURES / "seed-experiment-2-out-of-order.jsonl")
    assert main(["replay", out_of_order, "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {line["file"] for line in lines if line["action"] == "delete"} == {"(final sweep)"}
    assert main(["replay", out_of_order, "--json", "--no-final-sweep"]) == 0
    assert not [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"delete"' in line]


# -- late, older events: resourceVersion ----------------------------------------------------


def versioned(obj: dict, version: str) -> dict:
    obj = copy.deepcopy(obj)
    obj["metadata"]["resourceVersion"] = version
    return obj


def stream(tmp_path, *events) -> str:
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return str(path)


def test_a_stale_running_update_does_not_roll_a_succeeded_job_back(tmp_path, capsys):
    """Succeeded at rv 20, then Running at rv 10 (a retry delivered late): the workers seen
    afterwards are still a finished job's, as the live function (which re-reads) decides."""
    running = job(conditions=[("Created", at(0)), ("Running", at(1))])
    succeeded = job(conditions=[("Created", at(0)), ("Running", at(1)), ("Succeeded", at(60))])
    path = stream(
        tmp_path,
        event("add", versioned(running, "5"), at(0)),
        event("update", versioned(succeeded, "20"), at(60)),
        event("update", versioned(running, "10"), at(61)),
        *(
            event("add", versioned(pod(running, "Worker", i, phase="Running"), "15"), at(62))
            for i in range(2)
        ),
    )
    run = replay([path], Settings(dry_run=False))  # the final sweep decides the workers (no pod event does)
    assert deletes(run) == ["pytest-worker-0", "pytest-worker-1"]
    assert run.cluster.jobs[("PyTorchJob", "default", "pytest")].finished == "Succeeded"
    stale = run.steps[2]
    assert stale.observed and "older than resourceVersion 20" in stale.observed
    assert stale.outcome.applied == []
    assert main(["replay", path]) == 0
    assert (
        "ignored: PyTorchJob default/pytest update at resourceVersion 10 is older" in capsys.readouterr().out
    )
    assert main(["replay", path, "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(line["name"] for line in lines if line["result"] == "deleted") == deletes(run)


def test_a_stale_update_after_a_pods_delete_does_not_bring_it_back(tmp_path):
    """Deleted at rv 30, then an update at rv 25 arriving late: the pod stays gone; a pod
    re-created under the name later (another uid, rv 40) is applied, and a late change of the
    earlier pod (rv 25 again) does not replace it: versions grow across incarnations."""
    running = job(conditions=[("Created", at(0)), ("Running", at(1))])
    worker = pod(running, "Worker", 0, phase="Running")
    again = pod(running, "Worker", 0, phase="Pending", pod_uid="recreated")
    path = stream(
        tmp_path,
        event("add", versioned(running, "5"), at(0)),
        event("add", versioned(worker, "10"), at(1)),
        event("delete", versioned(worker, "30"), at(2)),
        event("update", versioned(worker, "25"), at(3)),
        event("update", versioned(worker, "30"), at(4)),
    )
    run = replay([path], Settings(dry_run=False))
    assert [bool(s.observed) for s in run.steps[:5]] == [False, False, False, True, True]
    assert "older than its delete (resourceVersion 30)" in run.steps[3].observed
    assert run.cluster.pods == {}
    with open(path, "a") as out:
        out.write(json.dumps(event("add", versioned(again, "40"), at(5))) + "\n")
        out.write(json.dumps(event("update", versioned(worker, "25"), at(6))) + "\n")
    pods = replay([path], Settings(dry_run=False)).cluster.pods
    assert [(key, p.uid) for key, p in pods.items()] == [(("default", "pytest-worker-0"), "recreated")]


def test_a_stale_jobset_update_does_not_replace_a_newer_one(tmp_path):
    tj = trainer.trainjob()
    newer = versioned(trainer.jobset(tj, conditions=[("Completed", at(60))]), "20")
    older = versioned(trainer.jobset(tj), "10")
    path = stream(
        tmp_path,
        event("add", tj, at(0)),
        event("update", newer, at(60)),
        event("update", older, at(61)),
    )
    run = replay([path], Settings(dry_run=False))
    assert run.steps[2].observed and "JobSet team-a/tj update at resourceVersion 10" in run.steps[2].observed
    assert run.cluster.intermediates[("JobSet", "team-a", "tj")].resource_version == "20"


@pytest.mark.parametrize("versions", [("b", "a"), ("20", "a"), ("", "10")])
def test_versions_that_are_not_both_integers_keep_stream_order(tmp_path, versions):
    """resourceVersions are opaque to Kubernetes clients: only two integers are compared."""
    running = job(conditions=[("Created", at(0)), ("Running", at(1))])
    worker = pod(running, "Worker", 0, phase="Running")
    first, second = versions
    path = stream(
        tmp_path,
        event("add", running, at(0)),
        event("delete", versioned(worker, first), at(1)),
        event("update", versioned(worker, second), at(2)),
    )
    run = replay([path], Settings(dry_run=False))
    assert not run.steps[2].observed
    assert sorted(run.cluster.pods) == [("default", "pytest-worker-0")]
