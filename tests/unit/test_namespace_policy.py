"""Namespace policy: the annotations a Namespace sets, resolved within the global bounds, read
through the cluster with a bounded cache, and acted on by the pipeline.

The resolution is restated here as properties (hypothesis): whatever the annotations, a
namespace never makes podsweeper bolder than the global configuration allows, and a value not
understood or not allowed leaves the global setting in force and is reported.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podsweeper.cluster.simulated import SimulatedCluster
from podsweeper.config import CrashLoopAction, Settings
from podsweeper.decisions import Result, Rule
from podsweeper.intake import parse_event
from podsweeper.model import Namespace
from podsweeper.namespaces import POLICY_WARNING_REASON, NamespacePolicies
from podsweeper.pipeline import Pipeline
from podsweeper.policy import Knob, Mode, resolve
from podsweeper.replay import replay
from tests.fixtures.builders import at, event, job, namespace, namespace_event, ping, pod, split
from tests.fixtures.builders import container_status as cs
from tests.fixtures.parse import parse_job, parse_pod

MODE, ACTION = "podsweeper.dev/mode", "podsweeper.dev/crashloop-action"
ORPHAN, OPERATOR = "podsweeper.dev/orphan-grace-seconds", "podsweeper.dev/operator-grace-seconds"
SUCCEEDED = [("Created", at(0)), ("Running", at(2)), ("Succeeded", at(30))]
RUNNING = [("Created", at(0)), ("Running", at(2))]


# -- resolution, example by example -------------------------------------------------------------


def test_no_annotations_is_the_global_setting_everywhere():
    policy = resolve(Settings(dry_run=True), "team-a", {})
    assert (policy.mode, policy.crashloop_action, policy.orphan_grace_seconds) == (Mode.DRY_RUN, "warn", 30)
    assert not policy.from_namespace and not policy.problems
    assert policy.applied() == {"mode": {"value": "dry-run", "from": "global"}}


@pytest.mark.parametrize("value", ["off", "dry-run"])
def test_a_namespace_may_always_be_safer(value):
    policy = resolve(Settings(), "team-a", {MODE: value})
    assert policy.mode == value and policy.dry_run and not policy.problems
    assert policy.from_namespace == {Knob.MODE}
    assert policy.applied()["mode"] == {"value": value, "from": "namespace annotation podsweeper.dev/mode"}


def test_live_under_a_global_dry_run_only_where_the_platform_allowed_it():
    refused = resolve(Settings(dry_run=True), "team-a", {MODE: "live"})
    assert refused.mode is Mode.DRY_RUN and refused.dry_run
    assert refused.problems and "PODSWEEPER_NAMESPACE_LIVE_ALLOWED" in refused.problems[0]
    allowed = resolve(Settings(dry_run=True, namespace_live_allowed=True), "team-a", {MODE: "live"})
    assert allowed.mode is Mode.LIVE and not allowed.dry_run and not allowed.problems


def test_crash_loop_action_warn_always_the_bolder_ones_only_when_named():
    base = Settings(crashloop_action=CrashLoopAction.SUSPEND)
    assert resolve(base, "a", {ACTION: "warn"}).crashloop_action is CrashLoopAction.WARN
    assert resolve(base, "a", {ACTION: "suspend"}).crashloop_action is CrashLoopAction.SUSPEND
    refused = resolve(base, "a", {ACTION: "delete"})
    assert (
        refused.crashloop_action is CrashLoopAction.SUSPEND
        and "NAMESPACE_CRASHLOOP_ACTIONS" in refused.problems[0]
    )
    allowed = resolve(Settings(namespace_crashloop_actions="suspend"), "a", {ACTION: "suspend"})
    assert allowed.crashloop_action is CrashLoopAction.SUSPEND and not allowed.problems


def test_graces_longer_up_to_the_maximum_shorter_down_to_the_minimum():
    bounds = Settings(namespace_max_grace_seconds=3600)
    assert resolve(bounds, "a", {ORPHAN: "600"}).orphan_grace_seconds == 600
    too_long = resolve(bounds, "a", {ORPHAN: "3601"})
    assert too_long.orphan_grace_seconds == 30 and "MAX_GRACE" in too_long.problems[0]
    shorter = resolve(bounds, "a", {OPERATOR: "5"})
    assert shorter.operator_grace_seconds == 30 and "MIN_GRACE" in shorter.problems[0]
    floor = Settings(namespace_min_grace_seconds=10)
    assert resolve(floor, "a", {OPERATOR: "10"}).operator_grace_seconds == 10
    assert resolve(floor, "a", {OPERATOR: "9"}).operator_grace_seconds == 30


@pytest.mark.parametrize(
    "key, value",
    [
        (MODE, "LIVE"),
        (MODE, "on"),
        (ACTION, "stop"),
        (ORPHAN, "-5"),
        (ORPHAN, "1e3"),
        (OPERATOR, "９"),
        (ORPHAN, ""),
    ],
)
def test_a_bad_value_is_a_problem_and_the_global_setting_is_used(key, value):
    policy = resolve(Settings(), "team-a", {key: value})
    assert not policy.from_namespace and len(policy.problems) == 1 and key in policy.problems[0]
    assert replace(policy, problems=()) == resolve(Settings(), "team-a", {})


def test_an_unknown_podsweeper_annotation_is_reported_and_others_are_not():
    policy = resolve(
        Settings(dry_run=False),
        "a",
        {"podsweeper.dev/mdoe": "off", "podsweeper.dev/skip": "true", "team": "x"},
    )
    assert policy.mode is Mode.LIVE and len(policy.problems) == 1 and "mdoe" in policy.problems[0]


def test_namespace_policy_off_ignores_every_annotation():
    policy = resolve(Settings(dry_run=False, namespace_policy=False), "a", {MODE: "off", ORPHAN: "bad"})
    assert policy.mode is Mode.LIVE and not policy.problems and not policy.from_namespace


# -- resolution, as properties --------------------------------------------------------------------

MODES = st.sampled_from(["off", "dry-run", "live", "Live", "", "on"])
ACTIONS = st.sampled_from(["warn", "suspend", "delete", "stop"])
GRACES = st.one_of(st.integers(0, 10_000).map(str), st.sampled_from(["-1", "x", "", " 40 "]))


@st.composite
def globals_and_annotations(draw):
    chosen = Settings(
        dry_run=draw(st.booleans()),
        crashloop_action=draw(st.sampled_from(list(CrashLoopAction))),
        orphan_grace_seconds=draw(st.integers(0, 600)),
        operator_grace_seconds=draw(st.integers(0, 600)),
        namespace_live_allowed=draw(st.booleans()),
        namespace_crashloop_actions=",".join(draw(st.sets(st.sampled_from(["warn", "suspend", "delete"])))),
        namespace_min_grace_seconds=draw(st.none() | st.integers(0, 600)),
        namespace_max_grace_seconds=draw(st.integers(0, 5000)),
    )
    annotations = draw(
        st.fixed_dictionaries({}, optional={MODE: MODES, ACTION: ACTIONS, ORPHAN: GRACES, OPERATOR: GRACES})
    )
    return chosen, annotations


@settings(max_examples=300, derandomize=True, database=None)
@given(globals_and_annotations())
def test_a_namespace_is_never_bolder_than_the_global_configuration_allows(drawn):
    chosen, annotations = drawn
    policy = resolve(chosen, "team-a", annotations)
    if chosen.dry_run and not chosen.namespace_live_allowed:
        assert policy.dry_run, "a namespace lifted a global dry-run without the allowance"
    bolder_actions = chosen.namespace_crashloop_action_set | {"warn", chosen.crashloop_action.value}
    assert policy.crashloop_action.value in bolder_actions
    for knob, global_grace in (
        (Knob.ORPHAN_GRACE, chosen.orphan_grace_seconds),
        (Knob.OPERATOR_GRACE, chosen.operator_grace_seconds),
    ):
        grace = int(policy.value(knob))
        if knob in policy.from_namespace:
            floor = min(
                global_grace,
                chosen.namespace_min_grace_seconds
                if chosen.namespace_min_grace_seconds is not None
                else global_grace,
            )
            assert floor <= grace <= chosen.namespace_max_grace_seconds
        else:
            assert grace == global_grace


@settings(max_examples=300, derandomize=True, database=None)
@given(globals_and_annotations())
def test_every_annotation_is_used_or_reported_never_both(drawn):
    chosen, annotations = drawn
    policy = resolve(chosen, "team-a", annotations)
    for key, value in annotations.items():
        knob = Knob(key.removeprefix("podsweeper.dev/"))
        reported = any(p.startswith(key + ":") for p in policy.problems)
        assert (knob in policy.from_namespace) != reported, (key, value, policy)
        if knob in policy.from_namespace:
            assert policy.value(knob) == value.strip()


# -- reading: the cluster, the cache, the Warning on the Namespace -----------------------------


class Counting(SimulatedCluster):
    reads: int = 0

    def get_namespace(self, name):
        self.reads += 1
        return super().get_namespace(name)


def test_policies_are_read_once_per_bound_and_a_bad_value_warns_once():
    cluster = Counting(namespaces={"a": Namespace("a", "uid-a", {MODE: "bogus"})})
    clock = [0.0]
    policies = NamespacePolicies(Settings(dry_run=False, namespace_cache_seconds=30), clock=lambda: clock[0])
    for _ in range(3):
        assert policies.for_namespace(cluster, "a", at(0)).policy.mode is Mode.LIVE
    assert cluster.reads == 1
    clock[0] = 31.0
    policies.for_namespace(cluster, "a", at(31))
    assert cluster.reads == 2
    warnings = [r for r in cluster.events.values() if r.record.reason == POLICY_WARNING_REASON]
    assert len(warnings) == 1 and warnings[0].count == 1, "the same problems re-read must not warn again"
    record = warnings[0].record
    assert record.involved.name == "a" and record.type == "Warning" and "bogus" in record.message
    cluster.namespaces["a"] = Namespace("a", "uid-a", {MODE: "dry-run"})
    clock[0] = 62.0
    assert policies.for_namespace(cluster, "a", at(62)).policy.mode is Mode.DRY_RUN


def test_namespace_policy_off_reads_no_namespace():
    cluster = Counting(namespaces={"a": Namespace("a", "uid-a", {MODE: "off"})})
    policies = NamespacePolicies(Settings(dry_run=False, namespace_policy=False))
    assert policies.for_namespace(cluster, "a", at(0)).policy.mode is Mode.LIVE and cluster.reads == 0


# -- the pipeline: off, dry-run, live, per namespace -----------------------------------------------


def finished_job_cluster(annotations: dict[str, str]) -> tuple[SimulatedCluster, dict]:
    j = job(conditions=SUCCEEDED)
    cluster = Counting(namespaces={"default": Namespace("default", "uid-ns", annotations)})
    cluster.observe("add", parse_job(j))
    for i in range(2):
        looping = cs(state="waiting", reason="CrashLoopBackOff", restarts=4, last_exit=1)
        cluster.observe("add", parse_pod(pod(j, "Worker", i, phase="Running", containers=[looping])))
    return cluster, j


def handle(cluster, raw, **kw):
    return Pipeline(cluster, Settings(**{"dry_run": False, **kw})).handle(parse_event(*split(raw)), at(600))


def test_live_namespace_under_a_global_dry_run_deletes_when_allowed():
    cluster, j = finished_job_cluster({MODE: "live"})
    outcome = handle(cluster, event("update", j, at(40)), dry_run=True, namespace_live_allowed=True)
    assert [a.result for a in outcome.applied] == [Result.DELETED] * 2 and not cluster.pods
    (cleaned,) = [r.record for r in cluster.events.values() if r.record.reason == "PodsCleanedUp"]
    assert "mode live (namespace annotation podsweeper.dev/mode)" in cleaned.message


def test_live_namespace_under_a_global_dry_run_deletes_nothing_without_the_allowance():
    cluster, j = finished_job_cluster({MODE: "live"})
    outcome = handle(cluster, event("update", j, at(40)), dry_run=True)
    assert [a.result for a in outcome.applied] == [Result.DRY_RUN] * 2 and len(cluster.pods) == 2
    assert any(r.record.reason == POLICY_WARNING_REASON for r in cluster.events.values())


def test_off_namespace_gets_no_decision_and_dry_run_namespace_no_delete():
    cluster, j = finished_job_cluster({MODE: "off"})
    outcome = handle(cluster, event("update", j, at(40)))
    assert outcome.applied == [] and "off in namespace default" in outcome.note and len(cluster.pods) == 2
    cluster, j = finished_job_cluster({MODE: "dry-run"})
    outcome = handle(cluster, event("update", j, at(40)))
    assert [a.result for a in outcome.applied] == [Result.DRY_RUN] * 2 and len(cluster.pods) == 2


def test_crash_loop_action_from_the_namespace_and_the_log_line_says_so(capsys):
    from podsweeper.report import setup_logging

    j = job(conditions=RUNNING)
    cluster = SimulatedCluster(namespaces={"default": Namespace("default", "u", {ACTION: "warn"})})
    cluster.observe("add", parse_job(j))
    looping = cs(state="waiting", reason="CrashLoopBackOff", restarts=9, last_exit=1)
    p = pod(j, "Worker", 0, phase="Running", containers=[looping])
    cluster.observe("add", parse_pod(p))
    setup_logging()
    outcome = handle(cluster, event("update", p, at(40)), crashloop_action="suspend")
    assert [(a.decision.rule, a.result) for a in outcome.applied] == [(Rule.CRASH_LOOP, Result.WARNED)]
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    (line,) = [line for line in lines if line.get("rule") == "crash-loop"]
    assert line["settings"]["crashloop-action"] == {
        "value": "warn",
        "from": "namespace annotation podsweeper.dev/crashloop-action",
    }
    assert line["settings"]["mode"] == {"value": "live", "from": "global"}


def test_a_shorter_orphan_grace_from_the_namespace_applies_in_the_sweep():
    j = job(conditions=RUNNING)
    cluster = SimulatedCluster(namespaces={"default": Namespace("default", "u", {ORPHAN: "5"})})
    cluster.observe("add", parse_pod(pod(j, "Worker", 0, phase="Running")))
    cluster.gone_jobs.add(parse_job(j).ref.key)
    young = Settings(dry_run=False, orphan_grace_seconds=10_000, namespace_min_grace_seconds=0)
    outcome = Pipeline(cluster, young).handle(parse_event(*split(ping(at(600)))), at(600))
    assert [(a.decision.rule, a.result) for a in outcome.applied] == [(Rule.ORPHAN, Result.DELETED)]


def test_the_replay_reads_a_namespace_policy_from_namespace_objects_in_its_stream(tmp_path):
    j = job(conditions=SUCCEEDED)
    looping = cs(state="waiting", reason="CrashLoopBackOff", restarts=4, last_exit=1)
    worker = pod(j, "Worker", 0, phase="Running", containers=[looping])
    lines = [
        namespace_event("add", namespace("default", {MODE: "off"}), at(1)),
        event("add", worker, at(2)),
        event("update", j, at(40)),
    ]
    path = tmp_path / "stream.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    run = replay([str(path)], Settings(dry_run=False))
    assert not any(step.outcome.applied for step in run.steps) and run.cluster.pods
    assert replay([str(path)], Settings(dry_run=False, namespace_policy=False)).cluster.pods == {}


def test_a_global_dry_run_holds_whatever_a_decisions_policy_says_without_the_allowance():
    """The second gate (actions.dry_run): a decision stamped with a live policy under a global
    dry-run still changes nothing unless the platform let namespaces lift it."""
    from dataclasses import replace as stamp

    from podsweeper.actions import dry_run
    from podsweeper.decisions import Action, Decision, Target
    from podsweeper.kinds import lookup
    from podsweeper.model import JobRef
    from podsweeper.policy import global_policy

    kind = lookup("kubeflow.org/v1", "PyTorchJob")
    assert kind is not None
    decision = Decision(Rule.ORPHAN, Action.DELETE, Target.POD, "a", "p", "u", "r", JobRef(kind, "a", "j"))
    live = stamp(global_policy(Settings(dry_run=False), "a"), from_namespace=frozenset({Knob.MODE}))
    assert dry_run(stamp(decision, policy=live), Settings(dry_run=True))
    assert not dry_run(stamp(decision, policy=live), Settings(dry_run=True, namespace_live_allowed=True))
    assert dry_run(decision, Settings(dry_run=True)) and not dry_run(decision, Settings(dry_run=False))


def test_no_evidence_is_kept_where_podsweeper_is_off():
    def failed_pod_event(annotations):
        j = job(conditions=RUNNING)
        cluster = SimulatedCluster(namespaces={"default": Namespace("default", "u", annotations)})
        cluster.observe("add", parse_job(j))
        failed = pod(
            j, "Worker", 0, phase="Running", containers=[cs(state="waiting", restarts=1, last_exit=137)]
        )
        cluster.observe("add", parse_pod(failed))
        handle(cluster, event("update", failed, at(40)))
        return cluster.evidence

    assert failed_pod_event({}), "a failed run is kept where podsweeper is on"
    assert not failed_pod_event({MODE: "off"})


def test_decision_lines_go_to_stdout_as_it_is_when_they_are_written(capsys):
    """The handler is made once per process (the Service builds it; so did the test above,
    under its capture); a later redirect (the sweep command's caller, the next test's capture)
    must still get the lines, not the stream that was stdout at set-up."""
    import contextlib
    import io

    from podsweeper.report import decision_log, setup_logging

    setup_logging()
    with contextlib.redirect_stdout(io.StringIO()) as later:
        decision_log.info('{"rule": "orphan"}')
    assert later.getvalue() == '{"rule": "orphan"}\n'
