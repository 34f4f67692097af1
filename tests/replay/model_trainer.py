"""Kubeflow Trainer v2 lineages for the generated worlds: TrainJob -> JobSet -> batch Job -> Pod.

Mixed into model_world.py's streams (same namespaces, same job names as the v1 jobs). Each spec
says what the object *is* (its controller ownerReference, its labels, Trainer's mark, its
failurePolicy actions, its conditions, the opt-out annotation, terminating or not) and
renders itself into the object the API server returns, shaped like tests/fixtures/trainer.py
(Trainer v2.3.0, JobSet v0.12.0). `oracle.py` judges from these specs alone.

`trainer_line` tells the life of one TrainJob: created (before or within the stream), maybe
never shown to the stream at all, running, finishing (Complete/Failed) with its pods
running on or ending, its JobSet deleted and created again after the finish (a later
creationTimestamp, the kubeflow/trainer bug), its JobSet deleted with propagation Orphan
(its batch Jobs stripped of their controller), terminating JobSets and Jobs, and its own
delete: with the cascade shown (background), racing it (the JobSet still names the gone
TrainJob), or with the garbage collector stripping the JobSet's ownerReference (Orphan);
then maybe a second TrainJob of the same name (another uid). Its TrainJobs may opt out, be
suspended, queued by Kueue or managed by another controller. `lookalike` makes what is never
ours: a plain JobSet without the mark and without a TrainJob, one controlled by another kind,
a plain batch Job labelled with a JobSet name but unmarked, a marked Job a CronJob controls.

A finished TrainJob keeps its condition here (Trainer v2.3.0 erases a Failed one when it
makes a new JobSet; podsweeper's own record of the finish covers that, which no stream
shows): the streams test the finish as the TrainJob shows it. One line per TrainJob name and
namespace, and JobSet look-alikes under names no TrainJob has: two JobSets of one name never
coexist, so every stream is one a cluster could show (up to the events it drops or reorders).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from hypothesis import strategies as st

from tests.fixtures import builders
from tests.fixtures import trainer as fixtures
from tests.replay.model_world import (
    NAMESPACES,
    OFTEN_SKIP_VALUES,
    SKIP_VALUES,
    T0,
    OwnerSpec,
    PodSpec,
    container_spec,
    owner_ref,
    render_containers,
)

BATCH_API = "batch/v1"
NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
MARK = fixtures.MARK
SKIP_ANNOTATION = "podsweeper.dev/skip"
TTL_ANNOTATION = "podsweeper.dev/ttl-seconds-after-finished"

TRAIN_NAMES = ("a", "b")  # the v1 jobs' names too: one name under both generations
JOBSET_LOOKALIKE_NAMES = ("x",)  # no TrainJob ever has it (two JobSets of one name cannot coexist)
JOB_LOOKALIKE_NAMES = ("a", "x")  # a batch Job may carry a TrainJob's name as a label
RUNNING_CONDITIONS = ((), (("Created", "True"),), (("Created", "True"), ("Complete", "False")))
FINISHED_KINDS = ("Complete", "Failed")
FAILURE_POLICIES = (
    (),
    ("FailJobSet",),
    ("RestartJobSet",),
    ("RestartJobSetAndIgnoreMaxRestarts",),
    ("FailJobSet", "RestartJobAndIgnoreMaxRestarts"),
)
ENDINGS = ("stays", "stays", "background", "racing", "stripped")
DELETED = ("background", "background", "racing", "stripped")  # before a TrainJob of the same name
# Opt-outs on TrainJobs more often than on pods: each v2 rule's skip needs one.
TRAINJOB_SKIPS = OFTEN_SKIP_VALUES
DEADLINE_SKIPS = (None, "true", "false", "True", None, "TRUE")
# How long after the TrainJob finished its JobSet comes back.
RECREATED_AFTER = (1, 20, 200)
TRAINER_CONTROLLER = "trainer.kubeflow.org/trainjob-controller"
MANAGED_BY = (None,) * 3 + (TRAINER_CONTROLLER, "kueue.x-k8s.io/multikueue")
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
BEFORE_THE_STREAM = T0 - timedelta(hours=1)


def _stamp(at: datetime) -> str:
    return builders.stamp(at)


def _meta(meta: dict, uid: str, created: datetime | None, owner, skip, terminating: bool) -> None:
    meta["uid"] = uid
    if created is None:
        meta.pop("creationTimestamp", None)
    else:
        meta["creationTimestamp"] = _stamp(created)
    if owner is not None:
        meta["ownerReferences"] = [owner_ref(owner)]
    else:
        meta.pop("ownerReferences", None)
    if skip is not None:
        meta["annotations"] = {SKIP_ANNOTATION: skip}
    if terminating:
        meta["deletionTimestamp"] = _stamp(created or T0)
        meta["deletionGracePeriodSeconds"] = 0


@dataclass(frozen=True)
class TrainJobSpec:
    namespace: str
    name: str
    uid: str
    created: datetime
    conditions: tuple[tuple[str, str, datetime], ...]  # (type, status, lastTransitionTime)
    active_deadline: int | None
    skip: str | None
    suspended: bool = False  # spec.suspend
    queued: bool = False  # Kueue's queue-name label: Kueue drives its suspend
    managed_by: str | None = None  # spec.managedBy
    failed_reason: str = ""  # the Failed condition's reason: Trainer's DeadlineExceeded, or its default
    # Rule expired-trainjob (model_ttl.py): its podsweeper.dev/ttl-seconds-after-finished (raw),
    # an ownerReference (an OptimizationJob's trial), Trainer's own spec.ttlSecondsAfterFinished.
    ttl_asked: str | None = None
    owner: OwnerSpec | None = None
    own_ttl: int | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return ("TrainJob", self.namespace, self.name)

    def render(self) -> dict:
        obj = fixtures.trainjob(self.name, self.namespace)
        _meta(obj["metadata"], self.uid, self.created, self.owner, self.skip, False)
        if self.ttl_asked is not None:
            obj["metadata"].setdefault("annotations", {})[TTL_ANNOTATION] = self.ttl_asked
        if self.own_ttl is not None:
            obj["spec"]["ttlSecondsAfterFinished"] = self.own_ttl
        if self.queued:
            obj["metadata"]["labels"] = {KUEUE_QUEUE_LABEL: "team-queue"}
        if self.managed_by is not None:
            obj["spec"]["managedBy"] = self.managed_by
        if self.suspended:
            obj["spec"]["suspend"] = True
        if self.active_deadline is not None:
            obj["spec"]["activeDeadlineSeconds"] = self.active_deadline
        obj["status"] = {
            "conditions": [
                {
                    "type": t,
                    "status": s,
                    "reason": self.failed_reason if t == "Failed" and self.failed_reason else f"TrainJob{t}",
                    "message": "generated",
                    "lastTransitionTime": _stamp(at),
                }
                for t, s, at in self.conditions
            ]
        }
        return obj


@dataclass(frozen=True)
class IntermediateSpec:
    """A JobSet (kind "JobSet"), a batch Job (kind "Job") or a Volcano PodGroup (kind "PodGroup")."""

    kind: str
    namespace: str
    name: str
    uid: str
    created: datetime | None
    owner: OwnerSpec | None  # its controller ownerReference; None: it has none
    labels: tuple[tuple[str, str], ...] = ()
    template_marked: bool = False  # a JobSet: Trainer's mark on its replicatedJobs' templates
    failure_actions: tuple[str, ...] = ()  # a JobSet: its failurePolicy rules' actions
    skip: str | None = None
    terminating: bool = False
    phase: str = ""  # a PodGroup's (Volcano's status.phase)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind, self.namespace, self.name)

    def label(self, name: str) -> str | None:
        return dict(self.labels).get(name)

    def render(self) -> dict:
        if self.kind == "PodGroup":
            obj = fixtures.podgroup(None, self.name, self.namespace, phase=self.phase)
        elif self.kind == "JobSet":
            obj = fixtures.jobset(
                None,
                self.name,
                self.namespace,
                created=self.created,
                marked=self.template_marked,
                failure_actions=self.failure_actions,
            )
        else:
            stub = {"metadata": {"name": self.name, "namespace": self.namespace, "uid": "-"}}
            stub["metadata"]["creationTimestamp"] = _stamp(self.created or T0)
            obj = fixtures.batch_job(stub, owned=False, marked=False)
            obj["metadata"]["name"] = self.name
        meta = obj["metadata"]
        if self.labels:
            meta["labels"] = dict(self.labels)
        else:
            meta.pop("labels", None)
        _meta(meta, self.uid, self.created, self.owner, self.skip, self.terminating)
        return obj


@dataclass(frozen=True)
class ChainPodSpec(PodSpec):
    """A pod a batch Job made (a TrainJob's or a look-alike's). No v1 rule names it."""

    def render(self) -> dict:
        owner = self.owner
        stub = {
            "metadata": {
                "name": owner.name if owner else "-",
                "namespace": self.namespace,
                "uid": owner.uid if owner else "-",
                "labels": dict(self.labels),
            }
        }
        obj = fixtures.pod(stub, phase=self.phase, owned=False)
        meta = obj["metadata"]
        meta["name"], meta["labels"] = self.name, dict(self.labels)
        _meta(meta, self.uid, self.created, owner, self.skip, self.terminating)
        if self.containers:
            obj["status"]["containerStatuses"] = render_containers(self.containers)
        return obj


# -- stories --------------------------------------------------------------------------------


# Trainer makes a TrainJob's first JobSet within ~0.1 s of the job (or of its resume): measured.
FIRST_JOBSET_WITHIN_SECONDS = 2


class _Story:
    """One story's events as (seconds after T0, verb, spec), each object's in time order."""

    def __init__(self) -> None:
        self.items: list[tuple[int, str, object]] = []
        self._last: dict[tuple, int] = {}
        self.latest: dict[str, object] = {}  # uid -> the object's latest state
        self.gone: set[str] = set()  # uids whose delete was emitted

    def emit(self, t: int, verb: str, spec) -> int:
        key = (type(spec).__name__, spec.key)
        t = max(t, self._last.get(key, t))
        self._last[key] = t
        self.items.append((t, verb, spec))
        self.latest[spec.uid] = spec
        return t

    def change(self, t: int, spec, **changes) -> int:
        """An update of the object's latest state."""
        return self.emit(t, "update", replace(self.latest[spec.uid], **changes))

    def delete(self, t: int, spec) -> int:
        if spec.uid in self.gone:
            return t
        self.gone.add(spec.uid)
        return self.emit(t, "delete", self.latest[spec.uid])


def _seconds(at: datetime) -> int:
    return int((at - T0).total_seconds())


def _pod_labels(js_name: str, js_uid: str, job_name: str, job_uid: str, index: int) -> tuple:
    return (
        (NAME_LABEL, js_name),
        (UID_LABEL, js_uid),
        ("jobset.sigs.k8s.io/replicatedjob-name", "node"),
        ("batch.kubernetes.io/job-name", job_name),
        ("batch.kubernetes.io/controller-uid", job_uid),
        ("batch.kubernetes.io/job-completion-index", str(index)),
    )


def _pods_of(
    draw, story: _Story, job: IntermediateSpec, js_name: str, js_uid: str, t: int
) -> list[ChainPodSpec]:
    pods = []
    for index in range(draw(st.sampled_from([0, 1, 1, 2]))):
        # Rarely a pod that has lost its controller (its Job deleted with propagation Orphan).
        owner = OwnerSpec(BATCH_API, "Job", job.name, job.uid, True) if draw(st.integers(0, 11)) else None
        pod = ChainPodSpec(
            namespace=job.namespace,
            name=f"{job.name}-{index}-{builders.uid(job.uid)[:5]}",
            uid=f"{job.uid}-pod-{index}",
            owner=owner,
            labels=_pod_labels(js_name, js_uid, job.name, job.uid, index),
            phase=draw(st.sampled_from(["Pending", "Running", "Running"])),
            containers=tuple(draw(st.lists(container_spec(), max_size=1))),
            skip=draw(st.sampled_from(SKIP_VALUES)),
            terminating=False,
            created=T0 + timedelta(seconds=t),
        )
        t_pod = story.emit(t, "add", pod)
        if pod.phase == "Pending" and draw(st.booleans()):
            story.change(t_pod + draw(st.integers(1, 20)), pod, phase="Running")
        pods.append(pod)
    return pods


def _jobset(draw, story: _Story, ns: str, name: str, uid: str, owner, t: int, created: datetime):
    """A JobSet as Trainer makes it, its batch Jobs (maybe none yet) and their pods."""
    js = IntermediateSpec(
        "JobSet",
        ns,
        name,
        uid,
        created,
        owner,
        template_marked=draw(st.integers(0, 7)) > 0,
        failure_actions=draw(st.sampled_from(FAILURE_POLICIES)),
        skip=draw(st.sampled_from(SKIP_VALUES)),
    )
    t = story.emit(t, "add", js)
    jobs, pods = [], []
    for index in range(draw(st.sampled_from([0, 1, 1, 2]))):
        marked = draw(st.integers(0, 7)) > 0
        labels = ((NAME_LABEL, name), (UID_LABEL, uid), ("jobset.sigs.k8s.io/replicatedjob-name", "node"))
        job = IntermediateSpec(
            "Job",
            ns,
            f"{name}-node-{index}",
            f"{uid}-job-{index}",
            created,
            OwnerSpec(fixtures.JOBSET, "JobSet", name, uid, True),
            labels + (((MARK, "trainer"),) if marked else ()),
            skip=draw(st.sampled_from(SKIP_VALUES)),
        )
        t_job = story.emit(t + draw(st.integers(0, 2)), "add", job)
        jobs.append(job)
        pods += _pods_of(draw, story, job, name, uid, t_job + draw(st.integers(0, 3)))
    return js, jobs, pods


def _churn(draw, story: _Story, t: int, js, jobs: list, pods: list) -> int:
    """Updates that change no owner: opt-out annotations come and go, things start terminating."""
    if js is not None and draw(st.integers(0, 3)) == 0:
        t = story.change(t + draw(st.integers(1, 60)), js, skip=draw(st.sampled_from(SKIP_VALUES)))
    for job in jobs:
        if draw(st.integers(0, 3)) == 0:
            terminating = draw(st.integers(0, 3)) == 0
            t = story.change(t + draw(st.integers(1, 30)), job, terminating=terminating)
    for pod in pods:
        if draw(st.integers(0, 9)) == 0:
            t = story.change(t + draw(st.integers(1, 30)), pod, terminating=True)
    return t


@st.composite
def trainer_line(draw, index: int, taken: frozenset = frozenset()) -> list[tuple[int, str, object]]:
    """One TrainJob name in one namespace (not in `taken`, another line's): 1-2 TrainJobs
    (uids) and what they make."""
    story = _Story()
    free = [(ns, name) for ns in NAMESPACES for name in TRAIN_NAMES if (ns, name) not in taken]
    ns, name = draw(st.sampled_from(free))
    shown = draw(st.integers(0, 9)) > 0  # else the stream never shows the TrainJob itself
    t = draw(st.integers(0, 500))
    left = None  # a JobSet the previous TrainJob left behind
    lives = 2 if draw(st.integers(0, 2)) == 0 else 1
    for life in range(lives):
        created = BEFORE_THE_STREAM if draw(st.integers(0, 3)) == 0 else T0 + timedelta(seconds=t)
        tj = TrainJobSpec(
            ns,
            name,
            f"tj-{index}-{life}-{ns}-{name}",
            created,
            tuple((c, s, created) for c, s in draw(st.sampled_from(RUNNING_CONDITIONS))),
            draw(st.sampled_from([None, None, 3600, 3600])),
            draw(st.sampled_from(TRAINJOB_SKIPS)),
            queued=draw(st.integers(0, 3)) == 0,
            managed_by=draw(st.sampled_from(MANAGED_BY)),
        )
        if shown:
            t = story.emit(t, "add", tj)
        js, jobs, pods = left, [], []
        if left is None:
            js_created = created if draw(st.integers(0, 3)) == 0 else T0 + timedelta(seconds=t)
            if shown and (js_created - created).total_seconds() >= FIRST_JOBSET_WITHIN_SECONDS:
                # Trainer makes a TrainJob's first JobSet as it is made, or as it is resumed
                # (Kueue's admission, a person's): a first JobSet made later was made at a resume,
                # and the TrainJob's Suspended condition says when (turned False, reason Resumed).
                resumed = (*tj.conditions, ("Suspended", "False", js_created))
                t = story.change(t, tj, conditions=resumed)
                tj = story.latest[tj.uid]
            owner = OwnerSpec(fixtures.TRAINER, "TrainJob", name, tj.uid, True)
            js, jobs, pods = _jobset(
                draw, story, ns, name, f"js-{index}-{life}-0", owner, t + draw(st.integers(0, 5)), js_created
            )
        t = _churn(draw, story, t, js, jobs, pods)
        if shown and draw(st.integers(0, 3)) == 0:  # the running TrainJob changes
            changes = dict(skip=draw(st.sampled_from(TRAINJOB_SKIPS)), suspended=draw(st.integers(0, 4)) == 0)
            t = story.change(t + draw(st.integers(1, 60)), tj, **changes)
            tj = story.latest[tj.uid]
        if js is not None and js is not left and draw(st.integers(0, 5)) == 0:
            # The JobSet deleted with propagation Orphan: its Jobs run on without a controller.
            t = story.delete(t + draw(st.integers(5, 100)), js)
            for job in jobs:
                t = story.change(t + draw(st.integers(0, 5)), job, owner=None)
            js = None
        if js is not None and draw(st.integers(0, 3)) == 0:  # being deleted (a finalizer holds it)
            t = story.change(t + draw(st.integers(1, 60)), js, terminating=True)
        if draw(st.integers(0, 2)) > 0:  # it finishes
            t += draw(st.integers(5, 300))
            # The finish, as its condition's lastTransitionTime says: maybe a while before the
            # update shows it, never before the TrainJob ran a few seconds (since it was made or
            # resumed) nor before its JobSet.
            ran_from = max([created, *(at for c, _, at in tj.conditions if c == "Suspended")])
            finished_at = max(
                T0 + timedelta(seconds=t - draw(st.sampled_from([0, 0, 5, 60]))),
                ran_from + timedelta(seconds=5),
                js.created if js is not None and js.created is not None else created,
            )
            t = max(t, _seconds(finished_at))
            # With a deadline, it fails at it (what kubeflow/trainer#3833 leaves behind).
            deadline_failed = tj.active_deadline is not None
            how = "Failed" if deadline_failed else draw(st.sampled_from(FINISHED_KINDS))
            other = tuple(
                (c, "False", finished_at) for c in FINISHED_KINDS if c != how and draw(st.booleans())
            )
            conditions = (("Created", "True", created), (how, "True", finished_at)) + other
            conditions += tuple(c for c in tj.conditions if c[0] == "Suspended")  # kept as it was
            # A Failed one with a deadline failed at it (Trainer's one JobSet delete may have
            # failed, kubeflow/trainer#3833: its pods may run on); without one, for another reason.
            reason = "DeadlineExceeded" if how == "Failed" and tj.active_deadline is not None else ""
            if shown:
                # A deadline leftover's opt-out half the time: its skip is a case of its own.
                skip = draw(st.sampled_from(DEADLINE_SKIPS if reason else TRAINJOB_SKIPS))
                t = story.change(t, tj, conditions=conditions, skip=skip, failed_reason=reason)
                tj = story.latest[tj.uid]
            staying = []
            for position, pod in enumerate(pods):  # its pods: running on (the leak), ended, or gone
                fate = draw(st.sampled_from(["stays", "stays", "ended", "ended", "gone"]))
                if reason and position == 0:
                    fate = "stays"  # Trainer's one delete at the deadline failed: its pods run on
                if fate == "ended":
                    phase = draw(st.sampled_from(["Succeeded", "Failed"]))
                    story.change(t + draw(st.integers(0, 40)), pod, phase=phase)
                elif fate == "gone":
                    story.delete(t + draw(st.integers(0, 40)), pod)
                else:
                    staying.append(pod)
            if reason and staying:
                # kubeflow/trainer#3833's leak goes on: a pod still running reports again later,
                # past the operator grace (its status changes as its containers run).
                t = story.change(t + draw(st.sampled_from([45, 150, 400])), draw(st.sampled_from(staying)))
            if js is not None and js is not left and draw(st.booleans()):
                # Deleted, then created again after the finish, pods and all (kubeflow/trainer#2981).
                t += draw(st.integers(1, 60))
                unseen = []  # old Jobs whose delete the stream does not show (yet)
                for obj in (*pods, *jobs, js):
                    if draw(st.integers(0, 2)) > 0:  # some deletes the stream does not show
                        story.delete(t, obj)
                    elif obj in jobs:
                        unseen.append(obj)
                again = finished_at + timedelta(seconds=draw(st.sampled_from(RECREATED_AFTER)))
                t = max(_seconds(again), t + 1)
                owner = OwnerSpec(fixtures.TRAINER, "TrainJob", name, tj.uid, True)
                js, jobs, pods = _jobset(draw, story, ns, name, f"js-{index}-{life}-1", owner, t, again)
                for old in unseen:  # the collector gets to an old Job after the new JobSet is there
                    if draw(st.booleans()):
                        t = story.change(t + draw(st.integers(1, 20)), old, terminating=True)
        ending = draw(st.sampled_from(ENDINGS if life == lives - 1 else DELETED))
        if ending == "stays":
            break
        t += draw(st.integers(10, 400))
        if shown:
            t = story.delete(t, tj)
        left = None
        if ending == "background":  # the cascade, as far as the stream shows it
            for obj in (*pods, *jobs, *([js] if js is not None else [])):
                if draw(st.integers(0, 3)) > 0:
                    story.delete(t + draw(st.integers(1, 5)), obj)
        elif js is not None:
            left = js  # racing the garbage collector: the JobSet still names the gone TrainJob
            if ending == "stripped":  # propagation Orphan: the collector strips the ownerReference
                story.change(t + draw(st.integers(1, 5)), js, owner=None)
        t += draw(st.integers(5, 200))
    return story.items


LOOKALIKES = ("plain-jobset", "foreign-jobset", "plain-job", "cronjob-job")


@st.composite
def lookalike(draw, index: int) -> list[tuple[int, str, object]]:
    """Something that looks like a TrainJob's JobSet or Job and is not: never named."""
    story = _Story()
    shape = draw(st.sampled_from(LOOKALIKES))
    names = JOBSET_LOOKALIKE_NAMES if shape.endswith("jobset") else JOB_LOOKALIKE_NAMES
    ns, name = draw(st.sampled_from(NAMESPACES)), draw(st.sampled_from(names))
    t = draw(st.integers(0, 900))
    created = BEFORE_THE_STREAM if draw(st.integers(0, 2)) == 0 else T0 + timedelta(seconds=t)
    uid = f"la-{index}-{shape}-{ns}-{name}"
    skip = draw(st.sampled_from(SKIP_VALUES))
    objs: list = []
    if shape in ("plain-jobset", "foreign-jobset"):
        foreign = shape == "foreign-jobset"
        owner = OwnerSpec("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", name, f"{uid}-lws", True)
        js = IntermediateSpec(
            "JobSet",
            ns,
            name,
            uid,
            created,
            owner if foreign else None,
            template_marked=foreign,  # another controller's, marked: still not ours
            failure_actions=draw(st.sampled_from(FAILURE_POLICIES)),
            skip=skip,
        )
        t = story.emit(t, "add", js)
        labels = ((NAME_LABEL, name), (UID_LABEL, uid)) + (((MARK, "trainer"),) if foreign else ())
        job_owner = OwnerSpec(fixtures.JOBSET, "JobSet", name, uid, True)
        job = IntermediateSpec("Job", ns, f"{name}-plain-{index}", f"{uid}-job", created, job_owner, labels)
        objs = [js, job]
        gone_uid = uid
    else:
        cron = shape == "cronjob-job"
        gone_uid = f"{uid}-gone-jobset"
        labels = ((NAME_LABEL, name), (UID_LABEL, gone_uid)) + (((MARK, "trainer"),) if cron else ())
        owner = OwnerSpec(BATCH_API, "CronJob", "nightly", f"{uid}-cron", True) if cron else None
        job = IntermediateSpec("Job", ns, f"{name}-{shape}-{index}", uid, created, owner, labels, skip=skip)
        objs = [job]
    t = story.emit(t + draw(st.integers(0, 2)), "add", job)
    pods = _pods_of(draw, story, job, name, gone_uid, t + 1)
    if draw(st.integers(0, 2)) == 0:
        t = story.change(t + draw(st.integers(1, 300)), objs[0], skip=draw(st.sampled_from(SKIP_VALUES)))
    if draw(st.integers(0, 3)) == 0:
        t += draw(st.integers(1, 300))
        for obj in (*pods, *objs):
            story.delete(t, obj)
    return story.items


@st.composite
def successor_story(draw, taken: frozenset) -> list[tuple[int, str, object]]:
    """A TrainJob made again under the name of one that finished, drawn often so the case is
    met in every run of the generator, not by luck: the first finishes (podsweeper records the
    finish) and is deleted with its chain; the second, another uid, runs, and a person deletes
    its JobSet, which Trainer makes again (a JobSet made after the job's first, with no finish
    of its own). Only the first's finish could make that look like a restart; it is not the
    second's (once KNOWN BUG 3: the record read by name)."""
    story = _Story()
    free = [(ns, name) for ns in NAMESPACES for name in TRAIN_NAMES if (ns, name) not in taken]
    ns, name = draw(st.sampled_from(free))
    t = draw(st.integers(0, 300))
    for life in range(2):
        created = T0 + timedelta(seconds=t)
        tj = TrainJobSpec(
            ns, name, f"tj-next-{life}-{ns}-{name}", created, (("Created", "True", created),), None, None
        )
        t = story.emit(t, "add", tj)
        owner = OwnerSpec(fixtures.TRAINER, "TrainJob", name, tj.uid, True)
        js, jobs, pods = _jobset(draw, story, ns, name, f"js-next-{life}-0", owner, t, created)
        t += draw(st.integers(5, 120))
        if life == 0:  # it finishes, and goes with its chain
            how = draw(st.sampled_from(FINISHED_KINDS))
            at = T0 + timedelta(seconds=t)
            t = story.change(t, tj, conditions=(("Created", "True", created), (how, "True", at)))
            t += draw(st.integers(10, 200))
            for obj in (tj, *pods, *jobs, js):
                t = story.delete(t + draw(st.integers(0, 2)), obj)
            t += draw(st.integers(1, 100))
            continue
        # A person deletes the running one's JobSet (its Jobs and pods go with it); Trainer
        # makes it again at once, after the job's first.
        for obj in (*pods, *jobs, js):
            t = story.delete(t, obj)
        again = T0 + timedelta(seconds=t + draw(st.integers(0, 1)))
        _jobset(draw, story, ns, name, f"js-next-{life}-1", owner, _seconds(again), again)
    return story.items


VOLCANO_ENDINGS = ("failed", "failed", "failed", "complete", "suspended", "running")
# Half of them opted out: the rule's skip must be about as common as its warning.
VOLCANO_SKIPS = (None, "true", None, "True", "false")


@st.composite
def volcano_story(draw, taken: frozenset) -> list[tuple[int, str, object]]:
    """A TrainJob on a Volcano runtime (podGroupPolicy.volcano), drawn often so its rule is met
    in every run of the generator: Trainer makes its PodGroup (named like it, controlled by it)
    as it makes the JobSet; the job fails, completes, is suspended or runs on. What Volcano then
    does, as measured: a Failed or suspended job's pods go and its PodGroup goes back Inqueue
    (its queue reserves its minResources), or stays Pending where the capacity is short; a
    Complete one's is Completed. Sometimes the PodGroup under the name is not this TrainJob's
    (an earlier one's of the name, a plain Volcano Job's, nobody's), or it is being deleted."""
    story = _Story()
    free = [(ns, name) for ns in NAMESPACES for name in TRAIN_NAMES if (ns, name) not in taken]
    ns, name = draw(st.sampled_from(free))
    t = draw(st.integers(0, 300))
    created = T0 + timedelta(seconds=t)
    skip = draw(st.sampled_from(VOLCANO_SKIPS))
    tj = TrainJobSpec(
        ns, name, f"tj-volcano-{ns}-{name}", created, (("Created", "True", created),), None, skip
    )
    t = story.emit(t, "add", tj)
    whose = draw(st.sampled_from(["own", "own", "own", "earlier", "volcano-job", "none"]))
    owners = {
        "own": OwnerSpec(fixtures.TRAINER, "TrainJob", name, tj.uid, True),
        "earlier": OwnerSpec(fixtures.TRAINER, "TrainJob", name, f"{tj.uid}-earlier", True),
        "volcano-job": OwnerSpec("batch.volcano.sh/v1alpha1", "Job", name, f"vcjob-{ns}-{name}", True),
        "none": None,
    }
    group = IntermediateSpec("PodGroup", ns, name, f"pg-{ns}-{name}", created, owners[whose], phase="Running")
    t = story.emit(t, "add", group)
    owner = OwnerSpec(fixtures.TRAINER, "TrainJob", name, tj.uid, True)
    js, jobs, pods = _jobset(draw, story, ns, name, f"js-volcano-{ns}-{name}", owner, t, created)
    t += draw(st.integers(5, 200))
    ending = draw(st.sampled_from(VOLCANO_ENDINGS))
    if ending in ("failed", "complete"):
        how = "Failed" if ending == "failed" else "Complete"
        at = T0 + timedelta(seconds=t)
        t = story.change(t, tj, conditions=(("Created", "True", created), (how, "True", at)))
    elif ending == "suspended":
        t = story.change(t, tj, suspended=True)
    if ending != "running":
        for pod in pods:  # the Job controller (backoffLimit) or Trainer's suspend takes them
            story.delete(t + draw(st.integers(0, 2)), pod)
        phase = (
            "Completed" if ending == "complete" else draw(st.sampled_from(["Inqueue", "Inqueue", "Pending"]))
        )
        t = story.change(t + 1, group, phase=phase)
    if draw(st.integers(0, 5)) == 0:  # being deleted (a finalizer holds it)
        t = story.change(t + draw(st.integers(1, 30)), group, terminating=True)
    if draw(st.integers(0, 3)) == 0:  # the TrainJob goes, and its chain with it
        t = story.delete(t + draw(st.integers(30, 400)), tj)
        for obj in (*pods, *jobs, js, *([group] if whose == "own" else [])):
            story.delete(t + draw(st.integers(1, 5)), obj)
    return story.items
