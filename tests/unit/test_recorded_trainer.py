"""Trainer v2 scenarios as recorded from the real controllers (tests/fixtures/recorded/trainer-*),
replayed.

`python -m tests.fixtures.recorded.record_trainer` wrote them with `podsweeper record` (the adapter's read-only
identity, Resource mode) while Trainer v2.3.0, JobSet v0.12.0, the Job controller, the garbage
collector and kwok ran the TrainJobs; no podsweeper ran. So the objects are what those
controllers write: a JobSet with no labels whose only tie to the TrainJob is its ownerReference,
Jobs carrying Trainer's mark, pods carrying only JobSet's and the Job controller's labels, the
Failed condition dropped when Trainer makes a new JobSet.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from podsweeper.cli import main
from podsweeper.config import Settings
from podsweeper.decisions import Action, Rule
from podsweeper.evidence import decode
from podsweeper.replay import replay

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "recorded"
FILES = sorted(RECORDED.glob("trainer-*.jsonl"))


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _acted(path: Path, **settings):
    """(event index or None for the final sweep, the event's kind/verb, decision) per non-skip."""
    run = replay([path], Settings(**{"dry_run": False, **settings}))
    acted = []
    for step in run.steps:
        for item in step.outcome.applied:
            if item.decision.action is not Action.SKIP:
                what = None if step.final else step.intake.attributes.type.rsplit(".", 1)[-1]
                acted.append((what, step.line, item.decision, item.result))
    return run, acted


def test_the_four_recordings_are_there_and_look_like_what_the_adapter_sends():
    assert [p.stem for p in FILES] == [
        "trainer-complete",
        "trainer-failed-restarted",
        "trainer-orphan-job",
        "trainer-orphan-jobset",
    ]
    for path in FILES:
        events = _events(path)
        assert {e["type"].rsplit(".", 1)[0] for e in events} == {"dev.knative.apiserver.resource"}
        assert {e["kind"] for e in events} == {"TrainJob", "JobSet", "Job", "Pod"}, path.name
        for e in events:
            assert e["data"]["metadata"]["uid"] and e["data"]["metadata"].get("managedFields")
        pods = [e["data"] for e in events if e["kind"] == "Pod"]
        # What the real controllers write: JobSet's labels on the pods, never Trainer's mark.
        assert all("jobset.sigs.k8s.io/jobset-uid" in p["metadata"]["labels"] for p in pods)
        assert not any("trainer.kubeflow.org/trainjob-ancestor-step" in p["metadata"]["labels"] for p in pods)


def test_a_trainjob_that_completes_cleanly_gets_nothing():
    run, acted = _acted(RECORDED / "trainer-complete.jsonl")
    assert acted == []
    assert sorted(p.phase for p in run.cluster.pods.values()) == ["Succeeded", "Succeeded"]


def test_a_failed_trainjob_restarted_after_its_jobset_ttl_is_suspended_when_the_new_jobset_shows():
    events = _events(RECORDED / "trainer-failed-restarted.jsonl")
    jobsets = [
        (e["type"].rsplit(".", 1)[-1], e["data"]["metadata"]["uid"]) for e in events if e["kind"] == "JobSet"
    ]
    first, again = jobsets[0][1], jobsets[-1][1]
    assert first != again and ("delete", first) in jobsets and ("add", again) in jobsets
    failed = [
        e for e in events if e["kind"] == "TrainJob" and "Failed" in json.dumps(e["data"].get("status", {}))
    ]
    assert failed, "the recording shows the TrainJob Failed before Trainer dropped the condition"

    run, acted = _acted(RECORDED / "trainer-failed-restarted.jsonl")
    verb, line, decision, result = acted[0]
    assert events[line - 1]["kind"] == "JobSet" and verb == "add"
    assert events[line - 1]["data"]["metadata"]["uid"] == again, "decided when the new JobSet appeared"
    assert (decision.rule, decision.action, decision.kind, decision.name) == (
        Rule.FINISHED_TRAINJOB_RESTARTED,
        Action.SUSPEND,
        "TrainJob",
        "again",
    )
    # The Job controller deleted the failed pods at its backoffLimit; their evidence was kept
    # from the pod events before they went (kubernetes-sigs/jobset#776).
    (records,) = [
        decode(text)
        for (ns, _), (text, _) in run.cluster.evidence.items()
        if ns == "trainer-failed-restarted"
    ]
    assert len({r["pod"] for r in records}) == 2 and {r["exit_code"] for r in records} == {1}
    # Nothing is ever deleted for it: deleting the new JobSet would only get it made again.
    assert all(d.action is Action.SUSPEND for _, _, d, _ in acted)
    assert {d.rule for _, _, d, _ in acted} == {Rule.FINISHED_TRAINJOB_RESTARTED}


def test_dry_run_decides_the_same_and_suspends_nothing():
    run, acted = _acted(RECORDED / "trainer-failed-restarted.jsonl", dry_run=True)
    assert acted and {(d.rule, r.value) for _, _, d, r in acted} == {
        (Rule.FINISHED_TRAINJOB_RESTARTED, "dry-run")
    }
    assert not any(job.suspended for job in run.cluster.jobs.values())


@pytest.mark.parametrize(
    "stem, kind, name",
    [("trainer-orphan-jobset", "JobSet", "lost"), ("trainer-orphan-job", "Job", "clash-node-0")],
)
def test_what_an_orphan_delete_leaves_running_is_deleted_once(stem, kind, name):
    run, acted = _acted(RECORDED / f"{stem}.jsonl")
    assert [(d.rule, d.action, d.kind, d.name, r.value) for _, _, d, r in acted] == [
        (Rule.ORPHAN, Action.DELETE, kind, name, "deleted")
    ]
    assert run.cluster.pods == {}, "its pods went with it (background propagation)"


def test_a_young_orphan_is_not_deleted():
    """The recordings delete at 32 s; with a 60 s grace the orphan is too young for the rule."""
    for stem in ("trainer-orphan-jobset", "trainer-orphan-job"):
        _, acted = _acted(RECORDED / f"{stem}.jsonl", orphan_grace_seconds=60)
        assert acted == [], stem


def test_the_human_timeline_shows_jobsets_and_jobs_with_their_controller(capsys):
    assert main(["replay", str(RECORDED / "trainer-orphan-job.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "JobSet delete trainer-orphan-job/clash (active, controller TrainJob clash)" in out
    assert "Job update trainer-orphan-job/clash-node-0 (active, no controller)" in out
    assert "TrainJob update trainer-orphan-job/clash (active)\n" in out, "a TrainJob has no cleanPodPolicy"
    assert "DELETE Job trainer-orphan-job/clash-node-0 -> deleted  [orphan]" in out
