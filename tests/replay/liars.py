"""Lying events: CloudEvent payloads that disagree with the cluster, and what judges them.

Any pod may POST to the function and any user may create objects that look like a job's
(issue "Trust against a liar"): a payload is a claim, never a fact. Only state read fresh
from the API server may lead to an act (delete, suspend), a record (an evidence store, a
finish mark), a log read or a notice (an Event, a CloudEvent).

Two halves, both pure test code (no engine code judges the engine):

* `RecordingCluster`: the simulated cluster as an API server shows it (a job that is not
  there is a 404), recording every write and every log read, so a test compares what a lie
  caused with what the truthful event (or none) causes on the same world;
* `lie_specs`: lies for the generated worlds of model_world.py: the specs of what the world
  holds now (or held), changed the way a liar would (a finish, a failure, another owner or
  uid, restart counts, container states, a delete of what exists); never applied to the
  world, only delivered. `RecordJudge` then holds every record and log read to what the
  world showed.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from podsweeper.cluster.simulated import SimulatedCluster
from podsweeper.decisions import Result
from podsweeper.model import EventRecord, FinishMark, JobRef
from tests.replay.model_mpi import LauncherJobSpec
from tests.replay.model_trainer import ChainPodSpec, IntermediateSpec, TrainJobSpec
from tests.replay.model_world import KINDS, ContainerSpec, JobSpec, OwnerSpec, PodSpec

# What a lie may not cause: (what, namespace, name, detail) per call.
Effect = tuple[str, ...]


class RecordingCluster(SimulatedCluster):
    """The simulated cluster as a live API server: every job it lacks is gone (404), and
    every call that writes or reads a log is recorded in `effects`, in order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.effects: list[Effect] = []

    def knows_job(self, ref: JobRef) -> bool:
        return True

    def container_log(
        self, namespace: str, pod: str, container: str, previous: bool, lines: int, limit_bytes: int
    ) -> str | None:
        self.effects.append(("log", namespace, pod, container))
        return f"the log of {namespace}/{pod}/{container}"

    def write_finish_mark(self, job: JobRef, mark: FinishMark) -> None:
        self.effects.append(("finish-mark", job.namespace, job.name, f"{mark.condition} uid={job.uid}"))
        super().write_finish_mark(job, mark)

    def write_evidence(self, job: JobRef, records: list[dict[str, Any]], version: str | None) -> bool:
        pods = ",".join(sorted({f"{r.get('pod')}/{r.get('container')}" for r in records}))
        self.effects.append(("evidence", job.namespace, job.name, f"owner uid={job.uid} pods={pods}"))
        return super().write_evidence(job, records, version)

    def record_event(self, event: EventRecord) -> bool:
        self.effects.append(("event", event.involved.namespace, event.name, event.reason))
        return super().record_event(event)

    def delete_pod(
        self, namespace: str, name: str, uid: str, resource_version: str = "", force: bool = False
    ) -> Result:
        self.effects.append(("delete-pod", namespace, name, uid))
        return super().delete_pod(namespace, name, uid, resource_version, force)

    def delete_intermediate(self, link: Any, namespace: str, name: str, uid: str) -> Result:
        self.effects.append((f"delete-{link.kind}", namespace, name, uid))
        return super().delete_intermediate(link, namespace, name, uid)

    def suspend_job(self, ref: JobRef) -> Result:
        self.effects.append(("suspend", ref.namespace, ref.name, f"{ref.kind.kind} uid={ref.uid}"))
        return super().suspend_job(ref)


# -- lies for the generated worlds ---------------------------------------------------------

LIE_UID = "lie-uid"
LIE_KINDS = (
    "job finished",
    "job running",
    "job wrong uid",
    "job deleted",
    "mpijob failed unsettled",
    "trainjob failed",
    "trainjob complete",
    "trainjob deleted",
    "intermediate orphaned",
    "intermediate deleted",
    "pod failed",
    "pod crash-looping",
    "pod of another job",
    "pod of no job",
    "pod wrong uid",
    "pod deleted",
    "pod named after another",
)


@dataclass(frozen=True)
class Lie:
    """A payload the world does not back: `verb` of `spec`, delivered in `mode`."""

    kind: str
    verb: str
    spec: object
    mode: str = "resource"


def _failed(restarts: int, exit_code: int = 1) -> tuple[ContainerSpec, ...]:
    return (ContainerSpec("terminated", restarts, exit_code),)


def _looping(restarts: int) -> tuple[ContainerSpec, ...]:
    return (ContainerSpec("crashloop", restarts, 1),)


def lie_specs(specs: list[object], rng: random.Random, now: datetime) -> list[Lie]:
    """Lies about `specs` (what the world holds now, or held): each one a claim the world does
    not back, or a delete of something that still exists. Drawn with `rng`, a few per call."""
    jobs = [s for s in specs if isinstance(s, JobSpec)]
    trainjobs = [s for s in specs if isinstance(s, TrainJobSpec)]
    links = [s for s in specs if isinstance(s, IntermediateSpec) and not isinstance(s, LauncherJobSpec)]
    pods = [s for s in specs if isinstance(s, PodSpec)]
    out: list[Lie] = []
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(LIE_KINDS)
        lie = _lie(kind, jobs, trainjobs, links, pods, rng, now)
        if lie is not None:
            mode = "ref" if rng.random() < 0.15 else "resource"
            out.append(replace(lie, mode=mode))
    return out


def _lie(
    kind: str,
    jobs: list[JobSpec],
    trainjobs: list[TrainJobSpec],
    links: list[IntermediateSpec],
    pods: list[PodSpec],
    rng: random.Random,
    now: datetime,
) -> Lie | None:
    when = now - timedelta(seconds=rng.choice([0, 5, 60, 3600]))
    if kind.startswith("job") and jobs:
        job = rng.choice(jobs)
        if kind == "job finished":
            done = rng.choice(["Succeeded", "Failed"])
            conditions = (("Created", "True"), ("Running", "False"), (done, "True"))
            return Lie(kind, "update", replace(job, conditions=conditions, since=when))
        if kind == "job running":
            return Lie(kind, "update", replace(job, conditions=(("Created", "True"), ("Running", "True"))))
        if kind == "job wrong uid":
            return Lie(kind, rng.choice(["update", "delete"]), replace(job, uid=LIE_UID))
        return Lie(kind, "delete", job)
    if kind == "mpijob failed unsettled" and jobs:
        mpi = [j for j in jobs if j.kind == "MPIJob"] or jobs
        job = replace(
            rng.choice(mpi),
            kind="MPIJob",
            api_version="kubeflow.org/v2beta1",
            conditions=(("Created", "True"), ("Running", "False"), ("Failed", "True")),
            settled=False,
            since=when,
        )
        return Lie(kind, "update", job)
    if kind.startswith("trainjob") and trainjobs:
        tj = rng.choice(trainjobs)
        if kind == "trainjob deleted":
            return Lie(kind, "delete", tj)
        done = "Failed" if kind == "trainjob failed" else "Complete"
        at = max(tj.created, when - timedelta(seconds=rng.choice([0, 30, 600])))
        conditions = (("Created", "True", tj.created), (done, "True", at))
        reason = "DeadlineExceeded" if done == "Failed" and rng.random() < 0.3 else ""
        uid = tj.uid if rng.random() < 0.8 else LIE_UID
        return Lie(kind, "update", replace(tj, conditions=conditions, failed_reason=reason, uid=uid))
    if kind.startswith("intermediate") and links:
        link = rng.choice(links)
        if kind == "intermediate deleted":
            return Lie(kind, "delete", link)
        return Lie(kind, rng.choice(["add", "update"]), replace(link, owner=None))
    if kind.startswith("pod") and pods:
        pod = rng.choice(pods)
        restarts = rng.choice([0, 3, 50])
        if kind == "pod failed":
            return Lie(kind, "update", replace(pod, phase="Failed", containers=_failed(restarts)))
        if kind == "pod crash-looping":
            return Lie(kind, "update", replace(pod, phase="Running", containers=_looping(restarts or 50)))
        if kind == "pod of another job" and jobs:
            job = rng.choice(jobs)
            other = replace(
                pod,
                owner=OwnerSpec(job.api_version, job.kind, job.name, job.uid, True),
                labels=_job_labels(job.kind, job.name),
                containers=_failed(restarts),
                phase="Failed",
            )
            return Lie(kind, "update", other)
        if kind == "pod of no job":  # a pod with no job (a database) dressed as a job's
            kind_of = rng.choice(KINDS)
            name = rng.choice(["a", "b"])
            dressed = replace(
                pod,
                owner=OwnerSpec("kubeflow.org/v1", kind_of, name, rng.choice([LIE_UID, ""]), True),
                labels=_job_labels(kind_of, name),
                containers=_failed(restarts),
                phase="Failed",
            )
            return Lie(kind, "update", dressed)
        if kind == "pod wrong uid":
            return Lie(
                kind, rng.choice(["update", "delete"]), replace(pod, uid=LIE_UID, containers=_failed(3))
            )
        if kind == "pod deleted":
            return Lie(kind, "delete", replace(pod, containers=_failed(restarts)))
        others = [p for p in pods if p.key != pod.key]
        if kind == "pod named after another" and others:
            target = rng.choice(others)
            named = replace(pod, name=target.name, namespace=target.namespace, containers=_failed(restarts))
            return Lie(kind, "update", named)
    return None


def _job_labels(kind: str, name: str) -> tuple[tuple[str, str], ...]:
    return (
        ("training.kubeflow.org/job-name", name),
        ("training.kubeflow.org/operator-name", f"{kind.lower()}-controller"),
        ("training.kubeflow.org/replica-type", "worker"),
    )


# -- judging records and log reads against the world ----------------------------------------


def failed_runs(spec: PodSpec) -> set[tuple[str, str, int]]:
    """(pod uid, container name, restart count) of each failed run the pod shows, as
    render_containers writes it: a container terminated with an exit code other than 0 (reason
    Error), or crash-looping with a last run (lastState reason Error, whatever its code).
    Container names as render_containers gives them (c0, c1, ...)."""
    runs = set()
    for index, c in enumerate(spec.containers):
        ended = c.state == "terminated" and c.exit_code not in (None, 0)
        if ended or (c.state == "crashloop" and c.exit_code is not None):
            runs.add((spec.uid, f"c{index}", c.restarts))
    return runs


@dataclass
class RecordJudge:
    """What the world has shown so far, to judge records and log reads by: a record of a
    failed run names a run some pod showed; a log is read only of a container of a pod that
    exists now and showed a failed run; a finish mark only for a TrainJob uid that finished."""

    shown_runs: set[tuple[str, str, int]] = field(default_factory=set)
    # pod uid -> the job (kind, namespace, name) the world's pod of that uid belongs to
    pod_jobs: dict[str, set[tuple[str, str]]] = field(default_factory=dict)

    def saw(self, spec: object, job_of: tuple[str, str] | None) -> None:
        """A change the world made (not a lie): its failed runs count as shown."""
        if isinstance(spec, PodSpec):
            self.shown_runs |= failed_runs(spec)
            if job_of is not None:
                self.pod_jobs.setdefault(spec.uid, set()).add(job_of)

    def judge(self, cluster: RecordingCluster, world: Any, since: int, what: str) -> None:
        """Every effect recorded after position `since` must be backed by the world."""
        for effect in cluster.effects[since:]:
            name = effect[0]
            if name == "log":
                _, namespace, pod_name, container = effect
                pod = world.pods.get((namespace, pod_name))
                assert pod is not None, f"{what}: read the log of {namespace}/{pod_name}, no such pod"
                ran = {(uid, c) for uid, c, _ in failed_runs(pod)}
                assert (pod.uid, container) in ran, (
                    f"{what}: read the log of {namespace}/{pod_name} container {container}, which shows "
                    f"no failed run ({pod})"
                )
            elif name == "finish-mark":
                _, namespace, job_name, detail = effect
                uid = detail.rpartition("uid=")[2]
                seen = world.finished_uids.get((namespace, job_name), set())
                assert uid in seen, (
                    f"{what}: wrote a finish mark {detail} for TrainJob {namespace}/{job_name}, which "
                    f"never finished (finished uids: {sorted(seen)})"
                )
        self._judge_stores(cluster, what)

    def _judge_stores(self, cluster: RecordingCluster, what: str) -> None:
        for (namespace, store), (text, _) in cluster.evidence.items():
            job_name = store.removeprefix("podsweeper-evidence-")
            for record in json.loads(text):
                run = (
                    record.get("pod_uid", ""),
                    record.get("container", ""),
                    int(record.get("restart_count", 0)),
                )
                assert run in self.shown_runs, (
                    f"{what}: {namespace}/{store} keeps a run no pod showed: {record}"
                )
                jobs = self.pod_jobs.get(run[0], set())
                assert (namespace, job_name) in jobs, (
                    f"{what}: {namespace}/{store} keeps a run of pod {record.get('pod')} (uid {run[0]}), "
                    f"which belongs to {sorted(jobs) or 'no job'}"
                )


def chain_pod(spec: PodSpec) -> bool:
    return isinstance(spec, ChainPodSpec)
