"""Trainer v2 rules (podsweeper.lineage) through the pipeline, on the simulated cluster.

The objects are shaped like those the real Trainer v2.3.0 and JobSet v0.12.0 make
(tests/fixtures/trainer.py); each rule is checked both ways: it fires, and its look-alike
(a plain JobSet or batch Job, a young object, an opted-out one) is left alone.
"""

from __future__ import annotations

import pytest

from podsweeper import kinds
from podsweeper.cluster.simulated import SimulatedCluster
from podsweeper.config import Settings
from podsweeper.decisions import Action, Result, Rule
from podsweeper.engine import decide_chain as decide_lineage
from podsweeper.intake import parse_event
from podsweeper.lineage import Lineage
from podsweeper.model import Verb
from podsweeper.pipeline import Pipeline
from tests.fixtures import trainer as v2
from tests.fixtures.builders import at, event, ping, split, stamp
from tests.fixtures.parse import parse_intermediate, parse_job, parse_pod

FINISHED = [("Complete", at(50))]


def world(*objs, cluster: SimulatedCluster | None = None) -> SimulatedCluster:
    """A simulated cluster holding objs (added to `cluster` if given)."""
    cluster = cluster or SimulatedCluster()
    for obj in objs:
        if obj["kind"] == "Pod":
            cluster.observe(Verb.ADD, parse_pod(obj))
        elif obj["kind"] == "TrainJob":
            cluster.observe(Verb.ADD, parse_job(obj))
        else:
            cluster.observe(Verb.ADD, parse_intermediate(obj))
    return cluster


def gone(cluster: SimulatedCluster, tj: dict) -> None:
    """The stream showed the TrainJob's delete (the replay's way of knowing 404)."""
    cluster.observe(Verb.DELETE, parse_job(tj))


def handle(cluster, raw_event, now=600, **settings):
    return Pipeline(cluster, Settings(**{"dry_run": False, **settings})).handle(
        parse_event(*split(raw_event)), at(now)
    )


def decided(outcome):
    return [
        (a.decision.rule, a.decision.action, a.decision.kind, a.decision.name, a.result)
        for a in outcome.applied
    ]


def test_a_cleanly_completed_trainjob_gets_nothing():
    tj, js, job, _ = v2.chain(conditions=FINISHED)
    pods = [v2.pod(job, i, phase="Succeeded", exit_code=0) for i in range(2)]
    cluster = world(tj, v2.jobset(tj, conditions=[("Completed", at(50))]), job, *pods)
    outcome = handle(cluster, event("update", tj, at(51)))
    assert outcome.applied == [] and len(cluster.pods) == 2 and len(cluster.intermediates) == 2


def test_finished_trainjob_restarted_a_failed_trainjob_restarted_by_trainer_is_suspended():
    """Trainer v2.3.0: a Failed TrainJob whose JobSet goes (TTL, any delete) gets a new JobSet and
    loses its Failed condition (kubeflow/trainer#3779/#3737). podsweeper's record of the finish
    is what still says it had finished; only the TrainJob's spec.suspend stops it (measured)."""
    failed = v2.trainjob(conditions=[("Failed", at(50))])
    js = v2.jobset(failed)
    cluster = world(failed, js, v2.batch_job(js))
    assert handle(cluster, event("update", failed, at(50)), now=51).applied == []
    (mark,) = cluster.finish_marks.values()
    assert (mark.condition, mark.top_uid) == ("Failed", js["metadata"]["uid"])
    # The TTL deletes the JobSet; Trainer makes a new one and erases Failed.
    again = v2.trainjob()  # same uid, no condition
    cluster.observe(Verb.UPDATE, parse_job(again))
    cluster.observe(Verb.DELETE, parse_intermediate(js))
    new = v2.jobset(again, created=at(55), generation="-2")
    job = v2.batch_job(new)
    for obj in (new, job, v2.pod(job, 0), v2.pod(job, 1)):
        cluster.observe(Verb.ADD, parse_pod(obj) if obj["kind"] == "Pod" else parse_intermediate(obj))
    outcome = handle(cluster, event("add", new, at(55)), now=56)
    assert decided(outcome) == [
        (Rule.FINISHED_TRAINJOB_RESTARTED, Action.SUSPEND, "TrainJob", "tj", Result.SUSPENDED)
    ]
    assert outcome.applied[0].decision.gpus == 2
    assert cluster.jobs[("TrainJob", "team-a", "tj")].suspended
    # Suspended, it is left alone: nothing more is decided.
    assert handle(cluster, event("update", new, at(57)), now=57).applied == []


def test_finished_trainjob_restarted_a_jobset_made_in_the_second_of_the_finish_is_not_a_restart():
    """The finish the TrainJob still shows is read alike with and without podsweeper's record of
    it: a JobSet made in the same second is not "made after" it (a property test's stream: the
    record was written with no JobSet of the job's own, from an earlier job's JobSet)."""
    done = v2.trainjob(conditions=[("Complete", at(50))])
    earlier = v2.jobset(v2.trainjob(generation="-old"), created=at(45), generation="-old")  # young: no orphan
    cluster = world(done, earlier)
    assert handle(cluster, event("update", done, at(50)), now=51).applied == []
    (mark,) = cluster.finish_marks.values()
    assert (mark.condition, mark.top_uid) == ("Complete", "")
    cluster.observe(Verb.DELETE, parse_intermediate(earlier))
    same_second = v2.jobset(done, created=at(50), generation="-2")
    cluster.observe(Verb.ADD, parse_intermediate(same_second))
    assert handle(cluster, event("add", same_second, at(52)), now=52).applied == []
    later = v2.jobset(done, created=at(51), generation="-3")
    cluster.observe(Verb.DELETE, parse_intermediate(same_second))
    cluster.observe(Verb.ADD, parse_intermediate(later))
    outcome = handle(cluster, event("add", later, at(53)), now=53)
    assert [d[0] for d in decided(outcome)] == [Rule.FINISHED_TRAINJOB_RESTARTED]


@pytest.mark.parametrize("read_now", ["new JobSet", "old JobSet terminating"])
def test_a_failed_condition_erased_before_the_pass_reads_it_is_still_caught(read_now):
    """JobSet TTL 0 (measured on Trainer v2.3.0): the TrainJob is Failed for ~50 ms, until the
    TTL's delete and the new JobSet; the pass of the event that showed Failed may read it after.
    The event only claims it finished: the record is kept when the fresh chain corroborates it
    (the JobSet it failed with, ended; or one made again since the claimed finish), and the
    restart is caught."""
    failed = v2.trainjob(conditions=[("Failed", at(50))])
    old = v2.jobset(failed, conditions=[("Failed", at(50))])
    again = v2.trainjob()  # same uid, Failed erased
    new = v2.jobset(again, created=at(51), generation="-2")
    job = v2.batch_job(new)
    pods = [v2.pod(job, 0), v2.pod(job, 1)]
    state = {
        "new JobSet": [new, job, *pods],
        "old JobSet terminating": [
            {**old, "metadata": {**old["metadata"], "deletionTimestamp": stamp(at(50))}}
        ],
    }[read_now]
    cluster = world(again, *state)
    first = handle(cluster, event("update", failed, at(50)), now=51)
    (mark,) = cluster.finish_marks.values()
    assert mark.condition == "Failed"
    if read_now == "new JobSet":
        assert decided(first) == [
            (Rule.FINISHED_TRAINJOB_RESTARTED, Action.SUSPEND, "TrainJob", "tj", Result.SUSPENDED)
        ]
        return
    assert first.applied == []
    if state:
        cluster.observe(Verb.DELETE, parse_intermediate(state[0]))
    for obj in (new, job, *pods):
        cluster.observe(Verb.ADD, parse_pod(obj) if obj["kind"] == "Pod" else parse_intermediate(obj))
    outcome = handle(cluster, event("add", new, at(51)), now=52)
    assert decided(outcome) == [
        (Rule.FINISHED_TRAINJOB_RESTARTED, Action.SUSPEND, "TrainJob", "tj", Result.SUSPENDED)
    ]


def test_an_erased_failure_nothing_fresh_corroborates_keeps_no_record():
    """Read between the old JobSet's delete and the new one, nothing fresh shows the finish the
    event claims: no record, and the restart that follows goes unseen (a missed act, never a
    wrong one: the same event, sent by anyone, must not stop a job)."""
    failed = v2.trainjob(conditions=[("Failed", at(50))])
    again = v2.trainjob()  # same uid, Failed erased
    cluster = world(again)
    assert handle(cluster, event("update", failed, at(50)), now=51).applied == []
    assert cluster.finish_marks == {}


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_lying_failed_event_never_suspends_a_running_trainjob(dry_run):
    """Issue 38, finding 1: an update event claiming Failed, with the running TrainJob's real
    uid (uids are public: in Events, CloudEvents, every JobSet's ownerReferences). Its first
    JobSet runs: nothing corroborates an erased finish. No record, no suspend, in either mode."""
    running = v2.trainjob()
    jobset = v2.jobset(running, created=at(0))
    job = v2.batch_job(jobset)
    cluster = world(running, jobset, job, v2.pod(job, 0), v2.pod(job, 1))
    lie = v2.trainjob(conditions=[("Failed", at(500))])
    for now in (501, 600, 1200):
        assert handle(cluster, event("update", lie, at(now - 1)), now=now, dry_run=dry_run).applied == []
        assert handle(cluster, ping(at(now)), now=now, dry_run=dry_run).applied == []
    assert cluster.finish_marks == {}
    assert not cluster.jobs[("TrainJob", "team-a", "tj")].suspended


def test_a_planted_finish_record_alone_suspends_no_running_trainjob():
    """The record is a ConfigMap: anyone who may create one in the namespace can plant it. A
    restart is believed only of a JobSet made again; the job's first JobSet never is one."""
    from podsweeper.model import FinishMark

    running = v2.trainjob()
    jobset = v2.jobset(running, created=at(0))
    job = v2.batch_job(jobset)
    cluster = world(running, jobset, job, v2.pod(job, 0))
    ref = cluster.jobs[("TrainJob", "team-a", "tj")].ref
    cluster.write_finish_mark(ref, FinishMark("Failed", at(-100), "planted-uid"))
    assert handle(cluster, event("add", jobset, at(10)), now=600).applied == []
    assert handle(cluster, ping(at(600)), now=600).applied == []
    assert not cluster.jobs[("TrainJob", "team-a", "tj")].suspended


def test_a_suspended_restart_resumed_by_a_person_is_left_to_run():
    """The way to run it again is spec.suspend false: Trainer resumes the JobSet podsweeper
    stopped, and JobSet marks it Suspended=False (measured: without this the next sweep
    suspended it again). A JobSet made again after a later finish has no such mark."""
    failed = v2.trainjob(conditions=[("Failed", at(50))])
    cluster = world(failed, v2.jobset(failed))
    handle(cluster, event("update", failed, at(50)), now=51)
    resumed = v2.jobset(v2.trainjob(), created=at(55), generation="-2")
    resumed["status"]["conditions"] = [
        {"type": "Suspended", "status": "False", "reason": "ResumeJobs", "lastTransitionTime": stamp(at(90))}
    ]
    job = v2.batch_job(resumed)
    world(v2.trainjob(), resumed, job, v2.pod(job, 0), cluster=cluster)
    assert handle(cluster, ping(at(100)), now=100).applied == []
    assert handle(cluster, event("update", resumed, at(100)), now=100).applied == []
    assert not cluster.jobs[("TrainJob", "team-a", "tj")].suspended


def test_an_unfinished_trainjob_event_keeps_no_record():
    """Only a finish the event or the fresh read shows is kept: a running TrainJob's gets none."""
    tj = v2.trainjob()
    js = v2.jobset(tj, created=at(51), generation="-2")
    cluster = world(tj, js)
    assert handle(cluster, event("update", tj, at(52)), now=52).applied == []
    assert handle(cluster, event("add", js, at(52)), now=52).applied == []
    assert not cluster.finish_marks


def test_a_jobset_made_after_the_finish_still_shown_is_caught_without_a_record():
    """Before v2.2.0 a Complete TrainJob kept its condition and got a new JobSet (#2981)."""
    tj = v2.trainjob(conditions=FINISHED)
    js = v2.jobset(tj, created=at(120), generation="-2")
    job = v2.batch_job(js)
    cluster = world(tj, js, job, v2.pod(job, 0))
    outcome = handle(cluster, event("add", js, at(120)), now=121)
    assert [(a.decision.rule, a.result) for a in outcome.applied] == [
        (Rule.FINISHED_TRAINJOB_RESTARTED, Result.SUSPENDED)
    ]


def test_a_finished_trainjobs_own_jobset_is_left_to_the_jobset_controller():
    """The JobSet deletes its active Jobs itself when it finishes; its own JobSet is no restart."""
    tj, js, job, pods = v2.chain(conditions=FINISHED)
    cluster = world(tj, js, job, *pods)
    assert handle(cluster, event("update", tj, at(51)), now=300).applied == []
    assert len(cluster.pods) == 2 and not cluster.jobs[("TrainJob", "team-a", "tj")].suspended


def test_dry_run_opt_out_and_kueue_change_nothing():
    tj = v2.trainjob(conditions=FINISHED)
    js = v2.jobset(tj, created=at(120))
    job = v2.batch_job(js)

    def suspended_after(trainjob, **settings):
        cluster = world(trainjob, js, job, v2.pod(job, 0))
        outcome = handle(cluster, event("add", js, at(120)), **settings)
        return [(a.decision.action, a.result) for a in outcome.applied], cluster.jobs[
            ("TrainJob", "team-a", "tj")
        ].suspended

    assert suspended_after(tj, dry_run=True) == ([(Action.SUSPEND, Result.DRY_RUN)], False)
    opted = v2.trainjob(conditions=FINISHED, annotations={"podsweeper.dev/skip": "true"})
    assert suspended_after(opted) == ([(Action.SKIP, None)], False)
    queued = v2.trainjob(conditions=FINISHED, labels={"kueue.x-k8s.io/queue-name": "q"})
    assert suspended_after(queued) == ([(Action.WARN, Result.WARNED)], False)


def test_a_running_trainjob_is_left_alone():
    tj, js, job, pods = v2.chain(conditions=[("Created", at(0))])
    cluster = world(tj, js, job, *pods)
    assert handle(cluster, event("add", js, at(1))).applied == []
    assert handle(cluster, ping(at(600))).applied == []


@pytest.mark.parametrize("orphaned_by_gc", [False, True])
def test_the_jobset_of_a_deleted_trainjob_is_an_orphan(orphaned_by_gc):
    """Deleted with propagation Orphan, the garbage collector strips the ownerReference; before
    that (or with Background, racing the collector) it still names the gone TrainJob."""
    tj, js, job, pods = v2.chain()
    if orphaned_by_gc:
        js = v2.jobset(None)
    cluster = world(tj, js, job, *pods)
    gone(cluster, tj)
    outcome = handle(cluster, event("delete", tj, at(100)), now=100)
    assert decided(outcome) == [(Rule.ORPHAN, Action.DELETE, "JobSet", "tj", Result.DELETED)]
    assert cluster.pods == {}


def test_a_young_orphan_waits_for_the_grace():
    tj, js, job, pods = v2.chain()
    cluster = world(tj, v2.jobset(None, created=at(90)), job, *pods)
    gone(cluster, tj)
    assert handle(cluster, event("delete", tj, at(100)), now=100).applied == []


def test_a_plain_jobset_or_batch_job_is_never_touched():
    """No TrainJob ever owned them and they carry no Trainer mark: crash-looping or not, ours not."""
    plain = v2.jobset(None, name="plain", marked=False)
    job = v2.batch_job(plain, marked=False)
    loose = v2.batch_job(v2.jobset(None, name="gone-plain", marked=False), owned=False, marked=False)
    cluster = world(plain, job, v2.pod(job, 0), v2.pod(job, 1), loose, v2.pod(loose, 0))
    cluster.gone_jobs.add(("TrainJob", "team-a", "plain"))
    cluster.gone_jobs.add(("TrainJob", "team-a", "gone-plain"))
    for raw in (event("add", plain, at(1)), event("update", loose, at(2)), ping(at(600))):
        assert handle(cluster, raw).applied == []
    assert len(cluster.pods) == 3 and len(cluster.intermediates) == 3


def test_a_batch_job_controlled_by_something_else_is_never_touched():
    tj, js, job, pods = v2.chain()
    foreign = v2.batch_job(js, owned=False)
    foreign["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "CronJob", "name": "c", "uid": "c", "controller": True}
    ]
    cluster = world(foreign, v2.pod(foreign, 0))
    cluster.gone_jobs.add(("TrainJob", "team-a", "tj"))
    assert handle(cluster, ping(at(600))).applied == []
    assert len(cluster.intermediates) == 1


def test_the_jobs_of_a_jobset_deleted_with_orphan_propagation_are_orphans():
    """The JobSet went (propagation Orphan): its Jobs run on with no controller, their pods too."""
    tj, js, job, pods = v2.chain()
    orphan_job = v2.batch_job(js, owned=False)
    cluster = world(tj, orphan_job, *[v2.pod(orphan_job, i) for i in range(2)])
    outcome = handle(cluster, event("update", orphan_job, at(100)), now=100)
    assert decided(outcome) == [(Rule.ORPHAN, Action.DELETE, "Job", "tj-node-0", Result.DELETED)]
    assert cluster.pods == {}


def test_unbounded_jobset_restarts_are_warned_once_on_the_trainjob():
    tj = v2.trainjob(conditions=[("Created", at(0))])
    js = v2.jobset(tj, failure_actions=("RestartJobSetAndIgnoreMaxRestarts",))
    cluster = world(tj, js)
    outcome = handle(cluster, event("add", js, at(1)))
    assert decided(outcome) == [
        (Rule.UNBOUNDED_JOBSET_RESTARTS, Action.WARN, "TrainJob", "tj", Result.WARNED)
    ]
    assert handle(cluster, event("update", js, at(2))).applied == []  # only a new JobSet
    bounded = v2.jobset(tj, failure_actions=("FailJobSet", "RestartJobSet"))
    assert handle(world(tj, bounded), event("add", bounded, at(1))).applied == []
    # A deadline ends it whatever the failurePolicy says: nothing to warn about.
    deadline = v2.trainjob(conditions=[("Created", at(0))])
    deadline["spec"]["activeDeadlineSeconds"] = 3600
    unbounded = v2.jobset(deadline, failure_actions=("RestartJobSetAndIgnoreMaxRestarts",))
    assert handle(world(deadline, unbounded), event("add", unbounded, at(1))).applied == []


def test_the_evidence_of_failed_pods_is_kept_before_their_jobset_goes():
    """kubernetes-sigs/jobset#776: failed pods vanish with their JobSet; the store keeps them."""
    tj, js, job, pods = v2.chain()
    failed = v2.pod(job, 1, phase="Failed", exit_code=3)
    cluster = world(tj, v2.jobset(None), job, pods[0], failed)
    gone(cluster, tj)
    handle(cluster, event("delete", tj, at(100)), now=100)
    assert cluster.evidence == {}  # its TrainJob is gone: no owner for a store
    cluster = world(tj, js, job, pods[0], failed)
    handle(cluster, event("update", failed, at(100)), now=100)
    (records,) = [r for r, _ in cluster.evidence.values()]
    assert '"exit_code":3' in records.replace(" ", "") and failed["metadata"]["name"] in records


def test_the_sweep_finds_what_no_event_reported():
    tj = v2.trainjob(conditions=FINISHED)
    js = v2.jobset(tj, created=at(120))
    job = v2.batch_job(js)
    # (and a finished TrainJob with its own JobSet, which is no candidate)
    done_tj, done_js, done_job, _ = v2.chain("done", conditions=FINISHED)
    other_tj, other_js, other_job, other_pods = v2.chain("other")
    orphan_job = v2.batch_job(v2.jobset(None, name="gone"), owned=False)
    cluster = world(
        tj, js, job, v2.pod(job, 0), other_tj, other_js, other_job, *other_pods, orphan_job, done_tj, done_js
    )
    cluster.gone_jobs.add(("TrainJob", "team-a", "gone"))
    outcome = handle(cluster, ping(at(600)))
    assert sorted(decided(outcome)) == sorted(
        [
            (Rule.FINISHED_TRAINJOB_RESTARTED, Action.SUSPEND, "TrainJob", "tj", Result.SUSPENDED),
            (Rule.ORPHAN, Action.DELETE, "Job", "gone-node-0", Result.DELETED),
        ]
    )
    assert len(cluster.pods) == 3  # the running TrainJob's, and the suspended one's (Trainer's to remove)


def test_v2_pod_events_decide_nothing_by_themselves():
    tj, js, job, pods = v2.chain(conditions=FINISHED)
    cluster = world(tj, js, job, *pods)
    outcome = handle(cluster, event("update", pods[0], at(100)))
    assert outcome.applied == [] and "JobSet" in (outcome.note or "")


def test_a_chain_outside_the_namespaces_is_never_decided_even_past_the_callers_gate():
    """The lineage's own namespace gate, behind triage's: an orphaned JobSet in an excluded
    namespace is decided nothing even when a caller skipped the gate."""
    tj, js, job, _ = v2.chain()
    cluster = world(js, job)
    ref = parse_job(tj).ref
    lineage = Lineage(
        ref, None, parse_intermediate(js), (parse_intermediate(job),), tuple(cluster.list_job_pods(ref)), None
    )
    inside = decide_lineage(lineage, at(600), Settings(exclude_namespaces=""))
    assert [(d.rule, d.kind) for d in inside] == [(Rule.ORPHAN, "JobSet")]
    namespace = ref.namespace
    assert decide_lineage(lineage, at(600), Settings(exclude_namespaces=namespace)) == []
    assert decide_lineage(lineage, at(600), Settings(namespaces="elsewhere", exclude_namespaces="")) == []


def deadline_failed(reason: str = "DeadlineExceeded", at_second: int = 108, **meta) -> dict:
    """A TrainJob (activeDeadlineSeconds 100) that Trainer marked Failed at its deadline."""
    tj = v2.trainjob(conditions=[("Created", at(0)), ("Failed", at(at_second))], **meta)
    tj["spec"]["activeDeadlineSeconds"] = 100
    tj["status"]["conditions"][-1]["reason"] = reason
    return tj


def leftover(tj: dict, *, jobset_created: int = 1, conditions=(), suspend=False, phase="Running"):
    """Its JobSet as Trainer left it when its one delete failed (kubeflow/trainer#3833)."""
    js = v2.jobset(tj, created=at(jobset_created), conditions=conditions)
    if suspend:
        js["spec"]["suspend"] = True
    job = v2.batch_job(js)
    return js, job, [v2.pod(job, i, phase=phase) for i in range(2)]


@pytest.mark.parametrize(
    "case, tj_meta, now, reason, jobset, expected",
    [
        ("past the grace: the JobSet goes", {}, 600, "DeadlineExceeded", {}, (Action.DELETE, Result.DELETED)),
        ("within Trainer's own delete's grace", {}, 120, "DeadlineExceeded", {}, None),
        ("another Failed reason: Trainer makes a new JobSet", {}, 600, "BackoffLimitExceeded", {}, None),
        (
            "the JobSet ended on its own",
            {},
            600,
            "DeadlineExceeded",
            {"conditions": [("Failed", at(9))]},
            None,
        ),
        ("the JobSet is being suspended", {}, 600, "DeadlineExceeded", {"suspend": True}, None),
        ("a JobSet made after the deadline", {}, 600, "DeadlineExceeded", {"jobset_created": 200}, None),
        ("its pods ended", {}, 600, "DeadlineExceeded", {"phase": "Failed"}, None),
        (
            "opted out",
            {"annotations": {"podsweeper.dev/skip": "true"}},
            600,
            "DeadlineExceeded",
            {},
            (Action.SKIP, None),
        ),
    ],
)
def test_deadline_exceeded_jobset_running_table(case, tj_meta, now, reason, jobset, expected):
    tj = deadline_failed(reason, **tj_meta)
    js, job, pods = leftover(tj, **jobset)
    cluster = world(tj, js, job, *pods)
    outcome = handle(cluster, ping(at(now)), now=now)
    named = [d for d in decided(outcome) if d[0] is Rule.DEADLINE_EXCEEDED_JOBSET_RUNNING]
    if expected is None:
        assert named == [], case
        assert len(cluster.pods) == 2, case
        return
    action, result = expected
    assert named == [(Rule.DEADLINE_EXCEEDED_JOBSET_RUNNING, action, "JobSet", "tj", result)], case
    if result is Result.DELETED:
        assert cluster.pods == {} and ("JobSet", "team-a", "tj") not in {k[:3] for k in cluster.intermediates}


def test_deadline_exceeded_jobset_running_is_decided_on_the_trainjob_update_too_and_dry_run_keeps_it():
    """The TrainJob's Failed update, seen after the grace (a late or retried event), decides it
    as the sweep does; in dry-run nothing goes, and the failed-run evidence claims no delete."""
    tj = deadline_failed()
    js, job, pods = leftover(tj)
    cluster = world(tj, js, job, *pods)
    outcome = handle(cluster, event("update", tj, at(600)), dry_run=True)
    assert decided(outcome) == [
        (Rule.DEADLINE_EXCEEDED_JOBSET_RUNNING, Action.DELETE, "JobSet", "tj", Result.DRY_RUN)
    ]
    assert len(cluster.pods) == 2
    outcome = handle(cluster, event("update", tj, at(600)))
    assert decided(outcome) == [
        (Rule.DEADLINE_EXCEEDED_JOBSET_RUNNING, Action.DELETE, "JobSet", "tj", Result.DELETED)
    ]
    (gpus,) = {a.decision.gpus for a in outcome.applied}
    assert gpus == 2  # the two GPUs its running pods held


def test_deadline_exceeded_jobset_running_carries_only_the_pods_of_the_jobset_it_deletes():
    """The decision carries the GPUs (and evidence) of the pods its delete takes away, those
    labelled with its JobSet's uid: a pod labelled with the TrainJob's name but an earlier
    JobSet's uid is not freed by this delete and is not counted as if it were."""
    tj = deadline_failed()
    js, job, pods = leftover(tj)
    stray = v2.pod(job, 5)
    stray["metadata"] |= {"name": "tj-earlier-0", "uid": "stray-uid", "ownerReferences": []}
    stray["metadata"]["labels"][kinds.TRAINJOB.chain.uid_label] = "an-earlier-jobsets-uid"
    outcome = handle(world(tj, js, job, *pods, stray), ping(at(600)), now=600)
    (deleted,) = [
        a.decision for a in outcome.applied if a.decision.rule is Rule.DEADLINE_EXCEEDED_JOBSET_RUNNING
    ]
    assert (deleted.kind, deleted.gpus) == ("JobSet", 2)  # its two running pods, not the stray one


def test_deadline_exceeded_jobset_running_counts_only_the_pods_of_its_own_jobs():
    """A Job left without the JobSet (its ownerReference gone) keeps its pods when the JobSet
    goes: they are not the JobSet's to free, so they do not make it a leftover (the Job itself
    is an orphan's). Found by the generated worlds."""
    tj = deadline_failed()
    js, job, pods = leftover(tj)
    job["metadata"]["ownerReferences"] = []
    outcome = handle(world(tj, js, job, *pods), ping(at(600)), now=600)
    rules = {(d[0], d[2]) for d in decided(outcome)}
    assert (Rule.DEADLINE_EXCEEDED_JOBSET_RUNNING, "JobSet") not in rules, rules
    assert (Rule.ORPHAN, "Job") in rules, rules
