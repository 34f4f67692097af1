"""Rule expired-trainjob (opt-in): a finished TrainJob past its retention is deleted itself.

The table decides one chain as a fresh read found it (podsweeper.engine.decide_chain, the door
included); the acting tests carry the decision out on the simulated cluster (podsweeper.actor:
its evidence copied apart first, a TrainJobExpired Event, the delete with its uid); the sweep
tests show the job nominated alone, with no JobSet left to list.
"""

from __future__ import annotations

import dataclasses

import pytest

from podsweeper.actor import Actor, Ledger
from podsweeper.cluster.simulated import SimulatedCluster
from podsweeper.config import Settings
from podsweeper.decisions import Action, Result, Rule, Target
from podsweeper.engine import decide_chain
from podsweeper.evidence import Dropped, NotKept
from podsweeper.lineage import Lineage
from podsweeper.model import FinishMark, Namespace, Verb
from podsweeper.namespaces import NamespacePolicies
from podsweeper.policy import Knob, effective, resolve
from podsweeper.rules import door
from podsweeper.rules.base import Context, Finding, Listed
from podsweeper.rules.expired_trainjob import SPEC, listed_expired, ttl_of
from tests.fixtures import trainer as v2
from tests.fixtures.builders import at, ping
from tests.fixtures.parse import parse_intermediate, parse_job, parse_pod
from tests.unit.test_lineage import decided, handle, world

RULE = Rule.EXPIRED_TRAINJOB
TTL, FLOOR, FIN = 3600, 600, 50  # the retention, its floor, the finish (seconds after T0)
PAST = FIN + TTL + 1
ON = {"trainjob_ttl_seconds": TTL, "trainjob_ttl_min_seconds": FLOOR, "exclude_namespaces": ""}
ASKED = "podsweeper.dev/ttl-seconds-after-finished"
RECORDS = [{"pod_uid": "earlier-pod", "container": "node", "exit_code": 1, "source": "observed"}]


def finished(kind: str = "Complete", *, spec: dict | None = None, ttl: str | None = None, **meta) -> dict:
    """The TrainJob `tj`, finished `kind` at FIN; `spec` merged into its spec, `ttl` its annotation."""
    if ttl is not None:
        meta["annotations"] = {**meta.get("annotations", {}), ASKED: ttl}
    tj = v2.trainjob(conditions=[("Created", at(0)), (kind, at(FIN))], **meta)
    tj["spec"].update(spec or {})
    return tj


def chain_of(tj: dict, *, jobset_at: int = 0, phase: str = "Succeeded", jobset: bool = True) -> list[dict]:
    """The TrainJob's JobSet (made at `jobset_at`), its batch Job and two pods in `phase`."""
    if not jobset:
        return [tj]
    js = v2.jobset(tj, created=at(jobset_at))
    batch = v2.batch_job(js)
    return [tj, js, batch, *(v2.pod(batch, i, phase=phase) for i in range(2))]


def lineage_of(objs: list[dict], mark: FinishMark | None = None) -> Lineage:
    job = parse_job(objs[0])
    links = [parse_intermediate(o) for o in objs[1:] if o["kind"] != "Pod"]
    pods = tuple(parse_pod(o) for o in objs if o["kind"] == "Pod")
    return Lineage(job.ref, job, links[0] if links else None, tuple(links[1:]), pods, mark)


def expired(lineage: Lineage, now: int, **settings):
    return [d for d in decide_chain(lineage, at(now), Settings(**{**ON, **settings})) if d.rule is RULE]


OPTIMIZER = {"apiVersion": "kubeflow.org/v1beta1", "kind": "OptimizationJob", "name": "hpo", "uid": "hpo-1"}
MULTIKUEUE = {"managedBy": "kueue.x-k8s.io/multikueue"}
TRAINERS_OWN = {"managedBy": "trainer.kubeflow.org/trainjob-controller"}
OWN_TTL = {"ttlSecondsAfterFinished": 60}
OTHER_MARK = FinishMark("Complete", at(FIN), "another-jobsets-uid")
DELETE, SKIP = Action.DELETE, Action.SKIP


@pytest.mark.parametrize(
    "case, tj, chain, mark, now, settings, expected",
    [
        ("Complete, past the TTL", finished(), {}, None, PAST, {}, DELETE),
        ("Failed, past the TTL", finished("Failed"), {"phase": "Failed"}, None, PAST, {}, DELETE),
        ("exactly at the TTL", finished(), {}, None, FIN + TTL, {}, DELETE),
        ("1 s before the TTL", finished(), {}, None, FIN + TTL - 1, {}, None),
        ("no JobSet left", finished(), {"jobset": False}, None, PAST, {}, DELETE),
        ("TTL 0: off", finished(), {}, None, PAST * 10, {"trainjob_ttl_seconds": 0}, None),
        ("not finished", v2.trainjob(conditions=[("Created", at(0))]), {}, None, PAST, {}, None),
        ("suspended", finished(spec={"suspend": True}), {}, None, PAST, {}, None),
        ("managedBy MultiKueue", finished(spec=MULTIKUEUE), {}, None, PAST, {}, None),
        ("managedBy Trainer's own value", finished(spec=TRAINERS_OWN), {}, None, PAST, {}, DELETE),
        ("owned by an OptimizationJob", finished(ownerReferences=[OPTIMIZER]), {}, None, PAST, {}, None),
        ("sets ttlSecondsAfterFinished", finished(spec=OWN_TTL), {}, None, PAST, {}, None),
        ("a live JobSet made after the finish", finished(), {"jobset_at": FIN + 5}, None, PAST, {}, None),
        ("the JobSet made in the finish's second", finished(), {"jobset_at": FIN}, None, PAST, {}, DELETE),
        ("a finish mark naming another JobSet", finished(), {}, OTHER_MARK, PAST, {}, None),
        ("a pod still running", finished(), {"phase": "Running"}, None, PAST, {}, None),
        ("a pod still pending", finished(), {"phase": "Pending"}, None, PAST, {}, None),
        ("the job's skip", finished(annotations={"podsweeper.dev/skip": "true"}), {}, None, PAST, {}, SKIP),
        ("outside PODSWEEPER_NAMESPACES", finished(), {}, None, PAST, {"namespaces": "elsewhere"}, None),
        ("excluded namespace", finished(), {}, None, PAST, {"exclude_namespaces": "team-a"}, None),
        ("annotation shortens", finished(ttl="1200"), {}, None, FIN + 1200, {}, DELETE),
        ("annotation shortens: not yet", finished(ttl="1200"), {}, None, FIN + 1199, {}, None),
        ("annotation below the floor", finished(ttl="5"), {}, None, FIN + FLOOR - 1, {}, None),
        ("annotation below the floor: at the floor", finished(ttl="5"), {}, None, FIN + FLOOR, {}, DELETE),
        ("annotation longer: ignored", finished(ttl="99999"), {}, None, FIN + TTL, {}, DELETE),
        ("annotation off", finished(ttl="off"), {}, None, PAST * 10, {}, None),
        ("annotation not understood: kept", finished(ttl="soon"), {}, None, PAST * 10, {}, None),
        ("annotation OFF in capitals", finished(ttl="OFF"), {}, None, PAST * 10, {}, None),
    ],
)
def test_expired_trainjob_table(case, tj, chain, mark, now, settings, expected):
    lineage = lineage_of(chain_of(tj, **chain), mark)
    decisions = expired(lineage, now, **settings)
    if expected is None:
        assert decisions == [], case
        return
    (decision,) = decisions
    assert (decision.action, decision.target, decision.kind) == (expected, Target.JOB, "TrainJob"), case
    assert (decision.name, decision.uid) == ("tj", tj["metadata"]["uid"]), case
    assert decision.job == lineage.job.ref, case


def test_expired_trainjob_says_why_and_spares_its_own_jobsets_mark():
    tj = finished("Failed")
    objs = chain_of(tj, phase="Failed")
    own = FinishMark("Failed", at(FIN), objs[1]["metadata"]["uid"])
    (decision,) = expired(lineage_of(objs, own), PAST)
    assert f"past its retention of {TTL}s" in decision.reason and "Failed" in decision.reason
    (shortened,) = expired(lineage_of(chain_of(finished(ttl="1200"))), PAST)
    assert "retention of 1200s" in shortened.reason


@pytest.mark.parametrize(
    "asked, global_ttl, expected",
    [
        (None, TTL, TTL),
        ("off", TTL, None),
        (" off ", TTL, None),
        ("1200", TTL, 1200),  # shorter
        ("5", TTL, FLOOR),  # shorter than the floor: clamped up to it
        ("0", TTL, FLOOR),
        (str(TTL), TTL, TTL),
        ("99999", TTL, TTL),  # longer: ignored
        ("Off", TTL, None),
        ("soon", TTL, None),  # not understood: kept (its owner asked for something)
        ("-5", TTL, None),
        ("１２００", TTL, None),  # not ASCII digits
        ("1" * 10, TTL, None),  # too many digits
        ("1200", 0, None),  # a job cannot turn the rule on
        (None, 0, None),
    ],
)
def test_expired_trainjob_ttl_of_the_annotation(asked, global_ttl, expected):
    job = parse_job(finished(ttl=asked))
    settings = Settings(trainjob_ttl_seconds=global_ttl, trainjob_ttl_min_seconds=FLOOR)
    assert ttl_of(job, settings)[0] == expected


KNOB = Knob.TRAINJOB_TTL.annotation


@pytest.mark.parametrize(
    "raw, global_ttl, expected, refused",
    [
        ("off", TTL, 0, False),
        ("off", 0, 0, False),  # off always
        ("1800", 0, 0, True),  # seconds only where the platform turned it on
        (str(FLOOR - 1), TTL, TTL, True),  # below the floor
        ("0", TTL, TTL, True),
        (str(FLOOR), TTL, FLOOR, False),
        ("1800", TTL, 1800, False),
        ("7200", TTL, 7200, False),  # a namespace may keep longer
        ("soon", TTL, TTL, True),
    ],
)
def test_expired_trainjob_namespace_knob(raw, global_ttl, expected, refused):
    settings = Settings(**{**ON, "trainjob_ttl_seconds": global_ttl})
    policy = resolve(settings, "team-a", {KNOB: raw})
    assert policy.trainjob_ttl_seconds == expected
    assert bool(policy.problems) == refused and (Knob.TRAINJOB_TTL in policy.from_namespace) != refused
    assert effective(settings, policy).trainjob_ttl_seconds == expected


def test_expired_trainjob_decides_with_its_namespaces_ttl():
    lineage = lineage_of(chain_of(finished()))
    settings = Settings(**ON)
    for raw, now, deletes in (
        ("1800", FIN + 1800, True),
        ("1800", FIN + 1799, False),
        ("off", PAST * 10, False),
    ):
        local = effective(settings, resolve(settings, "team-a", {KNOB: raw}))
        found = [d for d in decide_chain(lineage, at(now), local) if d.rule is RULE]
        assert [d.action for d in found] == ([DELETE] if deletes else []), (raw, now)
    # Through the pipeline: the Namespace's annotation read where the pass decides.
    cluster = world(*chain_of(finished()))
    cluster.observe_namespace(Verb.ADD, Namespace("team-a", "ns-a", {KNOB: "1800"}))
    assert decided(handle(cluster, ping(at(FIN + 1800)), now=FIN + 1800, **ON)) == [
        (RULE, DELETE, "TrainJob", "tj", Result.DELETED)
    ]


def test_expired_trainjob_the_door_refuses_a_job_delete_from_a_rule_that_does_not_name_it():
    job = parse_job(finished())
    finding = Finding(job, Action.DELETE, "gone")
    assert door.decide(SPEC, finding, job.ref, job, Settings(**ON)).action is DELETE
    unnamed = dataclasses.replace(SPEC, job_delete_reason=None)
    with pytest.raises(ValueError, match="would delete a training job"):
        door.decide(unnamed, finding, job.ref, job, Settings(**ON))


class Logged(SimulatedCluster):
    """The simulated cluster, each write logged in order; `retained_as` what a retain does:
    None as the cluster does, False a 409, or an exception to raise."""

    def __init__(self, retained_as=None):
        super().__init__()
        self.calls: list[str] = []
        self.retained_as = retained_as

    def retain_evidence(self, job, records, at):
        self.calls.append("retain")
        if isinstance(self.retained_as, Exception):
            raise self.retained_as
        return super().retain_evidence(job, records, at) if self.retained_as is None else self.retained_as

    def record_event(self, event):
        self.calls.append(f"event {event.reason}")
        return super().record_event(event)

    def delete_job(self, ref, uid, resource_version=""):
        self.calls.append("delete")
        return super().delete_job(ref, uid, resource_version)


def stored(objs: list[dict], cluster: SimulatedCluster, records=RECORDS) -> SimulatedCluster:
    world(*objs, cluster=cluster)
    ref = parse_job(objs[0]).ref
    assert cluster.write_evidence(ref, list(records), None)
    return cluster


def act(cluster: SimulatedCluster, objs: list[dict], now: int = PAST, **settings):
    """The rule's decision on the chain as built, carried out by the Actor."""
    chosen = Settings(**{**ON, "dry_run": False, **settings})
    decisions = [d for d in decide_chain(lineage_of(objs), at(now), chosen) if d.rule is RULE]
    ledger = Ledger("e-1")
    Actor(chosen, NamespacePolicies(chosen), concurrent_deletes=False).act(
        decisions, 10, cluster=cluster, now=at(now), ledger=ledger
    )
    return [(a.decision.action, a.result) for a in ledger.applied], ledger


def test_expired_trainjob_dry_run_deletes_nothing():
    objs = chain_of(finished())
    cluster = stored(objs, Logged())
    applied, _ = act(cluster, objs, dry_run=True)
    assert applied == [(DELETE, Result.DRY_RUN)]
    assert cluster.calls == [] and cluster.retained == {}
    assert len(cluster.jobs) == 1 and len(cluster.intermediates) == 2 and len(cluster.pods) == 2


def test_expired_trainjob_live_copies_its_evidence_writes_its_event_then_deletes_its_chain():
    objs = chain_of(finished())
    cluster = stored(objs, Logged())
    applied, ledger = act(cluster, objs)
    assert applied == [(DELETE, Result.DELETED)]
    assert cluster.calls == ["retain", "event TrainJobExpired", "delete"]
    assert cluster.jobs == {} and cluster.intermediates == {} and cluster.pods == {}  # the cascade
    assert cluster.evidence == {}  # its own store went with it
    uid = objs[0]["metadata"]["uid"]
    (copy,) = cluster.read_retained_evidence("team-a", "tj")
    assert (copy.uid, copy.records) == (uid, RECORDS)
    (event,) = [e.record for e in cluster.events.values()]
    assert (event.reason, event.involved.uid) == ("TrainJobExpired", uid)
    assert "podsweeper evidence team-a/tj" in event.message


@pytest.mark.parametrize(
    "retained_as", [False, NotKept(Dropped.REFUSED, "too large (422)")], ids=["conflict", "refused"]
)
def test_expired_trainjob_is_not_deleted_when_its_evidence_cannot_be_kept_apart(retained_as):
    objs = chain_of(finished())
    cluster = stored(objs, Logged(retained_as))
    applied, ledger = act(cluster, objs)
    assert applied == [(SKIP, None)]
    assert "could not be kept apart" in ledger.applied[0].decision.reason
    assert cluster.calls == ["retain"]  # no Event, no delete
    assert len(cluster.jobs) == 1 and len(cluster.intermediates) == 2 and len(cluster.pods) == 2


def test_expired_trainjob_with_nothing_kept_is_deleted_without_a_copy():
    objs = chain_of(finished())
    cluster = world(*objs, cluster=Logged(NotKept(Dropped.REFUSED, "never asked")))
    assert act(cluster, objs)[0] == [(DELETE, Result.DELETED)]
    assert cluster.jobs == {} and cluster.retained == {}


def test_expired_trainjob_recreated_under_the_name_is_a_conflict():
    objs = chain_of(finished())
    cluster = stored(objs, Logged())
    again = finished(generation="-2")
    cluster.observe(Verb.UPDATE, parse_job(again))
    applied, _ = act(cluster, objs)
    assert applied == [(DELETE, Result.CONFLICT)]
    assert cluster.jobs[("TrainJob", "team-a", "tj")].uid == again["metadata"]["uid"]
    assert len(cluster.intermediates) == 2 and len(cluster.pods) == 2


def test_expired_trainjob_changed_since_it_was_read_is_a_conflict():
    """Opted out (or changed at all) between the pass's read and its delete: the delete carries
    the resourceVersion decided on, so it is refused and the next pass decides again."""
    objs = chain_of(finished())
    cluster = stored(objs, Logged())
    opted = finished(annotations={"podsweeper.dev/skip": "true"}, resourceVersion="9")
    decisions = [
        d for d in decide_chain(lineage_of(objs), at(PAST), Settings(**ON, dry_run=False)) if d.rule is RULE
    ]
    cluster.observe(Verb.UPDATE, parse_job(opted))  # the opt-out lands after the decision
    ledger = Ledger("e-1")
    chosen = Settings(**ON, dry_run=False)
    Actor(chosen, NamespacePolicies(chosen), concurrent_deletes=False).act(
        decisions, 10, cluster=cluster, now=at(PAST), ledger=ledger
    )
    assert [(a.decision.action, a.result) for a in ledger.applied] == [(DELETE, Result.CONFLICT)]
    assert len(cluster.jobs) == 1 and len(cluster.intermediates) == 2 and len(cluster.pods) == 2


def test_expired_trainjob_pass_keeps_the_runs_its_chain_takes_in_the_copy():
    """A Failed job's failed pods go with it: their runs are kept in its store before the act,
    and so are in the copy made apart from it."""
    tj = finished("Failed")
    js = v2.jobset(tj)
    batch = v2.batch_job(js)
    pods = [v2.pod(batch, i, phase="Failed", exit_code=3) for i in range(2)]
    cluster = world(tj, js, batch, *pods)
    assert decided(handle(cluster, ping(at(PAST)), now=PAST, **ON)) == [
        (RULE, DELETE, "TrainJob", "tj", Result.DELETED)
    ]
    (copy,) = cluster.read_retained_evidence("team-a", "tj")
    assert sorted(r["pod_uid"] for r in copy.records) == sorted(p["metadata"]["uid"] for p in pods)
    assert cluster.jobs == {} and cluster.pods == {}


def test_expired_trainjob_is_nominated_by_the_sweep_with_no_jobset_left():
    tj = finished()
    job = parse_job(tj)
    assert listed_expired(Listed(job=job), Context(at(PAST), Settings(**ON)))
    assert not listed_expired(
        Listed(job=job), Context(at(PAST), Settings(**{**ON, "trainjob_ttl_seconds": 0}))
    )
    # The floor is the shortest any annotation may ask: listed from then on.
    assert listed_expired(Listed(job=job), Context(at(FIN + FLOOR), Settings(**ON)))
    assert not listed_expired(Listed(job=job), Context(at(FIN + FLOOR - 1), Settings(**ON)))
    cluster = world(tj)
    assert decided(handle(cluster, ping(at(PAST)), now=PAST, **ON)) == [
        (RULE, DELETE, "TrainJob", "tj", Result.DELETED)
    ]
    assert cluster.jobs == {}


def test_expired_trainjob_is_not_nominated_when_the_ttl_is_off():
    cluster = world(finished())
    outcome = handle(cluster, ping(at(PAST * 10)), now=PAST * 10, **{**ON, "trainjob_ttl_seconds": 0})
    assert outcome.applied == [] and len(cluster.jobs) == 1
    assert "swept 0 job(s)" in (outcome.note or "")
