"""Safety and liveness of the decision pipeline over generated event streams (hypothesis).

Two harnesses, both through the function's own Pipeline and SimulatedCluster:

* **Replay** (`podsweeper.replay.replay` on a JSON Lines file, exactly the CLI's path): the
  stream is the world. Each scenario is replayed as generated, re-interleaved across
  objects (each object's own events stay in order, as one watch delivers them), with
  duplicated events, and with events dropped; every run ends with a PingSource tick.
* **Live**: the world (a SimulatedCluster that answers 404 for a missing job, like an API
  server) changes with every event, while the function is *notified* of those changes late,
  twice or never, in Resource or Reference mode; then PingSource ticks.

* **Lies** (tests/replay/liars.py): the live world notified at once, with lying payloads
  between its changes (claims the world does not back, deletes of what exists), never applied
  to it: each decision must still be what the rules name for the world, each record and log
  read what the world shows.

Invariants, judged by tests/replay/oracle.py (docs/rules.md restated, no engine code):

* safety: every decision about a pod is exactly the (rule, action) the rules name for that
  pod at that moment; a delete only of a pod that exists with that uid; `no-backoff-limit`
  only on a job add and never a delete; dry-run deletes nothing;
* completeness (both ways): a job add the rules name for `no-backoff-limit` gets that
  warning, one the rules do not name gets none; every PingSource sweep decides, for every pod
  the rules name (delete or warn, so `crash-loop` warnings too) and the API can list by
  label, exactly that decision;
* liveness: after the final sweep no pod is left that the rules name for deletion.

Trainer v2 (model_trainer.py lineages in the same streams), judged the same way: every
JobSet/Job delete and every TrainJob suspend, warning or skip is exactly what the rules name
for it at that moment (never a pod one by one); a JobSet's add warns unbounded-jobset-restarts
exactly when the rules name it, no other event does; every sweep decides every JobSet/Job
delete and TrainJob suspend/warning the rules name; after the final sweep no JobSet or Job the
rules name for deletion is left, and no TrainJob the rules name for a suspend runs on.
Deleting a JobSet or Job takes what it controls with it, in the oracle's world too.

expired-trainjob (opt-in; its settings, a finished TrainJob's story and a namespace's TTL are
drawn last, model_ttl.py): a TrainJob delete is exactly what the rule names for the TrainJob at
that moment (never one it does not name; a dry-run namespace's is only told), every sweep
decides the deletes it names, and after the final sweep no TrainJob it names for deletion is
left; deleting a TrainJob takes what it controls with it (its JobSet, their Jobs and pods).

MPIJob v2beta1 launcher chains (model_mpi.py) go through the pod judgments above: a launcher
pod is named only when its batch Job is its MPIJob's and finished. Launcher Jobs are world
changes the shipped source never sends: the live harness's API server has them and the
function is never notified of them; the replay's stream never holds them. A failed-mpijob-running
decision (an MPIJob v2beta1 Failed without completionTime) must be exactly the action the rules
name for the job then; a suspend is applied to the oracle's world. No sweep is required to make
one: the sweep nominates such a job only through a pod it lists (docs/rules.md says every listed
such job).

No disagreement is tolerated: any decision the oracle does not name, and any decision it
names that a sweep leaves out, fails. The four disagreements these tests once found (at the
end of this file) are fixed; each minimal stream is kept as a regression test, and each fix is
a seeded bug (tests/mutants/catalogue.py) that these tests must catch when it is put back.

The live harness reads its settings from PODSWEEPER_* environment variables through
`load_settings`, as the served function does, so a setting the function ignores (say
PODSWEEPER_SWEEP_ACTIVE_PODS) makes the oracle and the function disagree.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import tempfile
import time
from collections import Counter
from datetime import timedelta
from unittest import mock

from hypothesis import HealthCheck, Phase, example, given, seed, settings
from hypothesis import strategies as st

from podsweeper.actor import Actor, Ledger
from podsweeper.cluster.simulated import SimulatedCluster
from podsweeper.config import Settings, load_settings
from podsweeper.intake import parse_event
from podsweeper.model import Namespace, Node, NodeReady
from podsweeper.namespaces import NamespacePolicies
from podsweeper.objects.namespaces import decode_namespace
from podsweeper.objects.pages import json_bytes
from podsweeper.passes import Passes
from podsweeper.pipeline import Pipeline
from podsweeper.replay import replay
from podsweeper.sweep import Sweeper, SweepRun
from tests.replay import model_world as world_tables
from tests.replay.liars import Lie, RecordingCluster, RecordJudge, lie_specs
from tests.replay.model_mpi import LauncherJobSpec, unwatched
from tests.replay.model_trainer import ChainPodSpec, IntermediateSpec, TrainJobSpec
from tests.replay.model_world import (
    JobSpec,
    NamespaceSpec,
    PodSpec,
    Scenario,
    WorldEvent,
    interleave,
    render,
    scenarios,
    settings_strategy,
    with_drops,
    with_duplicates,
    with_stale_retries,
)
from tests.replay.oracle import (
    BATCH_JOB,
    EXPIRED_TRAINJOB,
    FAILED_TRAINJOB_PODGROUP,
    FINISHED_TRAINJOB_RESTARTED,
    JOBSET,
    JOBSET_NAME,
    PODGROUP,
    TRAINJOB,
    UNBOUNDED_JOBSET_RESTARTS,
    VERSIONS,
    World,
    belongs,
    controlled_by,
    findable,
    finished,
    is_true,
    labelled,
    launcher_of,
    trainjob_finished_at,
    unsettled,
)
from tests.support import figures, seeds

# Reproducible in CI: the same examples on every run, no example database between runs;
# PODSWEEPER_TEST_SEED=N (make fresh) draws new ones from seed N instead (tests/support/seeds.py).
FRESH_SEED = seeds.fresh()
PROPERTY = dict(
    derandomize=FRESH_SEED is None,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
EXAMPLES_DEFAULT = "400"
EXAMPLES = int(os.environ.get("PODSWEEPER_PROPERTY_EXAMPLES", EXAMPLES_DEFAULT))
if os.environ.get("PODSWEEPER_PROPERTY_SHRINK") == "0":  # the seeded-bug run: a failure is enough
    PROPERTY["phases"] = (Phase.explicit, Phase.reuse, Phase.generate)
if os.environ.get("PODSWEEPER_PROPERTY_EXPLICIT") == "0":
    # The seeded-bug run judges what the generator reaches: an @example pinned after a fixed
    # disagreement is not the generator's catch (tests/mutants, Suite.PROPERTY).
    PROPERTY["phases"] = tuple(p for p in PROPERTY.get("phases", tuple(Phase)) if p is not Phase.explicit)
AFTER_EVERY_GRACE = timedelta(hours=3)
# The generator's own coverage test always judges the same fixed examples.
FIXED = {**PROPERTY, "derandomize": True}


def reproducible(test):
    """The property test drawn from PODSWEEPER_TEST_SEED when a fresh run sets it."""
    return test if FRESH_SEED is None else seed(FRESH_SEED)(test)


# -- judging decisions ---------------------------------------------------------------------


# What a generated job declares (render_job: 3 replicas) plus the stragglers' margin (at least 2).
JOB_BOUND = 3 + 2


def expects_no_backoff_warning(world: World, event: WorldEvent, mode: str) -> bool | None:
    """Must handling this event warn `no-backoff-limit`? None where docs/rules.md leaves it open.

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


def sweep_names(world: World, now) -> dict[tuple[str, str, str], tuple[str, str, str]]:
    """{(uid, rule, action): job key} a sweep at `now` must decide: every pod the rules name
    for a delete or a warning that a LIST by its job's labels can find, and every JobSet and
    Job the Trainer v2 rules name for a delete (and TrainJob for a suspend or warning). The job
    key (kind, namespace, name) is the job the decision is about (a chain's: its TrainJob)."""
    out = {}
    for pod in world.pods.values():
        named = world.named(pod, now)
        if named is not None and named[1] != "skip" and findable(pod):
            out[(pod.uid, *named)] = pod_job_key(pod)
        stuck = world.named_stuck(pod, now)
        if stuck is not None and stuck[1] != "skip" and labelled(pod):
            out[(pod.uid, *stuck)] = pod_job_key(pod)
    for namespace, name in world.chain_lineages():
        for (_kind, uid), named in world.chain_named(namespace, name, now).items():
            if named[1] != "skip":
                out[(uid, *named)] = (TRAINJOB, namespace, name)
    return out


def pod_job_key(pod: PodSpec) -> tuple[str, str, str]:
    """The job a decision about this pod is about: its owner's, or its launcher's MPIJob."""
    name = launcher_of(pod)
    if name is not None:
        return ("MPIJob", pod.namespace, name)
    owner = belongs(pod)
    assert owner is not None, pod
    return (owner[0], pod.namespace, owner[1])


def assert_sweep_decided(outcome, expected: dict[tuple[str, str, str], tuple], now, cap: int) -> None:
    """Every decision the rules name is made by the sweep; a sweep that stopped at its delete
    cap made exactly `cap` deletes and left out only jobs it had not reached (for every job
    whose pass it ran, every decision the rules name for that job is there)."""
    made = {
        (d.uid, d.rule.value, d.action.value)
        for d in (item.decision for item in outcome.applied)
        if d.action.value != "skip"
    }
    missing = sorted(set(expected) - made)
    if outcome.sweep is not None and outcome.sweep.value == "delete-cap":
        deleted = sum(
            1
            for item in outcome.applied
            if item.result and item.result.value == "deleted" and item.decision.action.value == "delete"
        )
        assert deleted == cap, f"the sweep at {now} stopped at its cap {cap} after {deleted} deletes"
        passed = {d.job.key for d in (item.decision for item in outcome.applied)}
        left_in_passed = [m for m in missing if expected[m] in passed]
        assert not left_in_passed, (
            f"the sweep at {now} stopped at its cap and left out decisions of jobs it passed: {left_in_passed}"
        )
        figures.add("property: sweeps stopped at their delete cap")
        figures.add("property: sweep decisions the oracle required", len(set(expected) & made))
        return
    assert not missing, f"the sweep at {now} left out decisions the rules name: {missing}"
    figures.add("property: sweep decisions the oracle required", len(expected))


def expected_restart_warnings(world: World, event: WorldEvent, now, handled: bool, mode: str) -> set[tuple]:
    """(uid, rule, action) of the unbounded-jobset-restarts decisions a handled event must make:
    only a JobSet's add asks, and the fresh state decides (a JobSet gone by then: none)."""
    spec = event.spec
    if not handled or event.verb != "add":
        return set()
    jobset_add = isinstance(spec, IntermediateSpec) and spec.kind == JOBSET
    if not jobset_add:
        return set()
    named = world.chain_named(spec.namespace, spec.name, now, jobset_added=True)
    return {(uid, *named) for (_, uid), named in named.items() if named[0] == UNBOUNDED_JOBSET_RESTARTS}


def check_chain_decision(world: World, d, result, now) -> int:
    """A Trainer v2 delete (JobSet or batch Job) must be exactly what the rules name now."""
    rule, action = d.rule.value, d.action.value
    found = world.workloads.get((d.kind, d.namespace, d.name))
    assert found is not None and found.uid == d.uid, f"decision about a {d.kind} not in the world: {d}"
    lineage = d.name if d.kind == JOBSET else found.label(JOBSET_NAME)
    assert (d.job.kind.kind, d.job.name) == (TRAINJOB, lineage), (d.job, lineage)
    named = world.chain_named(d.namespace, lineage, now).get((d.kind, d.uid))
    assert named == (rule, action), (
        f"{d.kind} {d.namespace}/{d.name}: function decided {rule}/{action}, the rules name {named} "
        f"({found}; TrainJob {world.trainjob_of(d.namespace, lineage)}; now {now})"
    )
    if action != "delete":
        assert result is None, (action, result)
        return 0
    assert result in (("dry-run",) if world.dry(d.namespace) else ("deleted", "deferred")), result
    if result == "deleted":
        world.podsweeper_deleted_intermediate(d.kind, d.namespace, d.name, d.uid)
        return 1
    return 0


def check_trainjob_decision(world: World, d, result, now) -> bool:
    """finished-trainjob-restarted: exactly what the rules name for the TrainJob now; True
    when the TrainJob was suspended (the caller applies it once the event is judged)."""
    rule, action = d.rule.value, d.action.value
    assert rule == FINISHED_TRAINJOB_RESTARTED, d
    job = world.trainjobs.get((d.namespace, d.name))
    assert job is not None and job.uid == d.uid, f"decision about a TrainJob not in the world: {d}"
    named = world.chain_named(d.namespace, d.name, now).get((TRAINJOB, d.uid))
    assert named == (rule, action), (
        f"TrainJob {d.namespace}/{d.name}: function decided {rule}/{action}, the rules name {named} "
        f"({job}; its JobSet {world.workloads.get((JOBSET, d.namespace, d.name))}; now {now})"
    )
    dry_run = world.dry(d.namespace)
    expected = {"suspend": ("dry-run",) if dry_run else ("suspended",), "warn": ("warned", "already-warned")}
    assert result in expected.get(action, (None,)), (action, result)
    return result == "suspended"


def check_expired_decision(world: World, d, result, now) -> bool:
    """expired-trainjob: exactly what the rules name for the TrainJob now (a delete the rule
    does not name is never safe); True when it was deleted (the caller applies it, with its
    chain, once the event is judged: every decision of it was made on the same read)."""
    rule, action = d.rule.value, d.action.value
    job = world.trainjobs.get((d.namespace, d.name))
    assert job is not None and job.uid == d.uid, f"decision about a TrainJob not in the world: {d}"
    named = world.chain_named(d.namespace, d.name, now).get((TRAINJOB, d.uid))
    assert named == (rule, action), (
        f"TrainJob {d.namespace}/{d.name}: function decided {rule}/{action}, the rules name {named} "
        f"({job}; TTL {world.trainjob_ttl(job)}; kept: {world.ttl_kept(job, now)}; its JobSet "
        f"{world.workloads.get((JOBSET, d.namespace, d.name))}; now {now})"
    )
    if action != "delete":
        assert result is None, (action, result)
        return False
    assert result in (("dry-run",) if world.dry(d.namespace) else ("deleted", "deferred")), result
    figures.add(f"property: TrainJob deletes judged (expired-trainjob, {result})")
    return result == "deleted"


def check_outcome(
    world: World,
    outcome,
    event: WorldEvent,
    now,
    *,
    mode: str = "resource",
    handled: bool = True,
) -> int:
    """Judge every decision of one handled event against the oracle; apply its deletes.
    `handled=False`: the replay ignored the event (about an object podsweeper deleted)."""
    if not handled:  # about an object podsweeper deleted, or older than what the replay saw
        assert not outcome.applied, (event, outcome.applied)
        return 0
    deletes = 0
    restarts = expected_restart_warnings(world, event, now, handled, mode)
    warned_restarts = {
        (item.decision.uid, item.decision.rule.value, item.decision.action.value)
        for item in outcome.applied
        if item.decision.rule.value == UNBOUNDED_JOBSET_RESTARTS
    }
    assert warned_restarts == restarts, (
        f"on {event.verb} of {event.spec} ({mode} mode): unbounded-jobset-restarts decided "
        f"{sorted(warned_restarts)}, the rules name {sorted(restarts)}"
    )
    if (
        isinstance(event.spec, IntermediateSpec)
        and event.verb == "add"
        and event.spec.kind == JOBSET
        and handled
    ):
        figures.add(f"property: JobSet adds judged for unbounded-jobset-restarts ({len(restarts)} named)")
    expected = expects_no_backoff_warning(world, event, mode)
    warned = [item for item in outcome.applied if item.decision.rule.value == "no-backoff-limit"]
    if expected is not None:
        assert bool(warned) == expected, (
            f"no-backoff-limit {'missing' if expected else 'unexpected'} on {event.verb} of {event.spec} "
            f"({mode} mode; the job now: {world.jobs.get(event.spec.key)})"
        )
        figures.add(f"property: job adds judged for no-backoff-limit ({'warn' if expected else 'none'})")
    assert len(warned) <= 1, warned
    # Suspends change what the rules name for the job's other objects: every decision of one
    # event was made on the same fresh read, so they are applied once all are judged.
    suspends: list = []
    for item in outcome.applied:
        d, result = item.decision, item.result
        rule, action = d.rule.value, d.action.value
        dry_run = world.dry(d.namespace)  # the namespace's policy, as the oracle reads it
        figures.add(f"property: decisions judged ({rule} / {action})")
        if d.kind == "Pod" and rule == "stuck-terminating":
            pod = world.pods.get((d.namespace, d.name))
            assert pod is not None and pod.uid == d.uid, f"decision about a pod not in the world: {d}"
            assert event.spec is None, f"stuck-terminating decided outside a sweep: {d}"
            assert world.named_stuck(pod, now) == (rule, action), (
                f"{d.namespace}/{d.name}: function decided {rule}/{action}, the rules name "
                f"{world.named_stuck(pod, now)} (pod {pod}, node {world.nodes.get(pod.node or '')}, now {now})"
            )
            if action == "force-delete":
                assert result in (("dry-run",) if dry_run else ("deleted", "deferred")), result
                if result == "deleted":
                    world.podsweeper_deleted(d.namespace, d.name, d.uid)
                    deletes += 1
            else:
                assert result is None, (action, result)
        elif d.kind == "Pod":
            pod = world.pods.get((d.namespace, d.name))
            assert pod is not None and pod.uid == d.uid, f"decision about a pod not in the world: {d}"
            assert world.named(pod, now) == (rule, action), (
                f"{d.namespace}/{d.name}: function decided {rule}/{action}, the rules name "
                f"{world.named(pod, now)} (pod {pod}, its job {world.job_of(pod)}, now {now})"
            )
            if launcher_of(pod):
                figures.add(f"property: launcher pod decisions judged ({rule} / {action})")
            if action == "delete":
                assert result in (("dry-run",) if dry_run else ("deleted", "deferred")), result
                if result == "deleted":
                    world.podsweeper_deleted(d.namespace, d.name, d.uid)
                    deletes += 1
            elif action == "suspend":  # crash-loop, PODSWEEPER_CRASHLOOP_ACTION=suspend: the pod's job
                assert result in (("dry-run",) if dry_run else ("suspended",)), (action, result)
                job = world.job_of(pod)
                assert isinstance(job, JobSpec) and d.job.key == job.key, (d.job, job)
                if result == "suspended":
                    suspends.append(
                        (world.podsweeper_suspended_job, job.kind, d.namespace, job.name, job.uid)
                    )
            else:
                # A warning is written, or (restarts not grown since the last one) not again.
                expected = ("warned", "already-warned") if action == "warn" else (None,)
                assert result in expected, (action, result)
        elif d.kind in (JOBSET, BATCH_JOB):
            deletes += check_chain_decision(world, d, result, now)
        elif d.kind == TRAINJOB and rule == FAILED_TRAINJOB_PODGROUP:
            job = world.trainjobs.get((d.namespace, d.name))
            assert job is not None and job.uid == d.uid, f"warning about a TrainJob not in the world: {d}"
            named = world.podgroup_named(d.namespace, d.name, now)
            assert named == action, (
                f"TrainJob {d.namespace}/{d.name}: decided {rule}/{action}, the rules name {named} "
                f"({job}; its PodGroup {world.workloads.get((PODGROUP, d.namespace, d.name))}; now {now})"
            )
            assert result in (("warned", "already-warned") if action == "warn" else (None,)), (action, result)
        elif d.kind == TRAINJOB and rule == EXPIRED_TRAINJOB:
            if check_expired_decision(world, d, result, now):
                suspends.append((world.podsweeper_deleted_trainjob, d.namespace, d.name, d.uid))
                deletes += 1
        elif d.kind == TRAINJOB and rule == UNBOUNDED_JOBSET_RESTARTS:  # judged exactly above
            assert result in (("warned", "already-warned") if action == "warn" else (None,)), (action, result)
        elif d.kind == TRAINJOB:
            if check_trainjob_decision(world, d, result, now):
                suspends.append((world.podsweeper_suspended, d.namespace, d.name, d.uid))
        elif rule == "failed-mpijob-running":
            job = world.jobs.get((d.kind, d.namespace, d.name))
            assert job is not None and job.uid == d.uid, f"decision about a job not in the world: {d}"
            named = world.failed_running(job, now)
            assert named == action, (
                f"{d.kind} {d.namespace}/{d.name}: decided {action}, the rules name {named} ({job}; now {now})"
            )
            expected = {
                "suspend": ("dry-run",) if dry_run else ("suspended",),
                "warn": ("warned", "already-warned"),
            }
            assert result in expected.get(action, (None,)), (action, result)
            if result == "suspended":
                suspends.append((world.podsweeper_suspended_job, d.kind, d.namespace, d.name, d.uid))
        else:
            assert (rule, d.kind) == ("no-backoff-limit", d.job.kind.kind) and action in ("warn", "skip"), d
            job = world.jobs.get((d.kind, d.namespace, d.name))
            assert job is not None and job.uid == d.uid, f"warning about a job not in the world: {d}"
            assert world.warns_no_backoff_limit(job) is not False, f"no-backoff-limit not named for {job}"
            assert (action == "skip") == is_true(job.skip), (action, job.skip)
            assert event.verb == "add" and isinstance(event.spec, JobSpec), f"warned on {event.verb}"
    for suspend, *args in dict.fromkeys(tuple(s) for s in suspends):  # one suspend per job
        suspend(*args)
    # Bounded deletes: a sweep makes at most PODSWEEPER_MAX_DELETES_PER_EVENT attempts; a job
    # pass at most what its job declares (plus the margin) or, where no job declares a size,
    # that cap; a delete is deferred only once a bound is used up.
    forced = [item.result for item in outcome.applied if item.decision.action.value == "force-delete"]
    budget = world.settings["max_deletes_per_event"]
    assert sum(1 for r in forced if r not in ("deferred", "dry-run")) <= budget, forced
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
    chain_left = []
    for obj, named in world.chain_must_act(now):
        job = isinstance(obj, IntermediateSpec) and obj.kind == BATCH_JOB
        chain_left.append((obj, named, obj.label(JOBSET_NAME) if job else obj.name))
    assert not chain_left, (
        "TrainJobs/JobSets/Jobs the rules name were left after the final sweep:\n"
        + "\n".join(
            f"  {obj} {named} TrainJob={world.trainjob_of(obj.namespace, lineage)}"
            for obj, named, lineage in chain_left
        )
    )


# Evidence record sources, as docs/operations.md names them (written out: the test side keeps
# its own words for what a record may claim).
DELETED_BY_PODSWEEPER = "deleted by podsweeper"


def assert_evidence_truthful(stores: dict, deleted: set[str], dry_run: bool) -> None:
    """No evidence store claims a delete the cluster did not see: a record saying podsweeper
    deleted a pod names a pod podsweeper's delete removed (as judged above), and a dry run
    has none at all. `stores`: the simulated cluster's (namespace, store) -> (JSON, version)."""
    claims = 0
    for (namespace, store), (text, _) in stores.items():
        for record in json.loads(text):
            if record.get("source") != DELETED_BY_PODSWEEPER:
                continue
            claims += 1
            assert not dry_run, f"dry run: {namespace}/{store} says podsweeper deleted {record.get('pod')}"
            assert record.get("pod_uid") in deleted, (
                f"{namespace}/{store} says podsweeper deleted pod {record.get('pod')} "
                f"(uid {record.get('pod_uid')}), which no delete of podsweeper removed"
            )
    figures.add("property: evidence records claiming a delete, each checked", claims)


def final_pings(scenario: Scenario, count: int) -> list[WorldEvent]:
    start = scenario.end + AFTER_EVERY_GRACE
    return [WorldEvent("ping", None, start + timedelta(seconds=i), 10_000 + i) for i in range(count)]


# -- harness 1: the replay -----------------------------------------------------------------


def replay_and_check(scenario: Scenario, stream: list[WorldEvent], label: str) -> None:
    # What the shipped source never sends (a launcher Job's changes) no recorded stream holds.
    # With expired-trainjob on, a second tick: a TrainJob kept by a pod of its name at the first
    # may be named once that sweep's own deletes (an orphan Job's, its pods with it) took the pod.
    ticks = 2 if scenario.settings.get("trainjob_ttl_seconds") else 1
    stream = [e for e in stream if not unwatched(e.spec)] + final_pings(scenario, ticks)
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
        shown = True
        if e.spec is not None:
            shown = world.observe(e.verb, e.spec, version=e.seq)
            assert bool(step.observed) == (not shown), (e, step.observed)
        else:
            cap = config.max_deletes_per_event
            assert_sweep_decided(step.outcome, sweep_names(world, e.time), e.time, cap)
        check_outcome(world, step.outcome, e, e.time, handled=shown)
    # The world the oracle kept and the simulated cluster agree on what is left.
    assert set(world.pods) == set(run.cluster.pods), set(world.pods) ^ set(run.cluster.pods)
    assert set(world.workloads) == set(run.cluster.intermediates), set(world.workloads) ^ set(
        run.cluster.intermediates
    )
    assert_nothing_left(world, stream[-1].time)  # the oracle owes nothing where it is dry-run
    dry_everywhere = all(world.dry(namespace) for namespace in world_tables.NAMESPACES)
    if dry_everywhere:
        assert not run.cluster.deleted_by_podsweeper
    assert_evidence_truthful(run.cluster.evidence, world.deleted, dry_everywhere)
    trainjobs = {key for key in run.cluster.jobs if key[0] == TRAINJOB}
    assert {(TRAINJOB, *key) for key in world.trainjobs} == trainjobs, (set(world.trainjobs), trainjobs)
    # A TrainJob's delete has its own Event (TrainJobExpired), never PodsCleanedUp.
    deleted = sum(
        1
        for s in run.steps
        for a in s.outcome.applied
        if a.result == "deleted" and a.decision.kind != TRAINJOB
    )
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


def _at(seconds: int):
    return world_tables.T0 + timedelta(seconds=seconds)


def _v2_chain(*, conditions=(), failure_actions=(), terminating=False, uid="tj"):
    """A TrainJob "a" in team-a (created at 0), its JobSet and one marked batch Job."""
    from tests.fixtures import trainer as fixtures
    from tests.replay.model_trainer import MARK, NAME_LABEL, UID_LABEL

    tj = TrainJobSpec("team-a", "a", uid, _at(0), conditions, None, None)
    js = IntermediateSpec(
        JOBSET,
        "team-a",
        "a",
        f"js-{uid}",
        _at(0),
        world_tables.OwnerSpec(fixtures.TRAINER, TRAINJOB, "a", uid, True),
        template_marked=True,
        failure_actions=failure_actions,
        terminating=terminating,
    )
    labels = ((NAME_LABEL, "a"), (UID_LABEL, js.uid), (MARK, "trainer"))
    owner = world_tables.OwnerSpec(fixtures.JOBSET, JOBSET, "a", js.uid, True)
    job = IntermediateSpec(BATCH_JOB, "team-a", "a-node-0", f"job-{uid}", _at(0), owner, labels)
    return tj, js, job


def known_bug_4(*, dry_run: bool = False) -> Scenario:
    """KNOWN BUG 4's world, pinned as an explicit example of the generated tests: a running
    TrainJob whose JobSet is terminating, its batch Job made at once (within the orphan grace),
    a tick 10 minutes later. The generator reaches it (at 600 examples the mutant that brings
    the bug back is caught in seconds), but not within the first 200 since the namespace
    policies' settings changed the derandomized draws."""
    tj, js, job = _v2_chain(terminating=True)
    chosen = {
        "namespaces": "",
        "exclude_namespaces": "kube-system",
        "orphan_grace_seconds": 30,
        "crashloop_restarts": 3,
        "crashloop_action": "warn",
        "sweep_active_pods": True,
        "operator_grace_seconds": 30,
        "max_deletes_per_event": 1000,
        "dry_run": dry_run,
        "stuck_terminating_seconds": None,
        "namespace_live_allowed": False,
        "namespace_crashloop_actions": "",
        "namespace_min_grace_seconds": None,
    }
    events = [WorldEvent("add", spec, _at(0), seq) for seq, spec in enumerate((tj, js, job))]
    return Scenario(chosen, [*events, WorldEvent("ping", None, _at(600), 3)], {})


def failed_not_at_its_deadline() -> Scenario:
    """A TrainJob Failed for another reason than its deadline (Trainer's default reason) whose
    JobSet, made before the finish, still runs a pod; a tick 10 minutes later, past every grace.
    Rule deadline-exceeded-jobset-running must leave that JobSet alone (Trainer makes it again,
    kubeflow/trainer#3891), pinned as an explicit example: the generator draws such worlds,
    but the mutant deadline-jobset-any-failure survived the property suite (caught by the unit
    suite alone) in `make mutants` and five runs of it alone since the namespace policies
    changed the derandomized draws; with this example it is caught in seconds."""
    from tests.replay.model_trainer import BATCH_API, _pod_labels

    failed = (("Created", "True", _at(0)), ("Failed", "True", _at(100)))
    tj, js, job = _v2_chain(conditions=failed, uid="other")
    pod = ChainPodSpec(
        namespace=job.namespace,
        name=f"{job.name}-0-runs",
        uid=f"{job.uid}-pod-0",
        owner=world_tables.OwnerSpec(BATCH_API, BATCH_JOB, job.name, job.uid, True),
        labels=_pod_labels(js.name, js.uid, job.name, job.uid, 0),
        phase="Running",
        containers=(world_tables.ContainerSpec("running", 0),),
        skip=None,
        terminating=False,
        created=_at(1),
    )
    chosen = {**known_bug_4().settings}
    events = [WorldEvent("add", spec, _at(seq), seq) for seq, spec in enumerate((tj, js, job, pod))]
    return Scenario(chosen, [*events, WorldEvent("ping", None, _at(600), 4)], {})


@reproducible
@settings(max_examples=EXAMPLES, **PROPERTY)
@given(scenario=scenarios(), rng=st.randoms(use_true_random=False))
@example(scenario=known_bug_4(), rng=random.Random(0))
@example(scenario=failed_not_at_its_deadline(), rng=random.Random(0))
def test_replay_is_safe_and_leaves_nothing_the_rules_name(scenario, rng: random.Random):
    figures.add("property: replay scenarios generated")
    replay_and_check(scenario, scenario.events, "as generated")
    for _ in range(2):
        replay_and_check(scenario, interleave(scenario.events, rng), "re-interleaved")
    replay_and_check(scenario, interleave(with_duplicates(scenario.events, rng), rng), "with duplicates")
    replay_and_check(scenario, interleave(with_drops(scenario.events, rng), rng), "with drops")
    stale = with_stale_retries(interleave(scenario.events, rng), rng)
    replay_and_check(scenario, stale, "with stale retries")


@reproducible
@settings(max_examples=EXAMPLES, **PROPERTY)
@given(
    # A namespace's `podsweeper.dev/mode: live` is drawn too: without the allowance it lifts nothing.
    scenario=scenarios(settings_strategy(dry_run=st.just(True), live_allowed=st.just(False))),
    rng=st.randoms(use_true_random=False),
)
@example(scenario=known_bug_4(dry_run=True), rng=random.Random(0))
def test_dry_run_replay_deletes_nothing(scenario, rng: random.Random):
    replay_and_check(scenario, interleave(with_duplicates(scenario.events, rng), rng), "dry run")


# -- harness 2: a live world, notified late, twice or never ----------------------------------


class ApiServer(SimulatedCluster):
    """The world as an API server shows it: a job that is not there is a 404 (gone), never
    unknown as in a replay. Everything else is the simulated cluster's own (its LISTs, its
    deletes with preconditions), so a bug there shows in this harness too."""

    node_states: dict = {}  # the scenario's nodes: name -> Ready / NotReady / Unknown / gone

    def knows_job(self, ref):
        return True

    def observe(self, verb, obj, version=None):
        if isinstance(obj, Namespace):  # the namespace's annotations: its policy from now on
            self.observe_namespace(verb, obj)
            return None
        return super().observe(verb, obj, version)

    def get_node(self, name):
        state = self.node_states.get(name, "Ready")
        if state == "gone":
            return None
        return Node(
            name, {"Ready": NodeReady.TRUE, "NotReady": NodeReady.FALSE}.get(state, NodeReady.UNKNOWN)
        )


def settings_from_environment(chosen: dict) -> Settings:
    """The generated settings as the served function gets them: PODSWEEPER_* variables."""
    env = {
        f"PODSWEEPER_{name.upper()}": (str(value).lower() if isinstance(value, bool) else str(value))
        for name, value in chosen.items()
        if value is not None
    }
    with mock.patch.dict(os.environ, env):
        return load_settings()


def deliver(pipeline: Pipeline, raw: dict, now):
    attributes = {k: v for k, v in raw.items() if k not in ("data", "data_base64")}
    return pipeline.handle(parse_event(attributes, json_bytes(raw["data"]) if "data" in raw else None), now)


@reproducible
@settings(max_examples=EXAMPLES, **PROPERTY)
@given(
    scenario=scenarios(settings_strategy(max_deletes=st.sampled_from([1, 2, 1000]))),
    rng=st.randoms(use_true_random=False),
)
@example(scenario=known_bug_4(), rng=random.Random(1))  # this plan leaves the Job to the sweep
def test_live_notifications_late_duplicated_or_lost_then_sweep(scenario, rng: random.Random):
    events = scenario.events
    config = settings_from_environment(scenario.settings)
    truth, world = ApiServer(), World(scenario.settings, live=True, nodes=scenario.nodes)
    truth.node_states = scenario.nodes
    pipeline = Pipeline(truth, config)
    # Delivery plan: each change is notified 0-3 times (0 = lost), each copy 0-6 steps late.
    schedule: dict[int, list[tuple[int, str]]] = {}
    for index, e in enumerate(events):
        copies = rng.choices([0, 1, 2, 3], weights=[3, 10, 3, 1])[0]
        if unwatched(e.spec):
            copies = 0  # a launcher Job: the shipped source does not watch it; the API server has it
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
                assert_sweep_decided(outcome, expected, now, config.max_deletes_per_event)
            check_outcome(world, outcome, e, now, mode=mode)
            figures.add("property: live notifications delivered")
    # The backstop: PingSource ticks until one deletes nothing (the per-event cap may need several).
    budget = scenario.settings["max_deletes_per_event"]
    for ping in final_pings(scenario, 1 + (len(world.pods) + len(world.workloads)) // budget + 1):
        expected = sweep_names(world, ping.time)
        outcome = deliver(pipeline, render(ping), ping.time)
        assert_sweep_decided(outcome, expected, ping.time, config.max_deletes_per_event)
        swept = check_outcome(world, outcome, ping, ping.time)
        figures.add("property: pods the final sweeps had to delete (live)", swept)
        if swept == 0:
            break
    assert_nothing_left(world, ping.time)
    assert_evidence_truthful(truth.evidence, world.deleted, dry_run=False)
    assert set(world.pods) == set(truth.pods)
    assert set(world.workloads) == set(truth.intermediates)
    figures.add("property: live scenarios generated")
    figures.add("property: live world changes", len(events))


def nominations(sweeper: Sweeper, cluster, now, deadline) -> tuple[dict, set, bool]:
    """One sweep's candidates ({job key: both label sets?}), its stuck pods, whether its round
    ended; its passes run and what they decide is held (a dry run no namespace may lift)."""
    run = SweepRun()
    sweeper.sweep(cluster, now, deadline, Ledger("nominations"), run)
    return {key: job.all_label_sets for key, job in run.candidates.items()}, set(run.stuck), run.round_done


@reproducible
@settings(max_examples=max(EXAMPLES // 2, 20), **PROPERTY)
@given(
    scenario=scenarios(settings_strategy(dry_run=st.just(True))),
    page_size=st.integers(1, 3),
)
def test_a_sweep_in_rounds_nominates_what_one_full_listing_does(scenario, page_size):
    """A big cluster's sweep lists a page or a few per tick, going on from where the last tick
    stopped: over one round it nominates exactly the jobs (with the same label sets) and stuck
    pods that one sweep listing everything at once nominates, on the same world and clock."""
    config = settings_from_environment(scenario.settings)
    world = ApiServer()
    world.node_states = scenario.nodes
    for e in scenario.events:
        if e.spec is not None:
            world.observe(e.verb, _parsed(e))
    now = scenario.end
    passes = Passes(config, NamespacePolicies(config))
    held = Actor(config, passes.policies, hold=True)
    whole, whole_stuck, done = nominations(Sweeper(config, passes, held), world, now, None)
    assert done
    world.page_size = page_size
    ticks = iter(range(0, 10**9, 1000))  # every look at the clock: the listing's share is spent
    rounds = Sweeper(config, passes, held, clock=lambda: float(next(ticks)))
    union: dict = {}
    union_stuck: set = set()
    taken = 0
    # One tick per page at most: the pods', and the jobs' (each kind's index is read a page a
    # tick when the clock says the share is spent at every look).
    for _ in range(1 + len(world.pods) + len(world.jobs) + len(config.namespace_set)):
        taken += 1
        nominated, stuck, done = nominations(rounds, world, now, time.monotonic() + 3600)
        for key, both in nominated.items():
            union[key] = union.get(key, False) or both
        union_stuck |= stuck
        if done:
            break
    assert done, "the round did not end within one tick per page of pods or jobs"
    assert union == whole
    assert union_stuck == whole_stuck
    figures.add("property: sweep rounds compared with one full listing")
    figures.add("property: sweep round ticks", taken)


def _parsed(e: WorldEvent):
    """The world change as the simulated API server stores it."""
    from tests.fixtures.parse import parse_intermediate, parse_job, parse_pod
    from tests.replay.model_world import render_object

    obj = render_object(e.spec)
    if isinstance(e.spec, NamespaceSpec):
        return decode_namespace(json.dumps(obj))
    if isinstance(e.spec, (JobSpec, TrainJobSpec)):
        return parse_job(obj)
    return parse_intermediate(obj) if isinstance(e.spec, IntermediateSpec) else parse_pod(obj)


# -- harness 3: lies among the truth -----------------------------------------------------------


class RecordingApiServer(RecordingCluster, ApiServer):
    """The live harness's API server, recording every write and log read (tests/replay/liars.py)."""


def pod_job(spec) -> tuple[str, str] | None:
    """(namespace, name) of the job whose evidence store may keep this pod's runs: a launcher's
    MPIJob, a chain pod's TrainJob (its JobSet's name), or the job the pod belongs to."""
    if isinstance(spec, ChainPodSpec):
        name = spec.label(JOBSET_NAME)
        return (spec.namespace, name) if name else None
    if not isinstance(spec, PodSpec):
        return None
    launcher = launcher_of(spec)
    if launcher is not None:
        return (spec.namespace, launcher)
    owner = belongs(spec)
    return (spec.namespace, owner[1]) if owner is not None else None


WARNINGS_ON_ADD = ("no-backoff-limit", UNBOUNDED_JOBSET_RESTARTS)


def check_lie_outcome(world: World, outcome, lie: Lie, now) -> None:
    """Every decision a lie led to is one the world names now (it was decided on the fresh
    state, the lie only made podsweeper look): judged as any event's by check_outcome, as if
    about the object the lie names; the new-object warnings, which only an add asks for, are
    judged here against the world (never required: a liar's add is no new object)."""
    warnings = [a for a in outcome.applied if a.decision.rule.value in WARNINGS_ON_ADD]
    for item in warnings:
        d = item.decision
        rule, action = d.rule.value, d.action.value
        if rule == UNBOUNDED_JOBSET_RESTARTS:
            named = world.chain_named(d.namespace, d.job.name, now, jobset_added=True)
            assert named.get((TRAINJOB, d.uid)) == (rule, action), (lie, d, named)
        else:
            job = world.jobs.get((d.kind, d.namespace, d.name))
            assert job is not None and job.uid == d.uid, f"{lie}: warning about a job not in the world: {d}"
            assert world.warns_no_backoff_limit(job) is not False, (
                f"{lie}: no-backoff-limit not named for {job}"
            )
            assert (action == "skip") == is_true(job.skip), (lie, action, job.skip)
        assert lie.verb == "add", f"{lie}: {rule} warned on a {lie.verb}"
    rest = dataclasses.replace(outcome, applied=[a for a in outcome.applied if a not in warnings])
    check_outcome(world, rest, WorldEvent("update", lie.spec, now, -1), now, mode=lie.mode)


@reproducible
@settings(max_examples=max(EXAMPLES // 4, 25), **PROPERTY)
@given(
    # Without the story of a JobSet a person deletes from a running TrainJob (Trainer makes it
    # again): for 60 s after that, a lie that the job failed just before is believed, and the
    # job may be suspended (docs/security.md, "What is not covered"): a known hole, not judged
    # here as if it were closed. The other property tests draw that story.
    scenario=scenarios(settings_strategy(max_deletes=st.sampled_from([2, 1000])), successors=False),
    rng=st.randoms(use_true_random=False),
)
def test_lies_among_the_truth_act_and_record_only_what_the_world_names(scenario, rng: random.Random):
    """Issue "Trust against a liar": any pod may POST to the function, so a payload is a claim.
    Each world change is notified at once (Resource or Reference mode) and, after it, lies
    about what the world holds or held (tests/replay/liars.py: finishes, failures, owners,
    uids, restart counts, container states, pods named after others, deletes of what exists),
    never applied to the world. Every decision, truthful or lied to, must be what the rules
    name for the world at that moment (oracle.py, as the live harness judges); every log read
    must be of a container of a pod that exists and shows a failed run; every evidence record
    must be of a run some pod showed, in the store of that pod's job; a finish mark only for a
    TrainJob that finished. The final sweeps then leave nothing the rules name."""
    config = settings_from_environment(scenario.settings)
    truth, world = RecordingApiServer(), World(scenario.settings, live=True, nodes=scenario.nodes)
    truth.node_states = scenario.nodes
    pipeline = Pipeline(truth, config)
    judge, shown, told = RecordJudge(), [], 0
    for e in scenario.events:
        now = e.time
        if e.spec is not None:
            seen = world.observe(e.verb, e.spec)
            assert (truth.observe(e.verb, _parsed(e)) is None) == seen
            judge.saw(e.spec, pod_job(e.spec))
            shown.append(e.spec)
        if not unwatched(e.spec):
            mode = "ref" if e.spec is not None and rng.random() < 0.25 else "resource"
            expected = sweep_names(world, now) if e.spec is None else None
            since = len(truth.effects)
            outcome = deliver(pipeline, render(e, mode), now)
            # Records and log reads first: judging the decisions applies their deletes to the world.
            judge.judge(truth, world, since, f"{e.verb} of {e.spec} ({mode} mode)")
            if expected is not None:
                assert_sweep_decided(outcome, expected, now, config.max_deletes_per_event)
            check_outcome(world, outcome, e, now, mode=mode)
        for lie in lie_specs(shown, rng, now) if shown else ():
            told += 1
            since = len(truth.effects)
            raw = render(WorldEvent(lie.verb, lie.spec, now, e.seq), lie.mode, event_id=f"lie-{told}")
            outcome = deliver(pipeline, raw, now)
            judge.judge(truth, world, since, f"lie {lie}")
            check_lie_outcome(world, outcome, lie, now)
            figures.add(f"property: lies told ({lie.kind})")
    budget = scenario.settings["max_deletes_per_event"]
    for ping in final_pings(scenario, 1 + (len(world.pods) + len(world.workloads)) // budget + 1):
        expected = sweep_names(world, ping.time)
        since = len(truth.effects)
        outcome = deliver(pipeline, render(ping), ping.time)
        judge.judge(truth, world, since, "final sweep")
        assert_sweep_decided(outcome, expected, ping.time, config.max_deletes_per_event)
        swept = check_outcome(world, outcome, ping, ping.time)
        if swept == 0:
            break
    assert_nothing_left(world, ping.time)
    assert_evidence_truthful(truth.evidence, world.deleted, dry_run=False)
    figures.add("property: liar scenarios generated")
    figures.add("property: lies told", told)


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
    "crash-loop / suspend",
    "crash-loop / skip",
    "no-backoff-limit / warn",
    "no-backoff-limit / skip",
)
# Trainer v2 (model_trainer.py): what the generator draws, told from the specs.
V2_CASES = (
    [
        f"v2 event: {kind} {verb}"
        for kind in (TRAINJOB, JOBSET, BATCH_JOB, PODGROUP, "pod")
        for verb in ("add", "update", "delete")
    ]
    + [
        "PodGroup Running",
        "PodGroup Inqueue",
        "PodGroup Pending",
        "PodGroup Completed",
        "PodGroup controlled by its TrainJob",
        "PodGroup controlled by an earlier uid of its TrainJob",
        "PodGroup controlled by another kind",
        "PodGroup without a controller",
        "PodGroup terminating",
    ]
    + [
        "TrainJob running (not finished)",
        "TrainJob finished (Complete True)",
        "TrainJob finished (Failed True)",
        "TrainJob with a finished condition not True",
        "TrainJob created before the stream",
        "TrainJob with activeDeadlineSeconds",
        "TrainJob opted out (true)",
        "TrainJob opted out (True)",
        "TrainJob opted out (TRUE)",
        "TrainJob annotation that is no opt-out (false or empty)",
        "TrainJob suspended",
        "TrainJob queued by Kueue",
        "TrainJob managedBy Trainer",
        "TrainJob managedBy another controller",
        "TrainJob re-created with another uid",
        "TrainJob re-created after a finished one of its name",
        "JobSet made again for a running TrainJob named after a finished one",
        "v2: JobSet or Job of a TrainJob the stream never shows",
        "JobSet controlled by its TrainJob",
        "JobSet controlled by its TrainJob, without the mark",
        "JobSet created after its TrainJob finished",
        "JobSet controlled by an earlier uid of its TrainJob",
        "JobSet still controlled by a deleted TrainJob",
        "JobSet without a controller, marked",
        "plain JobSet (no controller, no mark)",
        "JobSet controlled by another kind, marked",
        "JobSet with an unbounded-restart failurePolicy",
        "JobSet with a bounded failurePolicy",
        "JobSet terminating",
        "JobSet opted out",
        "JobSet created before the stream",
        "batch Job controlled by its JobSet",
        "batch Job controlled by its JobSet, without the mark",
        "batch Job controlled by an earlier JobSet uid",
        "batch Job controlled by a gone JobSet",
        "batch Job without a controller, marked",
        "plain batch Job (jobset-name label, no mark, no controller)",
        "batch Job controlled by a CronJob, marked",
        "batch Job terminating",
        "batch Job opted out",
        "batch Job created before the stream",
        "v2 pod terminating",
        "v2 pod without a controller",
        "orphan JobSet younger than PODSWEEPER_ORPHAN_GRACE_SECONDS",
        "orphan Job younger than PODSWEEPER_ORPHAN_GRACE_SECONDS",
        "finished TrainJob's own JobSet with active pods left to the JobSet controller",
        "the rules name a batch Job of a terminating JobSet",
    ]
    + [f"v2 pod phase {phase}" for phase in ("Pending", "Running", "Succeeded", "Failed")]
)
V2_RULES_NAMED = (
    "orphan / delete (JobSet)",
    "orphan / skip (JobSet)",
    "orphan / delete (Job)",
    "orphan / skip (Job)",
    "finished-trainjob-restarted / suspend (TrainJob)",
    "finished-trainjob-restarted / warn (TrainJob)",
    "finished-trainjob-restarted / skip (TrainJob)",
    "unbounded-jobset-restarts / warn (TrainJob)",
    "unbounded-jobset-restarts / skip (TrainJob)",
    "deadline-exceeded-jobset-running / delete (JobSet)",
    "deadline-exceeded-jobset-running / skip (JobSet)",
    "failed-trainjob-podgroup / warn (TrainJob)",
    "failed-trainjob-podgroup / skip (TrainJob)",
)
# (finished-trainjob-restarted / skip is the rarest: an opted-out TrainJob restarted after a
# finish of its own; ~6 of 1,000 once records of earlier same-named jobs stopped counting)
# MPIJob v2beta1 launcher chains (model_mpi.py), told from the specs.
LAUNCHER_CASES = (
    [
        f"launcher Job controlled by {whose}"
        for whose in ("its MPIJob", "nothing", "another MPIJob uid", "another kind")
    ]
    + [f"launcher Job {state}" for state in ("active", "Complete", "Failed")]
    + [f"launcher pod phase {phase}" for phase in ("Pending", "Running", "Succeeded", "Failed")]
    + ["launcher pod terminating", "launcher pod opted out"]
    + [
        f"launcher pod: the rules name {named}"
        for named in (
            "finished-job-active-pod / delete",
            "clean-pod-policy-all / delete",
        )
    ]
    + ["launcher pod: opted out of a rule the rules name"]
    + [
        "launcher pod left alone: its Job still runs",
        "launcher pod left alone: its Job is not the MPIJob's",
        "launcher pod of a deleted MPIJob (never an orphan)",
        "MPIJob v2beta1 Failed without completionTime",
        "MPIJob v2beta1 settled after Failed without completionTime",
        "MPIJob queued by Kueue",
        "Failed MPIJob without completionTime within the operator grace",
    ]
    + [f"the rules name failed-mpijob-running / {action}" for action in ("suspend", "warn", "skip")]
)
V2_NAMED_AT_LEAST = 5  # scenarios (of COVERAGE_EXAMPLES) in which each v2 named case occurs
# A pod the rules would name but for the operator grace (cleanPodPolicy Running/All, the job
# finished less than PODSWEEPER_OPERATOR_GRACE_SECONDS ago): the seeded bug that ignores the
# grace is caught only where this occurs, so it must be common, not merely reached.
LEFT_TO_THE_OPERATOR = "finished job's pod left to its operator's own cleanup (within the operator grace)"
# Kueue's safe-to-forcefully-delete on a stuck pod: "true" waits Kueue's turn and the grace,
# "false" is never force-deleted (a sweep that would have taken the pod without it).
SWEPT_IN_KUEUES_TURN = "stuck pod safe-to-forcefully-delete, swept within Kueue's turn: kept"
NOT_SAFE_KEPT = "stuck pod not safe-to-forcefully-delete on a lost node: kept"
LEFT_TO_THE_OPERATOR_AT_LEAST = 15
NAMESPACE_KNOBS = (
    "podsweeper.dev/mode",
    "podsweeper.dev/crashloop-action",
    "podsweeper.dev/orphan-grace-seconds",
    "podsweeper.dev/operator-grace-seconds",
    "podsweeper.dev/trainjob-ttl-seconds",
)
# Rule expired-trainjob (opt-in, model_ttl.py), told at the final sweep (3 h after each event):
# a finished TrainJob its TTL names, and one kept for each reason the rule keeps one.
EXPIRED_DELETED = "expired TrainJob deleted (its TTL passed by the final sweep)"
TTL_KEPT = (
    "within its TTL",
    "its annotation off",
    "its annotation neither off nor seconds",
    "its namespace's TTL off",
    "suspended",
    "managedBy another controller",
    "owned by another object",
    "ttlSecondsAfterFinished set",
    "JobSet made after its finish",
    "a pod of its name active",
)
TTL_CASES = (
    [EXPIRED_DELETED, "settings: PODSWEEPER_TRAINJOB_TTL_SECONDS set"]
    + [f"expired-looking TrainJob kept: {why}" for why in TTL_KEPT]
    + [
        f"TrainJob TTL annotation {what}"
        for what in ("shortens it", "raised to the floor", "longer: ignored")
    ]
    + ["TrainJob TTL annotation neither off nor seconds"]
    + [f"the rules name {EXPIRED_TRAINJOB} / {action} (TrainJob)" for action in ("delete", "skip")]
)


EVERY_CASE = frozenset(
    [f"job kind {kind}" for kind in world_tables.KINDS]
    # Each namespace annotation, used (within the bounds) and refused (a bad value, or bolder
    # than the global configuration allows), and the modes in force where pods live.
    + [f"namespace annotation {key} {verdict}" for key in NAMESPACE_KNOBS for verdict in ("used", "refused")]
    + ["namespace annotation podsweeper.dev/mdoe refused"]
    + [f"pod in a namespace whose policy is {mode}" for mode in ("off", "dry-run", "live")]
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
        "job opted out (TRUE)",
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
        "pod opted out (TRUE)",
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
        "settings: PODSWEEPER_CRASHLOOP_ACTION=suspend",
        "settings: PODSWEEPER_NAMESPACES set",
        "settings: PODSWEEPER_STUCK_TERMINATING_SECONDS set",
        "the rules name stuck-terminating / force-delete",
        "the rules name stuck-terminating / skip",
        "terminating pod on a Ready node",
        "terminating pod on a NotReady node",
        "terminating pod on a Unknown node",
        "terminating pod on a gone node",
        SWEPT_IN_KUEUES_TURN,
        NOT_SAFE_KEPT,
        "settings: nothing excluded",
        "finished job's active pod kept because PODSWEEPER_SWEEP_ACTIVE_PODS=false",
        LEFT_TO_THE_OPERATOR,
    ]
    + [f"the rules name {named}" for named in RULES_NAMED]
    + list(V2_CASES)
    + [f"the rules name {named}" for named in V2_RULES_NAMED]
    + list(LAUNCHER_CASES)
    + list(TTL_CASES)
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


def namespace_policy_cases(spec: NamespaceSpec, world: World) -> set[str]:
    """Which of a Namespace's annotations the oracle uses, and which it refuses."""
    cases = set()
    in_force = world.in_force(spec.name)
    names = {
        "podsweeper.dev/mode": "mode",
        "podsweeper.dev/crashloop-action": "crashloop_action",
        "podsweeper.dev/orphan-grace-seconds": "orphan_grace_seconds",
        "podsweeper.dev/operator-grace-seconds": "operator_grace_seconds",
        "podsweeper.dev/trainjob-ttl-seconds": "trainjob_ttl_seconds",
    }
    for key, value in spec.annotations:
        used = key in names and str(in_force[names[key]]) == value.strip()
        if key == "podsweeper.dev/trainjob-ttl-seconds" and value.strip() == "off":
            used = True  # always allowed: 0, off
        cases.add(f"namespace annotation {key} {'used' if used else 'refused'}")
    return cases


def generated_cases(scenario: Scenario) -> set[str]:
    """Every case of EVERY_CASE this scenario contains (and no name outside it)."""
    cases: set[str] = set()
    chosen = scenario.settings
    world = World(chosen, live=False)
    if not chosen["sweep_active_pods"]:
        cases.add("settings: PODSWEEPER_SWEEP_ACTIVE_PODS=false")
    if chosen["crashloop_action"] != "warn":
        cases.add(f"settings: PODSWEEPER_CRASHLOOP_ACTION={chosen['crashloop_action']}")
    if chosen["namespaces"]:
        cases.add("settings: PODSWEEPER_NAMESPACES set")
    if chosen["stuck_terminating_seconds"] is not None:
        cases.add("settings: PODSWEEPER_STUCK_TERMINATING_SECONDS set")
    if chosen.get("trainjob_ttl_seconds"):
        cases.add("settings: PODSWEEPER_TRAINJOB_TTL_SECONDS set")
    live = World(chosen, live=True, nodes=scenario.nodes)  # nodes exist only on a live cluster
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
    without_grace = World({**chosen, "orphan_grace_seconds": 0, "operator_grace_seconds": 0}, live=False)
    v2_history: dict[str, dict] = {"uids": {}, "finished": set(), "shown": set()}
    for e in scenario.events:
        spec = e.spec
        if spec is None:
            cases.add("PingSource tick within the stream")
            for pod in live.pods.values():
                without = dataclasses.replace(pod, kueue_safe=None)
                waits = (
                    live.named_stuck(pod, e.time) is None and live.named_stuck(without, e.time) is not None
                )
                if pod.kueue_safe == "true" and waits:
                    cases.add(SWEPT_IN_KUEUES_TURN)
            continue
        if isinstance(spec, NamespaceSpec):
            # Every world applies the namespace's policy: a world without it names pods the
            # policy turns off, and counts cases the function never meets.
            for each in (world, live, with_active_pods, without_grace):
                each.observe(e.verb, spec)
            cases |= namespace_policy_cases(spec, world)
            continue
        cases.add(f"event in namespace {spec.namespace}")
        if isinstance(spec, PodSpec) and world.annotations.get(spec.namespace):
            cases.add(f"pod in a namespace whose policy is {world.in_force(spec.namespace)['mode']}")
        if isinstance(spec, LauncherJobSpec) or (isinstance(spec, PodSpec) and launcher_of(spec)):
            cases |= launcher_event_cases(spec)
        elif isinstance(spec, (TrainJobSpec, IntermediateSpec, ChainPodSpec)):
            cases |= v2_event_cases(e, world, v2_history)
        elif isinstance(spec, JobSpec):
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
            if is_true(spec.skip):
                cases.add(f"job opted out ({spec.skip})")
            elif spec.skip is not None:
                cases.add("job annotation that is no opt-out (false or empty)")
            if e.verb == "delete":
                cases.add("job deleted")
            if unsettled(spec):
                cases.add("MPIJob v2beta1 Failed without completionTime")
            elif spec.key in world.jobs and unsettled(world.jobs[spec.key]) and finished(spec):
                cases.add("MPIJob v2beta1 settled after Failed without completionTime")
            if spec.queued:
                cases.add("MPIJob queued by Kueue")
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
            if is_true(spec.skip):
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
        live.observe(e.verb, spec)
        with_active_pods.observe(e.verb, spec)
        without_grace.observe(e.verb, spec)
        cases |= v2_named_cases(e, world, without_grace)
        if chosen.get("trainjob_ttl_seconds"):
            cases |= ttl_cases(world, e.time + AFTER_EVERY_GRACE)
        for pod in live.pods.values():
            stuck = live.named_stuck(pod, e.time + AFTER_EVERY_GRACE)  # what the final sweep meets
            if stuck is not None:
                cases.add(f"the rules name {stuck[0]} / {stuck[1]}")
            elif pod.terminating and pod.node is not None and labelled(pod):
                cases.add(f"terminating pod on a {live.nodes.get(pod.node, 'Ready')} node")
                without = dataclasses.replace(pod, kueue_safe=None)
                if pod.kueue_safe == "false" and live.named_stuck(without, e.time + AFTER_EVERY_GRACE):
                    cases.add(NOT_SAFE_KEPT)
        for pod in world.pods.values():
            named = world.named(pod, e.time)
            if named is not None:
                cases.add(f"the rules name {named[0]} / {named[1]}")
            elif with_active_pods.named(pod, e.time) == ("finished-job-active-pod", "delete"):
                cases.add("finished job's active pod kept because PODSWEEPER_SWEEP_ACTIVE_PODS=false")
            if named is None and without_grace.named(pod, e.time) is not None:
                job = world.job_of(pod)
                if isinstance(job, JobSpec) and finished(job) and world.left_to_operator(job, pod, e.time):
                    cases.add(LEFT_TO_THE_OPERATOR)
            if launcher_of(pod):
                cases |= launcher_named_cases(pod, named, world, e.time)
        for job in world.jobs.values():
            action = world.failed_running(job, e.time)
            if action is not None:
                cases.add(f"the rules name failed-mpijob-running / {action}")
            elif without_grace.failed_running(job, e.time) is not None:
                cases.add("Failed MPIJob without completionTime within the operator grace")
    if world.chain_lineages() - v2_history["shown"]:
        cases.add("v2: JobSet or Job of a TrainJob the stream never shows")
    return cases


def launcher_event_cases(spec) -> set[str]:
    """The MPIJob launcher cases one change shows: its batch Job's controller and state, its pod."""
    if isinstance(spec, LauncherJobSpec):
        owner = spec.owner
        whose = (
            "nothing"
            if owner is None
            else "another kind"
            if owner.kind != "MPIJob"
            else "its MPIJob"
            if owner.uid + "-launcher" == spec.uid
            else "another MPIJob uid"
        )
        return {f"launcher Job controlled by {whose}", f"launcher Job {spec.finished or 'active'}"}
    cases = {f"launcher pod phase {spec.phase}"}
    if spec.terminating:
        cases.add("launcher pod terminating")
    if is_true(spec.skip):
        cases.add("launcher pod opted out")
    return cases


def launcher_named_cases(pod: PodSpec, named, world: World, now) -> set[str]:
    """What the rules name for a launcher pod now, and the near misses: a pod the rules would
    name if its batch Job were the MPIJob's finished launcher, or its MPIJob still there."""
    if named is not None:
        return {
            f"launcher pod: the rules name {named[0]} / delete"
            if named[1] == "delete"
            else "launcher pod: opted out of a rule the rules name"
        }
    if pod.terminating or not world.allowed(pod.namespace):
        return set()
    if ("MPIJob", pod.namespace, launcher_of(pod)) in world.gone:
        return {"launcher pod of a deleted MPIJob (never an orphan)"}
    if world.named(pod, now, proven=False) is None:
        return set()
    link = world.workloads.get((BATCH_JOB, pod.namespace, launcher_of(pod) + "-launcher"))
    job = world.jobs[("MPIJob", pod.namespace, launcher_of(pod))]
    if link is not None and controlled_by(link, "MPIJob", job.uid) and link.finished is None:
        return {"launcher pod left alone: its Job still runs"}
    return {"launcher pod left alone: its Job is not the MPIJob's"}


def v2_event_cases(e: WorldEvent, world: World, history: dict) -> set[str]:
    """The Trainer v2 cases one event shows (judged against the world before it)."""
    spec = e.spec
    what = (
        TRAINJOB
        if isinstance(spec, TrainJobSpec)
        else spec.kind
        if isinstance(spec, IntermediateSpec)
        else "pod"
    )
    cases = {f"v2 event: {what} {e.verb}"}
    if isinstance(spec, TrainJobSpec):
        history["shown"].add((spec.namespace, spec.name))
        uids = history["uids"].setdefault((spec.namespace, spec.name), [])
        if spec.uid not in uids:
            if uids:
                cases.add("TrainJob re-created with another uid")
                if uids[-1] in history["finished"]:
                    cases.add("TrainJob re-created after a finished one of its name")
            uids.append(spec.uid)
        true = {t for t, s, _ in spec.conditions if s == "True"}
        for kind in ("Complete", "Failed"):
            if kind in true:
                cases.add(f"TrainJob finished ({kind} True)")
                history["finished"].add(spec.uid)
            elif kind in {t for t, _, _ in spec.conditions}:
                cases.add("TrainJob with a finished condition not True")
        if not true & {"Complete", "Failed"}:
            cases.add("TrainJob running (not finished)")
        if spec.created < world_tables.T0:
            cases.add("TrainJob created before the stream")
        if spec.active_deadline is not None:
            cases.add("TrainJob with activeDeadlineSeconds")
        if is_true(spec.skip):
            cases.add(f"TrainJob opted out ({spec.skip})")
        elif spec.skip is not None:
            cases.add("TrainJob annotation that is no opt-out (false or empty)")
        if spec.suspended:
            cases.add("TrainJob suspended")
        if spec.queued:
            cases.add("TrainJob queued by Kueue")
        if spec.managed_by is not None:
            own = spec.managed_by == "trainer.kubeflow.org/trainjob-controller"
            cases.add(f"TrainJob managedBy {'Trainer' if own else 'another controller'}")
    elif isinstance(spec, IntermediateSpec) and spec.kind == PODGROUP:
        owner, job = spec.owner, world.trainjobs.get((spec.namespace, spec.name))
        cases.add(f"PodGroup {spec.phase}")
        if owner is None:
            cases.add("PodGroup without a controller")
        elif owner.kind != TRAINJOB:
            cases.add("PodGroup controlled by another kind")
        elif job is not None and owner.uid != job.uid:
            cases.add("PodGroup controlled by an earlier uid of its TrainJob")
        elif job is not None:
            cases.add("PodGroup controlled by its TrainJob")
        if spec.terminating:
            cases.add("PodGroup terminating")
    elif isinstance(spec, IntermediateSpec):
        owner = spec.owner
        what = "JobSet" if spec.kind == JOBSET else "batch Job"
        if spec.kind == JOBSET:
            job = world.trainjobs.get((spec.namespace, spec.name))
            finished_at = (
                next((a for t, s, a in job.conditions if t in ("Complete", "Failed") and s == "True"), None)
                if job
                else None
            )
            if owner is None:
                cases.add(
                    "JobSet without a controller, marked"
                    if spec.template_marked
                    else "plain JobSet (no controller, no mark)"
                )
            elif owner.kind != TRAINJOB:
                cases.add("JobSet controlled by another kind, marked")
            elif job is not None and owner.uid == job.uid:
                cases.add(
                    "JobSet controlled by its TrainJob"
                    + ("" if spec.template_marked else ", without the mark")
                )
                if finished_at is not None and spec.created is not None and spec.created > finished_at:
                    cases.add("JobSet created after its TrainJob finished")
                earlier = history["uids"].get((spec.namespace, spec.name), [])[:-1]
                again = (spec.created - job.created).total_seconds() >= 2 if spec.created else False
                if finished_at is None and again and any(uid in history["finished"] for uid in earlier):
                    cases.add("JobSet made again for a running TrainJob named after a finished one")
            elif (spec.namespace, spec.name) in world.trainjobs_gone:
                cases.add("JobSet still controlled by a deleted TrainJob")
            if set(spec.failure_actions) & {
                "RestartJobSetAndIgnoreMaxRestarts",
                "RestartJobAndIgnoreMaxRestarts",
            }:
                cases.add("JobSet with an unbounded-restart failurePolicy")
            elif spec.failure_actions:
                cases.add("JobSet with a bounded failurePolicy")
        else:
            js = world.workloads.get((JOBSET, spec.namespace, spec.label(JOBSET_NAME) or ""))
            marked = spec.label("trainer.kubeflow.org/trainjob-ancestor-step") is not None
            if owner is None:
                cases.add(
                    "batch Job without a controller, marked"
                    if marked
                    else "plain batch Job (jobset-name label, no mark, no controller)"
                )
            elif owner.kind == "CronJob":
                cases.add("batch Job controlled by a CronJob, marked" if marked else "unclassified batch Job")
            elif js is not None and owner.uid == js.uid:
                cases.add("batch Job controlled by its JobSet" + ("" if marked else ", without the mark"))
            elif js is not None:
                cases.add("batch Job controlled by an earlier JobSet uid")
            else:
                cases.add("batch Job controlled by a gone JobSet")
        if spec.terminating:
            cases.add(f"{what} terminating")
        if is_true(spec.skip):
            cases.add(f"{what} opted out")
        if spec.created is not None and spec.created < world_tables.T0:
            cases.add(f"{what} created before the stream")
    else:
        cases.add(f"v2 pod phase {spec.phase}")
        if spec.terminating:
            cases.add("v2 pod terminating")
        if spec.owner is None:
            cases.add("v2 pod without a controller")
    return cases


def v2_named_cases(e: WorldEvent, world: World, without_grace: World) -> set[str]:
    """What the Trainer v2 rules name after this event, and the near misses."""
    cases = set()
    added = e.verb == "add" and isinstance(e.spec, IntermediateSpec) and e.spec.kind == JOBSET
    for namespace, name in world.chain_lineages():
        named = world.chain_named(namespace, name, e.time, jobset_added=added)
        js = world.workloads.get((JOBSET, namespace, name))
        for (kind, uid), (rule, action) in named.items():
            cases.add(f"the rules name {rule} / {action} ({kind})")
            job = next((w for w in world.workloads.values() if w.uid == uid), None)
            if (
                kind == BATCH_JOB
                and js is not None
                and js.terminating
                and job.owner
                and job.owner.uid == js.uid
            ):
                cases.add("the rules name a batch Job of a terminating JobSet")
        podgroup = world.podgroup_named(namespace, name, e.time)
        if podgroup is not None:
            cases.add(f"the rules name {FAILED_TRAINJOB_PODGROUP} / {podgroup} (TrainJob)")
        for key, (rule, _) in without_grace.chain_named(namespace, name, e.time).items():
            if rule == "orphan" and key not in named:
                cases.add(f"orphan {key[0]} younger than PODSWEEPER_ORPHAN_GRACE_SECONDS")
        job = world.trainjobs.get((namespace, name))
        owner = js.owner if js is not None else None
        if job is not None and owner is not None and owner.kind == TRAINJOB and owner.uid != job.uid:
            cases.add("JobSet controlled by an earlier uid of its TrainJob")
        own = world.own_jobset(job, namespace, name) if job is not None else None
        if (
            own is not None
            and (TRAINJOB, job.uid) not in named
            and (JOBSET, own.uid) not in named
            and any(s == "True" and t in ("Complete", "Failed") for t, s, _ in job.conditions)
        ):
            active = [
                p
                for p in world.pods.values()
                if p.label("jobset.sigs.k8s.io/jobset-uid") == own.uid and p.phase in ("Pending", "Running")
            ]
            if active:
                cases.add("finished TrainJob's own JobSet with active pods left to the JobSet controller")
    return cases


def ttl_cases(world: World, now) -> set[str]:
    """What rule expired-trainjob names at `now` (the final sweep's time), and why it keeps
    each finished TrainJob it does not name."""
    cases = set()
    for job in world.trainjobs.values():
        finished_at = trainjob_finished_at(job)
        if finished_at is None or not world.allowed(job.namespace):
            continue
        in_force = world.in_force(job.namespace)
        ttl, asked = world.trainjob_ttl(job), (job.ttl_asked or "").strip()
        if in_force["trainjob_ttl_seconds"] > 0 and asked and asked.lower() != "off":
            if not (asked.isascii() and asked.isdigit() and len(asked) <= 9):
                cases.add("TrainJob TTL annotation neither off nor seconds")
            elif int(asked) >= in_force["trainjob_ttl_seconds"]:
                cases.add("TrainJob TTL annotation longer: ignored")
            else:
                if int(asked) < in_force["trainjob_ttl_min_seconds"]:
                    cases.add("TrainJob TTL annotation raised to the floor")
                if ttl is not None and ttl < in_force["trainjob_ttl_seconds"]:
                    cases.add("TrainJob TTL annotation shortens it")
        named = world.chain_named(job.namespace, job.name, now).get((TRAINJOB, job.uid))
        if named is not None and named[0] == EXPIRED_TRAINJOB:
            cases.add(f"the rules name {EXPIRED_TRAINJOB} / {named[1]} (TrainJob)")
            if named[1] == "delete":
                cases.add(EXPIRED_DELETED)
            continue
        # What keeps it whatever its TTL, and its TTL (off, or not passed yet): each that holds.
        if (why := world.ttl_kept(job, now)) is not None:
            cases.add(f"expired-looking TrainJob kept: {why}")
        if ttl is None:
            unclear = in_force["trainjob_ttl_seconds"] > 0 and asked.lower() != "off"
            off = (
                "its annotation neither off nor seconds"
                if unclear
                else "its annotation off"
                if in_force["trainjob_ttl_seconds"] > 0
                else "its namespace's TTL off"
            )
            cases.add(f"expired-looking TrainJob kept: {off}")
        elif (now - finished_at).total_seconds() < ttl:
            cases.add("expired-looking TrainJob kept: within its TTL")
    return cases


def test_generator_reaches_every_case():
    """Not a property of the function: every case the generator can draw occurs in the streams
    (counts in the figures, "generated: ..."); a case the streams never reach fails by name."""
    seen: Counter = Counter()

    @settings(max_examples=COVERAGE_EXAMPLES, **FIXED)
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
    rare = {named: seen[f"the rules name {named}"] for named in V2_RULES_NAMED}
    rare = {named: count for named, count in rare.items() if count < V2_NAMED_AT_LEAST}
    assert not rare, f"Trainer v2 cases named in fewer than {V2_NAMED_AT_LEAST} scenarios: {rare}"
    left = seen[LEFT_TO_THE_OPERATOR]
    assert left >= LEFT_TO_THE_OPERATOR_AT_LEAST, f"{LEFT_TO_THE_OPERATOR}: in {left} scenarios only"
    figures.add("generated: cases required and reached", len(EVERY_CASE))


# -- the disagreements these tests found, fixed: each minimal stream kept ----------------------
#
# Each was once a KNOWN BUG the harnesses tolerated; each is fixed, and its fix is a seeded bug
# of tests/mutants/catalogue.py (known-bug-1 ... known-bug-4) that the property tests above must
# catch without these examples' help.


def _replayed(stream: list[tuple[str, object, int]]) -> list[list[tuple[str, str, str, str]]]:
    """(rule, action, kind, uid) of each step's decisions, the stream replayed as the CLI does."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "stream.jsonl")
        with open(path, "w", encoding="utf-8") as out:
            for seq, (verb, spec, t) in enumerate(stream):
                out.write(json.dumps(render(WorldEvent(verb, spec, _at(t), seq))) + "\n")
        run = replay([path], Settings(dry_run=False), final_sweep=False)  # as the CLI replays
    return [
        [
            (a.decision.rule.value, a.decision.action.value, a.decision.kind, a.decision.uid)
            for a in s.outcome.applied
        ]
        for s in run.steps
    ]


def _live(*specs) -> Pipeline:
    truth = ApiServer()
    for spec in specs:
        truth.observe("add", _parsed(WorldEvent("add", spec, _at(0), 0)))
    return Pipeline(truth, Settings(dry_run=False))


def _decided(outcome) -> list[tuple[str, str, str, str]]:
    return [
        (a.decision.rule.value, a.decision.action.value, a.decision.kind, a.decision.name)
        for a in outcome.applied
    ]


def test_replay_sweep_finds_a_jobset_without_jobs():
    """Once KNOWN BUG 1 (SimulatedCluster.list_intermediates read the sweep's empty selector "" as
    label "", which no object has): the replay's sweep saw a JobSet only through a batch Job
    labelled with its name, so an orphaned JobSet whose Jobs were not there was never deleted
    by a replay, though the API server's sweep would delete it."""
    tj, js, _ = _v2_chain()
    steps = _replayed([("add", tj, 0), ("add", js, 0), ("delete", tj, 10), ("ping", None, 100)])
    assert steps[2] == []  # 10 s old at the TrainJob's delete: within the orphan grace (30 s)
    assert steps[3] == [("orphan", "delete", JOBSET, js.uid)]


def test_a_trainjob_add_decides_no_restart_warning_in_either_mode():
    """Once KNOWN BUG 2 (Pipeline._resolve_reference gave a Reference-mode job add
    check_backoff=True whatever its kind): a TrainJob's add warned unbounded-jobset-restarts,
    which the rules decide on a JobSet's add only; the same add in Resource mode decided nothing."""
    tj, js, _ = _v2_chain(failure_actions=("RestartJobSetAndIgnoreMaxRestarts",))
    pipeline = _live(tj, js)
    resource = deliver(pipeline, render(WorldEvent("add", tj, _at(5), 1), "resource"), _at(5))
    reference = deliver(pipeline, render(WorldEvent("add", tj, _at(6), 2), "ref"), _at(6))
    assert _decided(resource) == [] and _decided(reference) == []


def test_a_new_trainjob_is_not_judged_by_the_finish_of_an_earlier_one():
    """Once KNOWN BUG 3 (podsweeper's record of a TrainJob's finish was read by name only): a
    TrainJob created again under the name of a finished one was "restarted after its finish"
    as soon as its JobSet showed up, and suspended while it ran. The record now counts only for
    the uid it was written for (its ConfigMap's owner on a real cluster)."""
    done = (("Complete", "True", _at(50)),)
    old_tj, old_js, _ = _v2_chain(uid="old")
    new_tj, new_js, _ = _v2_chain(uid="new")
    finished = TrainJobSpec("team-a", "a", "old", _at(0), done, None, None)
    steps = _replayed(
        [
            ("add", old_tj, 0),
            ("add", old_js, 0),
            ("update", finished, 50),  # its pass keeps the record of the finish
            ("delete", finished, 90),
            ("delete", old_js, 91),
            ("add", new_tj, 100),
            ("add", new_js, 100),  # the new TrainJob's first JobSet
        ]
    )
    assert steps[-1] == []


def test_the_sweep_and_the_pass_agree_on_the_jobs_of_a_terminating_jobset():
    """Once KNOWN BUG 4 (Pipeline._sweep_chain counted a terminating JobSet as its Jobs'
    parent): the chain pass named the Jobs of a running TrainJob's terminating JobSet orphan,
    as the rules do, while every sweep skipped them; whichever way, the sweep and the pass
    must agree."""
    tj, js, job = _v2_chain(terminating=True)
    swept = _decided(deliver(_live(tj, js, job), render(WorldEvent("ping", None, _at(600), 1)), _at(600)))
    passed = _decided(
        deliver(_live(tj, js, job), render(WorldEvent("update", tj, _at(600), 1), "ref"), _at(600))
    )
    assert passed == [("orphan", "delete", BATCH_JOB, job.name)]  # what the rules name
    assert swept == passed
