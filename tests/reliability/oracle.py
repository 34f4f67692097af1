"""The rules of behaviour.md, restated independently of the function's code.

Nothing here imports `function`: the oracle reads the generator's specs (world.py), keeps
its own picture of the cluster, and answers two questions:

* `named(pod, now)`: which rule (and action) the rules name for this pod now, or None;
  a decision the function makes must match it exactly (safety: never a delete the rules
  do not name);
* `must_delete(now)`: the pods still present that the rules name for deletion, which a
  final sweep has to leave empty (liveness).

Readings of behaviour.md where it is silent (the README's "Choices where the contract is
silent" agrees with each):
* a pod with a controller that is not a training job is never ours, whatever its labels;
* a pod owned by no controller belongs to a job through its labels only when
  `training.kubeflow.org/operator-name` tells the kind;
* a suspended job's pods are left alone even if the job also shows a finished condition;
* the opt-out annotation counts when its value is "true" in any letter case; a deleted
  job's annotation no longer protects its orphans (the sweep could not know it);
* liveness is owed only for pods the API can find by label (`training.kubeflow.org/job-name`,
  or the pre-v1.6 `group-name: kubeflow.org` + `job-name`) under the name of their job:
  behaviour.md has the function LIST a job's pods by label.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from tests.reliability.world import T0, JobSpec, PodSpec

GROUP = "kubeflow.org"
VERSIONS = {
    "PyTorchJob": ("v1",),
    "TFJob": ("v1",),
    "MPIJob": ("v1", "v2beta1"),
    "XGBoostJob": ("v1",),
    "PaddleJob": ("v1",),
    "JAXJob": ("v1",),
}
OPERATOR_NAMES = {f"{kind.lower()}-controller": kind for kind in VERSIONS}
RESTARTING = ("OnFailure", "Always", "ExitCode")
JOB_NAME = "training.kubeflow.org/job-name"
OPERATOR_NAME = "training.kubeflow.org/operator-name"

GONE, UNKNOWN = "gone", "unknown"


def is_true(value: str | None) -> bool:
    return value is not None and value.lower() == "true"


def finished(job: JobSpec) -> bool:
    return any(t in ("Succeeded", "Failed") and s == "True" for t, s in job.conditions)


def suspended(job: JobSpec) -> bool:
    return ("Suspended", "True") in job.conditions


def clean_pod_policy(job: JobSpec) -> str:
    if job.run_policy_clean is not None:
        return job.run_policy_clean
    if job.kind == "MPIJob" and job.top_level_clean is not None:
        return job.top_level_clean
    return "None"


def belongs(pod: PodSpec) -> tuple[str, str, str | None] | None:
    """(kind, job name, owner uid or None) of the job the pod belongs to, or None."""
    owner = pod.owner
    if owner is not None and owner.controller is True:
        group, _, version = owner.api_version.rpartition("/")
        if group == GROUP and version in VERSIONS.get(owner.kind, ()):
            return owner.kind, owner.name, owner.uid or None
        return None  # another controller owns it
    name = pod.label(JOB_NAME)
    if not name and pod.label("group-name") == GROUP:
        name = pod.label("job-name")
    kind = OPERATOR_NAMES.get(pod.label(OPERATOR_NAME) or "")
    if not name or kind is None:
        return None
    return kind, name, None


def findable(pod: PodSpec) -> bool:
    """Can a LIST by label under the owning job's name return this pod?"""
    owner = belongs(pod)
    if owner is None:
        return False
    name = owner[1]
    return pod.label(JOB_NAME) == name or (pod.label("group-name") == GROUP and pod.label("job-name") == name)


def crash_loop_restarts(pod: PodSpec) -> int:
    return max((c.restarts for c in pod.containers if c.state == "crashloop"), default=0)


@dataclass
class World:
    """The oracle's own picture: what the stream (replay) or the cluster (live) holds now.

    `live=False`: replay semantics, a job never shown is unknown. `live=True`: a real
    cluster, where a job that is not there answers 404, i.e. it is gone.
    """

    settings: dict
    live: bool = False
    pods: dict[tuple, PodSpec] = field(default_factory=dict)
    jobs: dict[tuple, JobSpec] = field(default_factory=dict)
    gone: set = field(default_factory=set)
    deleted: set = field(default_factory=set)  # uids of pods podsweeper deleted

    # -- the stream ---------------------------------------------------------------------
    def observe(self, verb: str, spec) -> bool:
        """Apply a watch change; False when it is about a pod podsweeper already deleted."""
        if isinstance(spec, PodSpec):
            if spec.uid in self.deleted:
                return False
            if verb == "delete":
                self.pods.pop(spec.key, None)
            else:
                self.pods[spec.key] = spec
        elif isinstance(spec, JobSpec):
            if verb == "delete":
                self.jobs.pop(spec.key, None)
                self.gone.add(spec.key)
            else:
                self.jobs[spec.key] = spec
                self.gone.discard(spec.key)
        return True

    def podsweeper_deleted(self, namespace: str, name: str, uid: str) -> None:
        pod = self.pods.get((namespace, name))
        assert pod is not None and pod.uid == uid, f"deleted {namespace}/{name} uid {uid}: not in the world"
        del self.pods[(namespace, name)]
        self.deleted.add(uid)

    # -- the rules ----------------------------------------------------------------------
    @staticmethod
    def _names(value: str) -> set[str]:
        return {part.strip() for part in value.split(",") if part.strip()}

    def allowed(self, namespace: str) -> bool:
        if namespace in self._names(self.settings["exclude_namespaces"]):
            return False
        wanted = self._names(self.settings["namespaces"])
        return not wanted or namespace in wanted

    def job_of(self, pod: PodSpec):
        kind, name, uid = belongs(pod)
        job = self.jobs.get((kind, pod.namespace, name))
        if job is not None:
            return GONE if uid is not None and job.uid != uid else job
        if self.live or (kind, pod.namespace, name) in self.gone:
            return GONE
        return UNKNOWN

    def named(self, pod: PodSpec, now: datetime) -> tuple[str, str] | None:
        """(rule, action) the rules name for this pod now; action delete / warn / skip."""
        if not self.allowed(pod.namespace) or pod.terminating or belongs(pod) is None:
            return None
        job = self.job_of(pod)
        if job == UNKNOWN:
            return None
        named = None
        if job == GONE:
            age = None if pod.created is None else (now - pod.created).total_seconds()
            if age is not None and age >= self.settings["orphan_grace_seconds"]:
                named = ("orphan", "delete")
        elif suspended(job) or (finished(job) and self.left_to_operator(job, pod, now)):
            return None
        elif finished(job) and pod.phase in ("Pending", "Running") and self.settings["sweep_active_pods"]:
            named = ("finished-job-active-pod", "delete")
        elif (
            finished(job)
            and clean_pod_policy(job) == "All"
            and pod.phase in ("Succeeded", "Failed", "Unknown")
        ):
            named = ("clean-pod-policy-all", "delete")
        elif (
            not finished(job)
            and job.backoff_limit is None
            and job.active_deadline is None
            and crash_loop_restarts(pod) >= self.settings["crashloop_restarts"]
        ):
            named = ("crash-loop", self.settings["crashloop_action"])
        if named is None:
            return None
        opted_out = is_true(pod.skip) or (job != GONE and is_true(job.skip))
        return (named[0], "skip") if opted_out else named

    def left_to_operator(self, job: JobSpec, pod: PodSpec, now: datetime) -> bool:
        """Whether the operator's own cleanup still has time for this pod: its cleanPodPolicy
        names it (Running: Pending/Running pods; All: every pod) and the job finished (every
        generated condition turned at T0) less than the operator grace ago."""
        policy = clean_pod_policy(job)
        owned = policy == "All" or (policy == "Running" and pod.phase in ("Pending", "Running"))
        grace = self.settings.get("operator_grace_seconds", 30)
        return owned and (now - T0).total_seconds() < grace

    def warns_no_backoff_limit(self, job: JobSpec) -> bool | None:
        """True/False when behaviour.md decides; None when it depends on an unstated default."""
        if not self.allowed(job.namespace) or job.backoff_limit is not None:
            return False
        if job.restart_policy is None:
            return None  # the kind's default restartPolicy decides; behaviour.md names none
        return job.restart_policy in RESTARTING

    def must_delete(self, now: datetime) -> list[tuple[PodSpec, tuple[str, str]]]:
        out = []
        for pod in self.pods.values():
            named = self.named(pod, now)
            if named is not None and named[1] == "delete" and findable(pod):
                out.append((pod, named))
        return out
