"""PODSWEEPER_CRASHLOOP_ACTION=suspend: stop a crash loop for good by suspending its job.

Deleting a crash-looping pod of a running job only makes the operator recreate it; setting
spec.runPolicy.suspend makes the operator remove all the job's pods and keep the job.
"""

from __future__ import annotations

import pytest

from podsweeper.cluster.simulated import SimulatedCluster
from podsweeper.config import Settings
from podsweeper.decisions import Action, Result, Rule
from podsweeper.engine import decide_pods
from podsweeper.intake import parse_event
from podsweeper.pipeline import Pipeline
from tests.fixtures.builders import at, event, job, pod, split
from tests.fixtures.builders import container_status as cs
from tests.fixtures.parse import parse_job, parse_pod

RUNNING = [("Created", at(0)), ("Running", at(2))]
SUSPEND = {"crashloop_action": "suspend"}


def looping(j, index, restarts=6):
    return pod(
        j,
        "Worker",
        index,
        phase="Running",
        containers=[cs(state="waiting", reason="CrashLoopBackOff", restarts=restarts, last_exit=1)],
    )


def decide(j, pods, **kw):
    parsed = parse_job(j)
    return decide_pods(parsed.ref, parsed, [parse_pod(p) for p in pods], at(100), Settings(**kw))


@pytest.mark.parametrize(
    "name, labels, run_policy, expected",
    [
        ("plain job", {}, {}, Action.SUSPEND),
        ("Kueue drives suspend itself", {"kueue.x-k8s.io/queue-name": "gpu"}, {}, Action.WARN),
        ("managed by another controller", {}, {"managedBy": "kueue.x-k8s.io/multikueue"}, Action.WARN),
        (
            "managed by the training operator",
            {},
            {"managedBy": "kubeflow.org/training-operator"},
            Action.SUSPEND,
        ),
    ],
)
def test_suspend_only_what_no_other_controller_suspends(name, labels, run_policy, expected):
    j = job(conditions=RUNNING)
    j["metadata"]["labels"] = labels
    j["spec"]["runPolicy"].update(run_policy)
    (d,) = decide(j, [looping(j, 0)], **SUSPEND)
    assert (d.rule, d.action) == (Rule.CRASH_LOOP, expected), name
    if expected is Action.WARN:
        assert "not suspended" in d.reason


def test_below_the_threshold_or_with_a_backoff_limit_nothing_is_suspended():
    j = job(conditions=RUNNING)
    assert decide(j, [looping(j, 0, restarts=2)], **SUSPEND) == []
    bounded = job(conditions=RUNNING, backoff_limit=3)
    assert decide(bounded, [looping(bounded, 0)], **SUSPEND) == []


def pipeline_with(j, pods, **kw):
    cluster = SimulatedCluster()
    cluster.observe("add", parse_job(j))
    for p in pods:
        cluster.observe("add", parse_pod(p))
    return cluster, Pipeline(cluster, Settings(**{"dry_run": False, **kw}))


def test_one_suspend_per_job_whatever_number_of_its_pods_crash_loop():
    j = job(conditions=RUNNING)
    pods = [looping(j, i) for i in range(3)]
    calls = []
    cluster, pipeline = pipeline_with(j, pods, **SUSPEND)
    original = cluster.suspend_job
    cluster.suspend_job = lambda ref: calls.append(ref) or original(ref)
    outcome = pipeline.handle(parse_event(*split(event("update", pods[0], at(100)))), at(100))
    assert [a.result for a in outcome.applied] == [Result.SUSPENDED] * 3 and len(calls) == 1
    assert calls[0].uid == j["metadata"]["uid"]  # the uid just read: a precondition
    (suspended,) = cluster.jobs.values()
    assert suspended.suspended and len(cluster.pods) == 3  # the operator removes the pods, not us
    reasons = [e.record.reason for e in cluster.events.values()]
    assert reasons == ["CrashLoopSuspended"]


def test_dry_run_and_opt_out_suspend_nothing():
    j = job(conditions=RUNNING)
    cluster, pipeline = pipeline_with(j, [looping(j, 0)], dry_run=True, **SUSPEND)
    outcome = pipeline.handle(parse_event(*split(event("update", looping(j, 0), at(100)))), at(100))
    assert [a.result for a in outcome.applied] == [Result.DRY_RUN]
    assert not next(iter(cluster.jobs.values())).suspended and cluster.events == {}

    opted = job(conditions=RUNNING, annotations={"podsweeper.dev/skip": "true"})
    cluster, pipeline = pipeline_with(opted, [looping(opted, 0)], **SUSPEND)
    outcome = pipeline.handle(parse_event(*split(event("update", looping(opted, 0), at(100)))), at(100))
    assert [a.decision.action for a in outcome.applied] == [Action.SKIP]
    assert not next(iter(cluster.jobs.values())).suspended


def test_a_job_recreated_under_the_same_name_is_not_suspended():
    j = job(conditions=RUNNING)
    cluster, _ = pipeline_with(j, [])
    ref = parse_job(j).ref
    cluster.observe("add", parse_job(job(conditions=RUNNING, job_uid="another-uid")))
    assert cluster.suspend_job(ref) is Result.CONFLICT
