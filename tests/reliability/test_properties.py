"""Safety and liveness of the decision pipeline over generated event streams (hypothesis).

Two harnesses, both through the function's own Pipeline and SimulatedCluster:

* **Replay** (`podsweeper.replay.replay` on a JSON Lines file, exactly the CLI's path): the
  stream is the world. Each scenario is replayed as generated, re-interleaved across
  objects (each object's own events stay in order, as one watch delivers them), with
  duplicated events, and with events dropped; every run ends with a PingSource tick.
* **Live**: the world (a SimulatedCluster that answers 404 for a missing job, like an API
  server) changes with every event, while the function is *notified* of those changes late,
  twice or never, in Resource or Reference mode; then PingSource ticks.

Invariants, judged by tests/reliability/oracle.py (behaviour.md restated, no engine code):

* safety: every decision about a pod is exactly the (rule, action) the rules name for that
  pod at that moment; a delete only of a pod that exists with that uid; `no-backoff-limit`
  only on a job add and never a delete; dry-run deletes nothing;
* completeness (both ways): a job add the rules name for `no-backoff-limit` gets that
  warning, one the rules do not name gets none; every PingSource sweep decides, for every pod
  the rules name (delete or warn, so `crash-loop` warnings too) and the API can list by
  label, exactly that decision;
* liveness: after the final sweep no pod is left that the rules name for deletion.

The live harness reads its settings from PODSWEEPER_* environment variables through
`load_settings`, as the served function does, so a setting the function ignores (say
PODSWEEPER_SWEEP_ACTIVE_PODS) makes the oracle and the function disagree.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from collections import Counter
from datetime import timedelta
from unittest import mock

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from podsweeper.cluster.simulated import SimulatedCluster
from podsweeper.config import Settings, load_settings
from podsweeper.intake import parse_event
from podsweeper.objects import json_bytes
from podsweeper.pipeline import Pipeline
from podsweeper.replay import replay
from tests.reliability import figures
from tests.reliability import world as world_tables
from tests.reliability.oracle import VERSIONS, World, findable, is_true
from tests.reliability.world import (
    JobSpec,
    PodSpec,
    Scenario,
    WorldEvent,
    interleave,
    render,
    scenarios,
    settings_strategy,
    with_drops,
    with_duplicates,
)

# Reproducible in CI: the same examples on every run, no example database between runs.
PROPERTY = dict(
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
EXAMPLES = int(os.environ.get("PODSWEEPER_PROPERTY_EXAMPLES", "400"))
if os.environ.get("PODSWEEPER_PROPERTY_SHRINK") == "0":  # the seeded-bug run: a failure is enough
    PROPERTY["phases"] = (Phase.explicit, Phase.reuse, Phase.generate)
AFTER_EVERY_GRACE = timedelta(hours=3)


# -- judging decisions ---------------------------------------------------------------------


# What a generated job declares (render_job: 3 replicas) plus the stragglers' margin (at least 2).
JOB_BOUND = 3 + 2


def expects_no_backoff_warning(world: World, event: WorldEvent, mode: str) -> bool | None:
    """Must handling this event warn `no-backoff-limit`? None where behaviour.md leaves it open.

    Only a job's add event asks; the function decides on the job as the API shows it when
    the event is handled (gone by then: no warning). A Resource-mode event is triaged on the
    object it carries, so that object must name the warning too.
    """
    if event.verb != "add" or not isinstance(event.spec, JobSpec):
        return False
    fresh = world.jobs.get(event.spec.key)
    if fresh is None:
        return False
    answers = [world.warns_no_backoff_limit(fresh)]
    if mode != "ref":
        answers.append(world.warns_no_backoff_limit(event.spec))
    if False in answers:
        return False
    return None if None in answers else True


def sweep_names(world: World, now) -> set[tuple[str, str, str]]:
    """(pod uid, rule, action) a sweep at `now` must decide: every pod the rules name for a
    delete or a warning that a LIST by its job's labels can find."""
    out = set()
    for pod in world.pods.values():
        named = world.named(pod, now)
        if named is not None and named[1] != "skip" and findable(pod):
            out.add((pod.uid, *named))
    return out


def assert_sweep_decided(outcome, expected: set[tuple[str, str, str]], now) -> None:
    made = {
        (d.uid, d.rule.value, d.action.value)
        for d in (item.decision for item in outcome.applied)
        if d.kind == "Pod" and d.action.value != "skip"
    }
    missing = sorted(expected - made)
    if "sweep stopped at PODSWEEPER_MAX_DELETES_PER_EVENT" in (outcome.note or ""):
        # It stopped at its delete cap: the next sweep goes on after the last job it passed.
        deleted = sum(1 for item in outcome.applied if item.result and item.result.value == "deleted")
        assert deleted > 0, f"the sweep at {now} stopped at its cap without deleting: {outcome.note}"
        figures.add("property: sweeps stopped at their delete cap")
        return
    assert not missing, f"the sweep at {now} left out decisions the rules name: {missing}"
    figures.add("property: sweep decisions the oracle required", len(expected))


def check_outcome(
    world: World, outcome, event: WorldEvent, now, *, dry_run: bool, mode: str = "resource"
) -> int:
    """Judge every decision of one handled event against the oracle; apply its deletes."""
    deletes = 0
    expected = expects_no_backoff_warning(world, event, mode)
    warned = [item for item in outcome.applied if item.decision.rule.value == "no-backoff-limit"]
    if expected is not None:
        assert bool(warned) == expected, (
            f"no-backoff-limit {'missing' if expected else 'unexpected'} on {event.verb} of {event.spec} "
            f"({mode} mode; the job now: {world.jobs.get(event.spec.key)})"
        )
        figures.add(f"property: job adds judged for no-backoff-limit ({'warn' if expected else 'none'})")
    assert len(warned) <= 1, warned
    for item in outcome.applied:
        d, result = item.decision, item.result
        rule, action = d.rule.value, d.action.value
        figures.add(f"property: decisions judged ({rule} / {action})")
        if d.kind == "Pod":
            pod = world.pods.get((d.namespace, d.name))
            assert pod is not None and pod.uid == d.uid, f"decision about a pod not in the world: {d}"
            assert world.named(pod, now) == (rule, action), (
                f"{d.namespace}/{d.name}: function decided {rule}/{action}, the rules name "
                f"{world.named(pod, now)} (pod {pod}, its job {world.job_of(pod)}, now {now})"
            )
            if action == "delete":
                assert result in (("dry-run",) if dry_run else ("deleted", "deferred")), result
                if result == "deleted":
                    world.podsweeper_deleted(d.namespace, d.name, d.uid)
                    deletes += 1
            else:
                # A warning is written, or (restarts not grown since the last one) not again.
                expected = ("warned", "already-warned") if action == "warn" else (None,)
                assert result in expected, (action, result)
        else:
            assert (rule, d.kind) == ("no-backoff-limit", d.job.kind.kind) and action in ("warn", "skip"), d
            job = world.jobs.get((d.kind, d.namespace, d.name))
            assert job is not None and job.uid == d.uid, f"warning about a job not in the world: {d}"
            assert world.warns_no_backoff_limit(job) is not False, f"no-backoff-limit not named for {job}"
            assert (action == "skip") == is_true(job.skip), (action, job.skip)
            assert event.verb == "add" and isinstance(event.spec, JobSpec), f"warned on {event.verb}"
    # Bounded deletes: a sweep makes at most PODSWEEPER_MAX_DELETES_PER_EVENT attempts; a job
    # pass at most what its job declares (plus the margin) or, where no job declares a size,
    # that cap; a delete is deferred only once a bound is used up.
    results = [item.result for item in outcome.applied if item.decision.action.value == "delete"]
    attempts = sum(1 for r in results if r not in ("deferred", "dry-run"))
    budget = world.settings["max_deletes_per_event"]
    bounds = {budget} if event.spec is None else {budget, JOB_BOUND}
    assert attempts <= max(bounds), f"{attempts} deletes in one event, the bounds are {bounds}"
    assert "deferred" not in results or attempts in bounds or event.spec is None, (attempts, bounds, results)
    return deletes


def assert_nothing_left(world: World, now) -> None:
    left = world.must_delete(now)
    assert not left, "pods the rules name were left after the final sweep:\n" + "\n".join(
        f"  {pod.namespace}/{pod.name} uid={pod.uid} {named} owner={pod.owner} labels={dict(pod.labels)} "
        f"phase={pod.phase} job={world.job_of(pod)}"
        for pod, named in left
    )


def final_pings(scenario: Scenario, count: int) -> list[WorldEvent]:
    start = scenario.end + AFTER_EVERY_GRACE
    return [WorldEvent("ping", None, start + timedelta(seconds=i), 10_000 + i) for i in range(count)]


# -- harness 1: the replay -----------------------------------------------------------------


def replay_and_check(scenario: Scenario, stream: list[WorldEvent], label: str) -> None:
    stream = stream + final_pings(scenario, 1)
    config = Settings(**scenario.settings)
    rendered: dict[int, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "stream.jsonl")
        with open(path, "w", encoding="utf-8") as out:
            for e in stream:
                if e.seq not in rendered:
                    rendered[e.seq] = json.dumps(render(e))
                out.write(rendered[e.seq] + "\n")
        run = replay([path], config, final_sweep=False)  # the stream ends with its own ping
    final = run.steps[-1].outcome.applied
    figures.add(
        "property: pods the final sweep had to delete (replay)",
        sum(1 for a in final if a.result == "deleted"),
    )
    assert len(run.steps) == len(stream)
    world = World(scenario.settings, live=False)
    for step, e in zip(run.steps, stream):
        if e.spec is not None:
            shown = world.observe(e.verb, e.spec)
            assert bool(step.observed) == (not shown), (e, step.observed)
        else:
            assert_sweep_decided(step.outcome, sweep_names(world, e.time), e.time)
        check_outcome(world, step.outcome, e, e.time, dry_run=config.dry_run)
    # The world the oracle kept and the simulated cluster agree on what is left.
    assert set(world.pods) == set(run.cluster.pods), set(world.pods) ^ set(run.cluster.pods)
    if not config.dry_run:
        assert_nothing_left(world, stream[-1].time)
    else:
        assert not run.cluster.deleted_by_podsweeper
    deleted = sum(1 for s in run.steps for a in s.outcome.applied if a.result == "deleted")
    cleaned = sum(
        int(r.record.message.split()[2]) * r.count
        for r in run.cluster.events.values()
        if r.record.reason == "PodsCleanedUp"
    )
    assert cleaned == deleted, f"{deleted} pods deleted, PodsCleanedUp events list {cleaned}"
    figures.add("property: event streams replayed")
    figures.add(f"property: event streams replayed ({label})")
    figures.add("property: events fed to the replay", len(stream))
    figures.add("property: deletes judged safe", deleted)


@settings(max_examples=EXAMPLES, **PROPERTY)
@given(scenario=scenarios(), rng=st.randoms(use_true_random=False))
def test_replay_is_safe_and_leaves_nothing_the_rules_name(scenario, rng: random.Random):
    figures.add("property: replay scenarios generated")
    replay_and_check(scenario, scenario.events, "as generated")
    for _ in range(2):
        replay_and_check(scenario, interleave(scenario.events, rng), "re-interleaved")
    replay_and_check(scenario, interleave(with_duplicates(scenario.events, rng), rng), "with duplicates")
    replay_and_check(scenario, interleave(with_drops(scenario.events, rng), rng), "with drops")


@settings(max_examples=max(EXAMPLES // 5, 20), **PROPERTY)
@given(scenario=scenarios(settings_strategy(dry_run=st.just(True))), rng=st.randoms(use_true_random=False))
def test_dry_run_replay_deletes_nothing(scenario, rng: random.Random):
    replay_and_check(scenario, interleave(with_duplicates(scenario.events, rng), rng), "dry run")


# -- harness 2: a live world, notified late, twice or never ----------------------------------


class ApiServer(SimulatedCluster):
    """The world as an API server shows it: a job that is not there is a 404 (gone)."""

    def get_job(self, ref):
        return self.jobs.get(ref.key)


def settings_from_environment(chosen: dict) -> Settings:
    """The generated settings as the served function gets them: PODSWEEPER_* variables."""
    env = {
        f"PODSWEEPER_{name.upper()}": (str(value).lower() if isinstance(value, bool) else str(value))
        for name, value in chosen.items()
    }
    with mock.patch.dict(os.environ, env):
        return load_settings()


def deliver(pipeline: Pipeline, raw: dict, now):
    attributes = {k: v for k, v in raw.items() if k not in ("data", "data_base64")}
    return pipeline.handle(parse_event(attributes, json_bytes(raw["data"]) if "data" in raw else None), now)


@settings(max_examples=EXAMPLES, **PROPERTY)
@given(
    scenario=scenarios(settings_strategy(max_deletes=st.sampled_from([1, 2, 1000]))),
    rng=st.randoms(use_true_random=False),
)
def test_live_notifications_late_duplicated_or_lost_then_sweep(scenario, rng: random.Random):
    events = scenario.events
    config = settings_from_environment(scenario.settings)
    truth, world = ApiServer(), World(scenario.settings, live=True)
    pipeline = Pipeline(truth, config)
    # Delivery plan: each change is notified 0-3 times (0 = lost), each copy 0-6 steps late.
    schedule: dict[int, list[tuple[int, str]]] = {}
    for index, e in enumerate(events):
        copies = rng.choices([0, 1, 2, 3], weights=[3, 10, 3, 1])[0]
        mode = "ref" if e.spec is not None and rng.random() < 0.25 else "resource"
        for _ in range(copies):
            schedule.setdefault(index + rng.randint(0, 6), []).append((index, mode))
    last = max([len(events) - 1, *schedule], default=-1)
    for s in range(last + 1):
        now = events[s].time if s < len(events) else scenario.end + timedelta(seconds=s)
        if s < len(events) and events[s].spec is not None:
            shown = world.observe(events[s].verb, events[s].spec)
            assert (truth.observe(events[s].verb, _parsed(events[s])) is None) == shown
        for index, mode in schedule.get(s, ()):
            e = events[index]
            expected = sweep_names(world, now) if e.spec is None else None
            outcome = deliver(pipeline, render(e, mode), now)
            if expected is not None:
                assert_sweep_decided(outcome, expected, now)
            check_outcome(world, outcome, e, now, dry_run=False, mode=mode)
            figures.add("property: live notifications delivered")
    # The backstop: PingSource ticks until one deletes nothing (the per-event cap may need several).
    budget = scenario.settings["max_deletes_per_event"]
    for ping in final_pings(scenario, 1 + len(world.pods) // budget + 1):
        expected = sweep_names(world, ping.time)
        outcome = deliver(pipeline, render(ping), ping.time)
        assert_sweep_decided(outcome, expected, ping.time)
        swept = check_outcome(world, outcome, ping, ping.time, dry_run=False)
        figures.add("property: pods the final sweeps had to delete (live)", swept)
        if swept == 0:
            break
    assert_nothing_left(world, ping.time)
    assert set(world.pods) == set(truth.pods)
    figures.add("property: live scenarios generated")
    figures.add("property: live world changes", len(events))


def _parsed(e: WorldEvent):
    """The world change as the simulated API server stores it."""
    from podsweeper.objects import parse_job, parse_pod
    from tests.reliability.world import render_job, render_pod

    return parse_job(render_job(e.spec)) if isinstance(e.spec, JobSpec) else parse_pod(render_pod(e.spec))


# -- the generator covers what the issue names --------------------------------------------------

COVERAGE_EXAMPLES = 1000  # fixed, whatever PODSWEEPER_PROPERTY_EXAMPLES says: the assertion is stable
JOB_LABEL, OPERATOR_LABEL = "training.kubeflow.org/job-name", "training.kubeflow.org/operator-name"
OPERATOR_KINDS = {f"{kind.lower()}-controller": kind for kind in VERSIONS}

# What each pod's ownerReference and labels say, told from the spec itself (not from the
# generator's style name), one entry per ownership style world.OWNERSHIP can draw.
OWNER_SHAPES = {
    "training controller owner, v1.6 labels": "owned",
    "training controller owner, pre-v1.6 labels only": "owned-legacy",
    "label-only ownership, v1.6 labels + operator-name": "labels-only",
    "label-only ownership, pre-v1.6 labels + operator-name": "labels-only-legacy",
    "job-name label without operator-name (kind untold)": "labels-no-operator",
    "training controller owner, no labels": "owned-no-labels",
    "non-controller training owner reference": "non-controller-owner",
    "foreign controller wearing training labels": "foreign",
    "controller of a training kind in another API group": "wrong-group",
    "owner and job-name label name different jobs": "mismatched-label",
    "operator-name tells another kind than the job of that name": "other-kind-label",
    "no owner, no labels": "bare",
}
RULES_NAMED = (
    "orphan / delete",
    "orphan / skip",
    "finished-job-active-pod / delete",
    "finished-job-active-pod / skip",
    "clean-pod-policy-all / delete",
    "clean-pod-policy-all / skip",
    "crash-loop / warn",
    "crash-loop / delete",
    "crash-loop / skip",
    "no-backoff-limit / warn",
    "no-backoff-limit / skip",
)
EVERY_CASE = frozenset(
    [f"job kind {kind}" for kind in world_tables.KINDS]
    + ["MPIJob kubeflow.org/v2beta1"]
    + [f"job runPolicy.cleanPodPolicy {policy}" for policy in world_tables.CLEAN_POLICIES]
    + [
        "MPIJob top-level cleanPodPolicy deciding (no runPolicy one)",
        "MPIJob top-level cleanPodPolicy All deciding",
        "MPIJob with both cleanPodPolicies (runPolicy wins)",
    ]
    + [f"job restartPolicy {policy}" for policy in world_tables.RESTART_POLICIES]
    + [
        "job without backoffLimit",
        "job with backoffLimit 0",
        "job with activeDeadlineSeconds and no backoffLimit",
        "job with no conditions",
        "job finished (Succeeded True)",
        "job finished (Failed True)",
        "job with a finished condition not True",
        "job suspended",
        "job suspended and finished",
        "job opted out (true)",
        "job opted out (True)",
        "job annotation that is no opt-out (false or empty)",
        "job deleted",
        "job re-created with another uid",
        "one job name under two kinds in a namespace",
    ]
    + [f"pod: {shape}" for shape in OWNER_SHAPES]
    + [f"pod phase {phase}" for phase in world_tables.PHASES]
    + [f"container {state}" for state in world_tables.CONTAINER_STATES]
    + [
        "pod crash-looping at or above the restart threshold",
        "pod crash-looping below the restart threshold",
        "pod terminating",
        "pod without creationTimestamp",
        "pod created before the stream",
        "pod opted out (true)",
        "pod opted out (True)",
        "pod deleted by someone else",
        "pod re-created under its name with another uid",
        "pod owned by an earlier uid of a re-created job",
        "pod naming a job the stream never shows",
    ]
    + [f"event in namespace {namespace}" for namespace in world_tables.NAMESPACES]
    + [
        "pod in an excluded namespace",
        "pod outside PODSWEEPER_NAMESPACES",
        "job event outside the namespace scope",
        "PingSource tick within the stream",
        "settings: PODSWEEPER_SWEEP_ACTIVE_PODS=false",
        "settings: PODSWEEPER_CRASHLOOP_ACTION=delete",
        "settings: PODSWEEPER_NAMESPACES set",
        "settings: nothing excluded",
        "finished job's active pod kept because PODSWEEPER_SWEEP_ACTIVE_PODS=false",
    ]
    + [f"the rules name {named}" for named in RULES_NAMED]
)


def owner_shape(pod: PodSpec, job_kinds: dict[tuple[str, str], set[str]]) -> str:
    """Which of OWNER_SHAPES a pod has, from its ownerReference and labels."""
    owner, labels = pod.owner, dict(pod.labels)
    legacy = labels.get("group-name") == "kubeflow.org" and "job-name" in labels
    if owner is not None:
        group = owner.api_version.rpartition("/")[0]
        if owner.kind not in VERSIONS:
            return "foreign controller wearing training labels"
        if group != "kubeflow.org":
            return "controller of a training kind in another API group"
        if owner.controller is not True:
            return "non-controller training owner reference"
        if not labels:
            return "training controller owner, no labels"
        if JOB_LABEL in labels:
            if labels[JOB_LABEL] != owner.name:
                return "owner and job-name label name different jobs"
            return "training controller owner, v1.6 labels"
        return "training controller owner, pre-v1.6 labels only" if legacy else "unclassified"
    if not labels:
        return "no owner, no labels"
    kind = OPERATOR_KINDS.get(labels.get(OPERATOR_LABEL, ""))
    name = labels.get(JOB_LABEL) or (labels.get("job-name") if legacy else None)
    if kind is None:
        return "job-name label without operator-name (kind untold)" if name else "unclassified"
    if job_kinds.get((pod.namespace, name), set()) - {kind}:
        return "operator-name tells another kind than the job of that name"
    if JOB_LABEL in labels:
        return "label-only ownership, v1.6 labels + operator-name"
    return "label-only ownership, pre-v1.6 labels + operator-name"


def generated_cases(scenario: Scenario) -> set[str]:
    """Every case of EVERY_CASE this scenario contains (and no name outside it)."""
    cases: set[str] = set()
    chosen = scenario.settings
    world = World(chosen, live=False)
    if not chosen["sweep_active_pods"]:
        cases.add("settings: PODSWEEPER_SWEEP_ACTIVE_PODS=false")
    if chosen["crashloop_action"] == "delete":
        cases.add("settings: PODSWEEPER_CRASHLOOP_ACTION=delete")
    if chosen["namespaces"]:
        cases.add("settings: PODSWEEPER_NAMESPACES set")
    if not chosen["exclude_namespaces"]:
        cases.add("settings: nothing excluded")
    excluded = World._names(chosen["exclude_namespaces"])
    jobs = [e.spec for e in scenario.events if isinstance(e.spec, JobSpec)]
    job_kinds: dict[tuple[str, str], set[str]] = {}
    job_uids: dict[tuple, dict[str, None]] = {}  # uids of one job key, in the order they appear
    for job in jobs:
        job_kinds.setdefault((job.namespace, job.name), set()).add(job.kind)
        job_uids.setdefault(job.key, {})[job.uid] = None
    pod_uids: dict[tuple, set[str]] = {}
    with_active_pods = World({**chosen, "sweep_active_pods": True}, live=False)
    for e in scenario.events:
        spec = e.spec
        if spec is None:
            cases.add("PingSource tick within the stream")
            continue
        cases.add(f"event in namespace {spec.namespace}")
        if isinstance(spec, JobSpec):
            cases.add(f"job kind {spec.kind}")
            if spec.api_version.endswith("/v2beta1"):
                cases.add(f"{spec.kind} {spec.api_version}")
            cases.add(f"job runPolicy.cleanPodPolicy {spec.run_policy_clean}")
            if spec.top_level_clean is not None:
                if spec.run_policy_clean is None:
                    cases.add("MPIJob top-level cleanPodPolicy deciding (no runPolicy one)")
                    if spec.top_level_clean == "All":
                        cases.add("MPIJob top-level cleanPodPolicy All deciding")
                else:
                    cases.add("MPIJob with both cleanPodPolicies (runPolicy wins)")
            cases.add(f"job restartPolicy {spec.restart_policy}")
            if spec.backoff_limit is None:
                cases.add("job without backoffLimit")
                if spec.active_deadline is not None:
                    cases.add("job with activeDeadlineSeconds and no backoffLimit")
            elif spec.backoff_limit == 0:
                cases.add("job with backoffLimit 0")
            conditions = dict(spec.conditions)
            if not spec.conditions:
                cases.add("job with no conditions")
            for kind in ("Succeeded", "Failed"):
                if conditions.get(kind) == "True":
                    cases.add(f"job finished ({kind} True)")
                elif kind in conditions:
                    cases.add("job with a finished condition not True")
            if conditions.get("Suspended") == "True":
                cases.add("job suspended")
                if conditions.get("Succeeded") == "True" or conditions.get("Failed") == "True":
                    cases.add("job suspended and finished")
            if spec.skip in ("true", "True"):
                cases.add(f"job opted out ({spec.skip})")
            elif spec.skip is not None:
                cases.add("job annotation that is no opt-out (false or empty)")
            if e.verb == "delete":
                cases.add("job deleted")
            if len(job_uids[spec.key]) > 1:
                cases.add("job re-created with another uid")
            if len(job_kinds[(spec.namespace, spec.name)]) > 1:
                cases.add("one job name under two kinds in a namespace")
            if not world.allowed(spec.namespace):
                cases.add("job event outside the namespace scope")
            if e.verb == "add" and world.warns_no_backoff_limit(spec):
                cases.add(f"the rules name no-backoff-limit / {'skip' if is_true(spec.skip) else 'warn'}")
        else:
            cases.add(f"pod: {owner_shape(spec, job_kinds)}")
            cases.add(f"pod phase {spec.phase}")
            cases.update(f"container {c.state}" for c in spec.containers)
            looping = [c.restarts for c in spec.containers if c.state == "crashloop"]
            if looping:
                above = max(looping) >= chosen["crashloop_restarts"]
                cases.add(f"pod crash-looping {'at or above' if above else 'below'} the restart threshold")
            if spec.terminating:
                cases.add("pod terminating")
            if spec.created is None:
                cases.add("pod without creationTimestamp")
            elif spec.created < world_tables.T0:
                cases.add("pod created before the stream")
            if spec.skip in ("true", "True"):
                cases.add(f"pod opted out ({spec.skip})")
            if e.verb == "delete":
                cases.add("pod deleted by someone else")
            pod_uids.setdefault(spec.key, set()).add(spec.uid)
            if len(pod_uids[spec.key]) > 1:
                cases.add("pod re-created under its name with another uid")
            if spec.owner is not None and spec.owner.kind in VERSIONS:
                uids = list(job_uids.get((spec.owner.kind, spec.namespace, spec.owner.name), ()))
                if spec.owner.uid in uids[:-1]:
                    cases.add("pod owned by an earlier uid of a re-created job")
                if spec.owner.uid.startswith("never-seen-"):
                    cases.add("pod naming a job the stream never shows")
            if spec.namespace in excluded:
                cases.add("pod in an excluded namespace")
            elif not world.allowed(spec.namespace):
                cases.add("pod outside PODSWEEPER_NAMESPACES")
        world.observe(e.verb, spec)
        with_active_pods.observe(e.verb, spec)
        for pod in world.pods.values():
            named = world.named(pod, e.time)
            if named is not None:
                cases.add(f"the rules name {named[0]} / {named[1]}")
            elif with_active_pods.named(pod, e.time) == ("finished-job-active-pod", "delete"):
                cases.add("finished job's active pod kept because PODSWEEPER_SWEEP_ACTIVE_PODS=false")
    return cases


def test_generator_reaches_every_case():
    """Not a property of the function: every case the generator can draw occurs in the streams
    (counts in the figures, "generated: ..."); a case the streams never reach fails by name."""
    seen: Counter = Counter()

    @settings(max_examples=COVERAGE_EXAMPLES, **PROPERTY)
    @given(scenario=scenarios())
    def collect(scenario):
        seen.update(generated_cases(scenario))

    collect()
    for case, count in seen.items():
        figures.add(f"generated: {case}", count)
    unknown = sorted(set(seen) - EVERY_CASE)
    assert not unknown, f"cases outside EVERY_CASE (a misnamed case?): {unknown}"
    missing = sorted(EVERY_CASE - set(seen))
    assert not missing, f"{len(missing)} cases never generated in {COVERAGE_EXAMPLES} scenarios: {missing}"
    figures.add("generated: cases required and reached", len(EVERY_CASE))
