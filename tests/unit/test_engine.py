"""The decision engine, rule by rule (table-driven, named cases), plus its safety gates."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from podsweeper.config import Settings
from podsweeper.decisions import Action, Rule
from podsweeper.engine import decide_job, decide_pods, decide_stuck
from podsweeper.model import Node, NodeReady
from podsweeper.triage import in_scope
from podsweeper.triggers import Ignored
from tests.fixtures.builders import at, job, pod
from tests.fixtures.builders import container_status as cs
from tests.fixtures.mpi import mpijob
from tests.fixtures.parse import parse_job, parse_pod


def decide_new_job(j, settings):
    """The new-job warnings decided on a job's first pass."""
    return [d for d in decide_job(j, at(0), settings, new=True) if d.rule is Rule.NO_BACKOFF_LIMIT]


def failed_mpijob_running(j, now, settings):
    return next((d for d in decide_job(j, now, settings) if d.rule is Rule.FAILED_MPIJOB_RUNNING), None)


def stuck_terminating(p, node, j, now, settings):
    return next(iter(decide_stuck(p, node, j, now, settings)), None)


NOW = at(600)
RUNNING = [("Created", at(0)), ("Running", at(2))]
SUCCEEDED = RUNNING + [("Succeeded", at(30))]
FAILED = RUNNING + [("Failed", at(30))]


def settings(**kw) -> Settings:
    return Settings(**kw)


def decide(job_raw, pods_raw, now=NOW, job_gone=False, **kw):
    j = parse_job(job_raw)
    pods = [parse_pod(p) for p in pods_raw]
    return decide_pods(j.ref, None if job_gone else j, pods, now, settings(**kw))


def looping(j, restarts, index=0):
    return pod(
        j,
        "Worker",
        index,
        phase="Running",
        containers=[cs(state="waiting", reason="CrashLoopBackOff", restarts=restarts, last_exit=1)],
    )


@pytest.mark.parametrize(
    "name, conditions, policy, phase, expected",
    [
        ("Succeeded, None, Running pod", SUCCEEDED, None, "Running", Rule.FINISHED_JOB_ACTIVE_POD),
        ("Succeeded, None, Pending pod", SUCCEEDED, None, "Pending", Rule.FINISHED_JOB_ACTIVE_POD),
        ("Failed, Running policy, Running pod", FAILED, "Running", "Running", Rule.FINISHED_JOB_ACTIVE_POD),
        ("Succeeded, All, Running pod", SUCCEEDED, "All", "Running", Rule.FINISHED_JOB_ACTIVE_POD),
        ("Succeeded, None, Succeeded pod is kept", SUCCEEDED, None, "Succeeded", None),
        ("Failed, None, Failed pod is kept (logs)", FAILED, None, "Failed", None),
        ("Failed, Running, Failed pod is kept", FAILED, "Running", "Failed", None),
        ("Succeeded, All, Succeeded pod", SUCCEEDED, "All", "Succeeded", Rule.CLEAN_POD_POLICY_ALL),
        ("Failed, All, Failed pod", FAILED, "All", "Failed", Rule.CLEAN_POD_POLICY_ALL),
        ("Failed, All, Unknown pod", FAILED, "All", "Unknown", Rule.CLEAN_POD_POLICY_ALL),
        ("running job, Running pod is kept", RUNNING, None, "Running", None),
        ("running job, All, Failed pod is kept", RUNNING, "All", "Failed", None),
    ],
)
def test_finished_job_rules_table(name, conditions, policy, phase, expected):
    j = job(clean_pod_policy=policy, conditions=conditions)
    decisions = decide(j, [pod(j, "Worker", 0, phase=phase)])
    if expected is None:
        assert decisions == [], name
    else:
        assert [(d.rule, d.action) for d in decisions] == [(expected, Action.DELETE)], name


def test_finished_job_active_pod_deletes_crash_looping_workers_of_the_seed():
    j = job(conditions=SUCCEEDED)
    pods = [pod(j, "Master", 0, phase="Succeeded", containers=[cs(state="terminated", exit_code=0)])]
    pods += [looping(j, 4, i) for i in range(3)]
    decisions = decide(j, pods)
    assert sorted(d.name for d in decisions) == ["pytest-worker-0", "pytest-worker-1", "pytest-worker-2"]
    assert all(d.rule is Rule.FINISHED_JOB_ACTIVE_POD for d in decisions)
    assert decisions[0].evidence[0].exit_code == 1 and decisions[0].evidence[0].restart_count == 4


def test_finished_job_active_pod_can_be_turned_off():
    j = job(conditions=SUCCEEDED)
    assert decide(j, [pod(j, "Worker", 0, phase="Running")], sweep_active_pods=False) == []


def test_clean_pod_policy_from_mpijob_deprecated_top_level_field():
    j = job("MPIJob", "mpi", replicas={"Launcher": 1, "Worker": 1}, conditions=SUCCEEDED)
    j["spec"]["cleanPodPolicy"] = "All"
    assert [d.rule for d in decide(j, [pod(j, "Worker", 0, phase="Failed")])] == [Rule.CLEAN_POD_POLICY_ALL]
    j["spec"]["runPolicy"]["cleanPodPolicy"] = "None"  # runPolicy wins when both are set
    assert decide(j, [pod(j, "Worker", 0, phase="Failed")]) == []


def test_clean_pod_policy_top_level_ignored_for_other_kinds():
    j = job("TFJob", "tf", conditions=SUCCEEDED)
    j["spec"]["cleanPodPolicy"] = "All"
    assert decide(j, [pod(j, "Worker", 0, phase="Failed")]) == []


@pytest.mark.parametrize(
    "name, age, grace, deleted",
    [
        ("old pod, default grace", 120, 30, True),
        ("pod exactly at grace", 30, 30, True),
        ("young pod waits", 10, 30, False),
        ("zero grace", 0, 0, True),
    ],
)
def test_orphan_table(name, age, grace, deleted):
    j = job(conditions=RUNNING)
    p = pod(j, "Worker", 0, phase="Running", created=NOW - timedelta(seconds=age))
    decisions = decide(j, [p], job_gone=True, orphan_grace_seconds=grace)
    assert [d.rule for d in decisions] == ([Rule.ORPHAN] if deleted else []), name


def test_orphan_when_job_recreated_with_another_uid():
    old = job(job_uid="old-uid", conditions=RUNNING)
    new = parse_job(job(job_uid="new-uid", conditions=RUNNING))
    p = parse_pod(pod(old, "Worker", 0, phase="Running"))
    decisions = decide_pods(new.ref, new, [p], NOW, settings())
    assert [(d.rule, d.name) for d in decisions] == [(Rule.ORPHAN, "pytest-worker-0")]


def test_orphan_kind_from_operator_label_when_no_owner_reference():
    j = job(conditions=RUNNING)
    p = parse_pod(pod(j, "Worker", 0, owner=False))
    assert p.job is not None and p.job.kind.kind == "PyTorchJob"
    assert [d.rule for d in decide_pods(p.job, None, [p], NOW, settings())] == [Rule.ORPHAN]


def test_pod_whose_kind_cannot_be_told_is_not_an_orphan_candidate():
    j = job(conditions=RUNNING)
    raw = pod(j, "Worker", 0, owner=False)
    del raw["metadata"]["labels"]["training.kubeflow.org/operator-name"]
    assert parse_pod(raw).job is None


def test_legacy_labels_name_the_job():
    j = job(conditions=RUNNING)
    raw = pod(j, "Worker", 0, owner=False)
    raw["metadata"]["labels"] = {
        "group-name": "kubeflow.org",
        "job-name": "pytest",
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
    }
    assert parse_pod(raw).job.name == "pytest"


@pytest.mark.parametrize(
    "name, restarts, backoff, deadline, finished, action, expected",
    [
        ("5 restarts, no limits: warn", 5, None, None, False, "warn", Action.WARN),
        ("5 restarts, delete action", 5, None, None, False, "delete", Action.DELETE),
        ("4 restarts is not yet a loop", 4, None, None, False, "warn", None),
        ("backoffLimit set: operator will fail it", 9, 3, None, False, "warn", None),
        ("activeDeadlineSeconds set", 9, None, 600, False, "warn", None),
    ],
)
def test_crash_loop_table(name, restarts, backoff, deadline, finished, action, expected):
    j = job(backoff_limit=backoff, active_deadline=deadline, conditions=SUCCEEDED if finished else RUNNING)
    decisions = decide(j, [looping(j, restarts)], crashloop_action=action)
    got = [(d.rule, d.action) for d in decisions]
    assert got == ([] if expected is None else [(Rule.CRASH_LOOP, expected)]), name


def test_crash_loop_threshold_is_configurable():
    j = job(conditions=RUNNING)
    assert [d.rule for d in decide(j, [looping(j, 2)], crashloop_restarts=2)] == [Rule.CRASH_LOOP]


@pytest.mark.parametrize(
    "name, kind, restart_policy, backoff, warns",
    [
        ("PyTorchJob OnFailure, no limit", "PyTorchJob", "OnFailure", None, True),
        ("PyTorchJob default policy is OnFailure", "PyTorchJob", None, None, True),
        ("PaddleJob default policy is OnFailure", "PaddleJob", None, None, True),
        ("TFJob default policy is Never", "TFJob", None, None, False),
        ("Always, no limit", "TFJob", "Always", None, True),
        ("ExitCode, no limit", "JAXJob", "ExitCode", None, True),
        ("Never, no limit", "XGBoostJob", "Never", None, False),
        ("OnFailure with backoffLimit 0", "PyTorchJob", "OnFailure", 0, False),
    ],
)
def test_no_backoff_limit_table(name, kind, restart_policy, backoff, warns):
    j = parse_job(job(kind, "j", restart_policy=restart_policy, backoff_limit=backoff))
    decisions = decide_new_job(j, settings())
    assert [(d.rule, d.action, d.kind, d.name) for d in decisions] == (
        [(Rule.NO_BACKOFF_LIMIT, Action.WARN, kind, "j")] if warns else []
    ), name


# -- safety ----------------------------------------------------------------------------


def test_opt_out_on_job_reports_skip_and_deletes_nothing():
    j = job(conditions=SUCCEEDED, annotations={"podsweeper.dev/skip": "true"})
    decisions = decide(j, [pod(j, "Worker", 0, phase="Running")])
    assert [(d.rule, d.action) for d in decisions] == [(Rule.FINISHED_JOB_ACTIVE_POD, Action.SKIP)]
    assert "opted out by job" in decisions[0].reason


def test_opt_out_on_pod_reports_skip():
    j = job(conditions=SUCCEEDED)
    skipped = pod(j, "Worker", 0, phase="Running", annotations={"podsweeper.dev/skip": "true"})
    decisions = decide(j, [skipped, pod(j, "Worker", 1, phase="Running")])
    assert {(d.name, d.action) for d in decisions} == {
        ("pytest-worker-0", Action.SKIP),
        ("pytest-worker-1", Action.DELETE),
    }


def test_opt_out_on_job_skips_no_backoff_warning():
    j = parse_job(job(annotations={"podsweeper.dev/skip": "true"}))
    assert [d.action for d in decide_new_job(j, settings())] == [Action.SKIP]


def test_opt_out_value_other_than_true_does_not_opt_out():
    j = job(conditions=SUCCEEDED, annotations={"podsweeper.dev/skip": "false"})
    assert [d.action for d in decide(j, [pod(j, "Worker", 0, phase="Running")])] == [Action.DELETE]


def test_terminating_pods_are_left_alone():
    j = job(conditions=SUCCEEDED)
    assert decide(j, [pod(j, "Worker", 0, phase="Running", deleting_at=at(500))]) == []


def test_pod_owned_by_another_controller_is_never_touched_even_with_training_labels():
    j = job(conditions=SUCCEEDED)
    raw = pod(j, "Worker", 0, phase="Running")
    raw["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": True}
    ]
    assert decide(j, [raw]) == []
    assert decide(j, [raw], job_gone=True) == []


def test_pod_of_another_job_in_the_list_is_ignored():
    j = job(conditions=SUCCEEDED)
    other = job(name="other", conditions=RUNNING)
    assert decide(j, [pod(other, "Worker", 0, phase="Running")]) == []


@pytest.mark.parametrize(
    "name, kw",
    [
        ("excluded by default", {}),
        ("not in the allowed list", {"namespaces": "team-a,team-b"}),
    ],
)
def test_namespaces_outside_scope_are_never_acted_in(name, kw):
    """The gate (triage.in_scope) turns them away; the engine decides nothing for any that
    slip past it, with a plain check that `python -O` keeps (an assert would be stripped)."""
    outside = "kube-system" if not kw else "team-c"
    j = job(namespace=outside, conditions=SUCCEEDED)
    assert isinstance(in_scope(parse_job(j).namespace, settings(**kw)), Ignored), name
    assert decide(j, [pod(j, "Worker", 0, phase="Running")], **kw) == []
    assert decide_new_job(parse_job(j), settings(**kw)) == []
    # rule stuck-terminating and rule failed-mpijob-running: the force delete and the suspend
    lost = Node("las1", NodeReady.UNKNOWN, at(0))
    stuck = parse_pod(pod(j, "Worker", 0, phase="Running", deleting_at=at(100)))
    assert (
        stuck_terminating(stuck, lost, parse_job(j), at(1000), settings(stuck_terminating_seconds=60, **kw))
        is None
    )
    failed = parse_job(mpijob(ns=outside, conditions=(("Running", at(1)), ("Failed", at(30)))))
    assert failed.failed_unsettled_at is not None
    assert failed_mpijob_running(failed, at(1000), settings(**kw)) is None


def test_a_pod_outside_the_namespaces_is_never_decided_whatever_its_job_says():
    """Each pod is checked too: a pod whose job ref names an allowed namespace is still its own."""
    j = job(namespace="team-a", conditions=SUCCEEDED)
    inside = parse_pod(pod(j, "Worker", 0, phase="Running"))
    slipped = dataclasses.replace(inside, namespace="kube-system")
    ref = parse_job(j).ref
    assert len(decide_pods(ref, parse_job(j), [inside], NOW, settings())) == 1
    assert decide_pods(ref, parse_job(j), [slipped], NOW, settings()) == []
    lost = Node("las1", NodeReady.UNKNOWN, at(0))
    stuck = parse_pod(pod(j, "Worker", 0, phase="Running", deleting_at=at(100)))
    limit = settings(stuck_terminating_seconds=60)
    assert stuck_terminating(stuck, lost, parse_job(j), at(1000), limit) is not None
    assert (
        stuck_terminating(dataclasses.replace(stuck, namespace="kube-system"), lost, None, at(1000), limit)
        is None
    )


def test_the_same_cases_inside_the_namespaces_are_decided():
    """The refusals above are the gate's, not the cases': allowed, each one decides."""
    j = job(namespace="team-a", conditions=SUCCEEDED)
    assert len(decide(j, [pod(j, "Worker", 0, phase="Running")])) == 1
    assert len(decide_new_job(parse_job(j), settings())) == 1
    lost = Node("las1", NodeReady.UNKNOWN, at(0))
    stuck = parse_pod(pod(j, "Worker", 0, phase="Running", deleting_at=at(100)))
    assert stuck_terminating(stuck, lost, parse_job(j), at(1000), settings(stuck_terminating_seconds=60))
    failed = parse_job(mpijob(conditions=(("Running", at(1)), ("Failed", at(30)))))
    assert failed_mpijob_running(failed, at(1000), settings()) is not None


def test_allowed_namespace_list_admits_its_namespaces():
    j = job(namespace="team-a", conditions=SUCCEEDED)
    assert in_scope("team-a", settings(namespaces="team-a")) is None
    assert len(decide(j, [pod(j, "Worker", 0, phase="Running")], namespaces="team-a")) == 1


def test_suspended_job_is_left_to_the_operator():
    j = job(conditions=RUNNING + [("Suspended", at(10))])
    assert decide(j, [looping(j, 9), pod(j, "Worker", 1, phase="Pending")]) == []


def test_unknown_clean_pod_policy_reads_as_none():
    j = job(clean_pod_policy="Everything", conditions=SUCCEEDED)
    assert decide(j, [pod(j, "Worker", 0, phase="Failed")]) == []


def test_decision_names_the_pod_and_its_job():
    j = job(conditions=SUCCEEDED)
    p = pod(j, "Worker", 0, phase="Running")
    (d,) = decide(j, [p])
    assert (d.kind, d.namespace, d.name, d.uid) == ("Pod", "default", "pytest-worker-0", p["metadata"]["uid"])
    assert d.job.name == "pytest" and d.job.uid == j["metadata"]["uid"]


@pytest.mark.parametrize(
    "name, policy, phase, seconds_after_finish, expected",
    [
        ("All, Running pod, operator still has time", "All", "Running", 10, None),
        ("All, Failed pod, operator still has time", "All", "Failed", 29, None),
        ("All, Running pod, grace over: backstop", "All", "Running", 31, Rule.FINISHED_JOB_ACTIVE_POD),
        ("All, Succeeded pod, grace over: backstop", "All", "Succeeded", 31, Rule.CLEAN_POD_POLICY_ALL),
        ("Running, Running pod, operator still has time", "Running", "Running", 10, None),
        ("Running, Pending pod, grace over", "Running", "Pending", 45, Rule.FINISHED_JOB_ACTIVE_POD),
        (
            "None, Running pod: nothing is coming, act at once",
            None,
            "Running",
            0,
            Rule.FINISHED_JOB_ACTIVE_POD,
        ),
    ],
)
def test_operator_grace_leaves_the_operator_its_own_cleanup(
    name, policy, phase, seconds_after_finish, expected
):
    """Under Running/All the operator deletes these pods itself: racing it leaks its Services."""
    j = job(clean_pod_policy=policy, conditions=SUCCEEDED)
    decisions = decide(j, [pod(j, "Worker", 0, phase=phase)], now=at(30 + seconds_after_finish))
    assert [d.rule for d in decisions] == ([expected] if expected else []), name


def test_operator_grace_is_configurable_and_zero_turns_it_off():
    j = job(clean_pod_policy="All", conditions=SUCCEEDED)
    p = pod(j, "Worker", 0, phase="Running")
    assert decide(j, [p], now=at(40), operator_grace_seconds=5) != []
    assert decide(j, [p], now=at(30), operator_grace_seconds=0) != []
    assert decide(j, [p], now=at(40), operator_grace_seconds=60) == []


def test_a_finish_without_a_transition_time_cannot_be_waited_for():
    j = job(clean_pod_policy="All", conditions=SUCCEEDED)
    for condition in j["status"]["conditions"]:
        condition.pop("lastTransitionTime", None)
        condition.pop("lastUpdateTime", None)
    assert [d.rule for d in decide(j, [pod(j, "Worker", 0, phase="Running")], now=at(31))] == [
        Rule.FINISHED_JOB_ACTIVE_POD
    ]
