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
* liveness: after the final sweep no pod is left that the rules name for deletion.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podsweeper.cluster.simulated import SimulatedCluster
from podsweeper.config import Settings
from podsweeper.intake import parse_event
from podsweeper.objects import json_bytes
from podsweeper.pipeline import Pipeline
from podsweeper.replay import replay
from tests.reliability import figures
from tests.reliability.oracle import VERSIONS, World, is_true
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
AFTER_EVERY_GRACE = timedelta(hours=3)


# -- judging decisions ---------------------------------------------------------------------


def check_outcome(world: World, outcome, event: WorldEvent, now, *, dry_run: bool) -> int:
    """Judge every decision of one handled event against the oracle; apply its deletes."""
    deletes = 0
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
                assert result == ("warned" if action == "warn" else None), (action, result)
        else:
            assert (rule, d.kind) == ("no-backoff-limit", d.job.kind.kind) and action in ("warn", "skip"), d
            job = world.jobs.get((d.kind, d.namespace, d.name))
            assert job is not None and job.uid == d.uid, f"warning about a job not in the world: {d}"
            assert world.warns_no_backoff_limit(job) is not False, f"no-backoff-limit not named for {job}"
            assert (action == "skip") == is_true(job.skip), (action, job.skip)
            assert event.verb == "add" and isinstance(event.spec, JobSpec), f"warned on {event.verb}"
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
        run = replay([path], config)
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
    config = Settings(**scenario.settings)
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
            outcome = deliver(pipeline, render(e, mode), now)
            check_outcome(world, outcome, e, now, dry_run=False)
            figures.add("property: live notifications delivered")
    # The backstop: PingSource ticks until one deletes nothing (the per-event cap may need several).
    budget = scenario.settings["max_deletes_per_event"]
    for ping in final_pings(scenario, 1 + len(world.pods) // budget + 1):
        outcome = deliver(pipeline, render(ping), ping.time)
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


@settings(max_examples=EXAMPLES, **PROPERTY)
@given(scenario=scenarios())
def test_generator_reaches_every_case(scenario):
    """Not a property of the function: counts what the generated streams contain (see figures)."""
    for e in scenario.events:
        spec = e.spec
        if isinstance(spec, JobSpec):
            figures.add(f"generated: job kind {spec.kind}")
            figures.add(f"generated: job cleanPodPolicy {spec.run_policy_clean}")
            if e.verb == "delete":
                figures.add("generated: job deleted")
        elif isinstance(spec, PodSpec):
            figures.add(f"generated: pod phase {spec.phase}")
            figures.add(f"generated: pod namespace {spec.namespace}")
            if any(c.state == "crashloop" for c in spec.containers):
                figures.add("generated: pod crash-looping")
            if is_true(spec.skip):
                figures.add("generated: pod opted out")
            if spec.owner is None and not spec.labels:
                figures.add("generated: pod of no job")
            if spec.owner is not None and spec.owner.api_version == "apps/v1":
                figures.add("generated: pod with a foreign controller")
    lives = {e.spec.key: e.spec.uid for e in scenario.events if isinstance(e.spec, JobSpec)}
    for e in scenario.events:
        if isinstance(e.spec, JobSpec) and lives[e.spec.key] != e.spec.uid and e.verb == "add":
            figures.add("generated: job re-created with another uid")
        if isinstance(e.spec, PodSpec) and e.spec.owner is not None and e.spec.owner.kind in VERSIONS:
            key = (e.spec.owner.kind, e.spec.namespace, e.spec.owner.name)
            if key in lives and lives[key] != e.spec.owner.uid:
                figures.add("generated: pod owned by a job's earlier uid")
