"""MPIJob v2beta1 launcher chains for the generated worlds: MPIJob -> batch Job `<name>-launcher` -> Pod.

Shaped like tests/fixtures/mpi.py (mpi-operator v0.8.0): the launcher pod is controlled by
the batch Job `<name>-launcher` and labelled `training.kubeflow.org/job-name: <name>` and
`operator-name: mpi-operator`; the batch Job is controlled by the MPIJob, or, in a
look-alike, by nothing, by another MPIJob uid or by another kind. The Job runs on or
finishes (Complete/Failed).

The shipped ApiServerSource does not watch launcher Jobs, so their changes are world
changes only (`unwatched`): the live harness applies them to its API server and never
delivers them; a replay never sees them, so it can never prove a launcher pod (nor may it
decide one). The MPIJob runs, finishes (completionTime set), or is marked Failed without
completionTime while its launcher runs on (a worker evicted, mpi-operator#647; rule
failed-mpijob-running), maybe settling later when its launcher fails by itself; Kueue may
queue it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta

from hypothesis import strategies as st

from tests.fixtures import builders
from tests.replay.model_trainer import IntermediateSpec
from tests.replay.model_world import (
    JOB_NAMES,
    NAMESPACES,
    OFTEN_SKIP_VALUES,
    SKIP_VALUES,
    T0,
    JobSpec,
    OwnerSpec,
    PodSpec,
    container_spec,
)

V2BETA1 = "kubeflow.org/v2beta1"
SUFFIX = "-launcher"
OPERATOR = "mpi-operator"
JOB_OWNERS = ("own",) * 6 + ("none", "other-uid", "other-kind")
CONDITIONS_RUNNING = ((("Created", "True"),), (("Created", "True"), ("Running", "True")))
CONDITIONS_DONE = (
    (("Created", "True"), ("Running", "False"), ("Succeeded", "True")),
    (("Created", "True"), ("Running", "False"), ("Failed", "True")),
)
EVICTED = (("Created", "True"), ("Running", "False"), ("Failed", "True"))
FATES = ("runs", "done", "done", "done", "done", "done", "evicted", "evicted")
CLEAN = ("All", "All", "All", "None", "Running", None)


@dataclass(frozen=True)
class LauncherJobSpec(IntermediateSpec):
    """A batch Job named like an MPIJob's launcher; `finished`: Complete or Failed, or None."""

    finished: str | None = None

    def render(self) -> dict:
        obj = super().render()
        obj["metadata"].pop("labels", None)
        obj["spec"] = {"backoffLimit": 0, "template": {"spec": {"containers": [{"name": "c"}]}}}
        obj["status"] = (
            {
                "conditions": [
                    {"type": self.finished, "status": "True", "lastTransitionTime": builders.stamp(T0)}
                ]
            }
            if self.finished
            else {"active": 1}
        )
        return obj


def unwatched(spec) -> bool:
    """A change the shipped source never sends (a launcher Job's)."""
    return isinstance(spec, LauncherJobSpec)


@st.composite
def launcher_line(draw, index: int, taken: frozenset) -> list[tuple[int, str, object]]:
    """One MPIJob v2beta1 (a key no other MPIJob line has), its launcher Job and that Job's pod."""
    free = [(ns, name) for ns in NAMESPACES for name in JOB_NAMES if (ns, name) not in taken]
    ns, name = draw(st.sampled_from(free))
    items: list[tuple[int, str, object]] = []
    uid = f"mpi-{index}-{ns}-{name}"
    base = dict(
        kind="MPIJob",
        api_version=V2BETA1,
        namespace=ns,
        name=name,
        uid=uid,
        run_policy_clean=draw(st.sampled_from(CLEAN)),
        top_level_clean=None,
        backoff_limit=draw(st.sampled_from([None, 0])),
        active_deadline=None,
        restart_policy=None,
        queued=draw(st.integers(0, 2)) == 0,
    )
    t = draw(st.integers(0, 400))
    skip = draw(st.sampled_from(SKIP_VALUES))
    items.append((t, "add", JobSpec(**base, skip=skip, conditions=draw(st.sampled_from(CONDITIONS_RUNNING)))))
    shape = draw(st.sampled_from(JOB_OWNERS))
    owner = {
        "own": OwnerSpec(V2BETA1, "MPIJob", name, uid, True),
        "none": None,
        "other-uid": OwnerSpec(V2BETA1, "MPIJob", name, f"{uid}-earlier", True),
        "other-kind": OwnerSpec("batch/v1", "CronJob", name, f"{uid}-cron", True),
    }[shape]
    job = LauncherJobSpec("Job", ns, name + SUFFIX, f"{uid}-launcher", T0 + timedelta(seconds=t), owner)
    items.append((t + 1, "add", job))
    pod_states = [draw(st.sampled_from(["Pending", "Running"]))]
    fate = draw(st.sampled_from(FATES))
    t_done = t + draw(st.integers(5, 300))
    if fate == "evicted":  # Failed without completionTime (mpi-operator#647): the launcher runs on
        evicted = JobSpec(
            **base, skip=draw(st.sampled_from(OFTEN_SKIP_VALUES)), conditions=EVICTED, settled=False
        )
        items.append((t_done, "update", replace(evicted, since=T0 + timedelta(seconds=t_done))))
        if draw(st.booleans()):  # the launcher fails by itself later: the job settles
            t_done += draw(st.integers(10, 200))
            items.append((t_done, "update", replace(evicted, settled=True)))
            items.append((t_done, "update", replace(job, finished="Failed")))
            pod_states.append(draw(st.sampled_from(["Failed", "Running"])))
    elif fate == "done":
        how = draw(st.sampled_from(CONDITIONS_DONE))
        done_job = JobSpec(**base, skip=draw(st.sampled_from(SKIP_VALUES)), conditions=how)
        items.append((t_done, "update", replace(done_job, since=T0 + timedelta(seconds=t_done))))
        if draw(st.booleans()):  # the launcher Job finished (else it runs on: unproven)
            done = "Complete" if how[-1][0] == "Succeeded" else "Failed"
            items.append((t_done, "update", replace(job, finished=done)))
            pod_states.append(draw(st.sampled_from(["Succeeded", "Failed", "Failed", "Running"])))
    pod_base = dict(
        namespace=ns,
        name=f"{name}{SUFFIX}-{index}",
        uid=f"{uid}-launcher-pod",
        owner=OwnerSpec("batch/v1", "Job", job.name, job.uid, True),
        labels=(
            ("training.kubeflow.org/job-name", name),
            ("training.kubeflow.org/job-role", "launcher"),
            ("training.kubeflow.org/operator-name", OPERATOR),
        ),
        created=T0 + timedelta(seconds=t + 2),
    )
    terminating = False
    for position, phase in enumerate(pod_states):
        terminating = terminating or draw(st.integers(0, 9)) == 0
        pod = PodSpec(
            **pod_base,
            phase=phase,
            containers=tuple(draw(st.lists(container_spec(), max_size=1))),
            skip=draw(st.sampled_from(SKIP_VALUES)),
            terminating=terminating,
        )
        at = t + 2 if position == 0 else t_done + draw(st.integers(0, 20))
        items.append((at, "add" if position == 0 else "update", pod))
    if draw(st.integers(0, 4)) == 0:  # the MPIJob deleted (the collector takes its Job and pod later)
        last = [spec for _, _, spec in items if isinstance(spec, JobSpec)][-1]
        items.append((t_done + draw(st.integers(30, 200)), "delete", last))
    return items
