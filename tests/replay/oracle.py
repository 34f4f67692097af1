"""The rules of docs/rules.md, restated independently of the function's code.

Nothing here imports `function`: the oracle reads the generator's specs (model_world.py), keeps
its own picture of the cluster, and answers two questions:

* `named(pod, now)`: which rule (and action) the rules name for this pod now, or None;
  a decision the function makes must match it exactly (safety: never a delete the rules
  do not name);
* `must_delete(now)`: the pods still present that the rules name for deletion, which a
  final sweep has to leave empty (liveness).

Readings of docs/rules.md where it is silent (the README's "Choices where the contract is
silent" agrees with each):
* a pod with a controller that is not a training job is never ours, whatever its labels;
* a pod owned by no controller belongs to a job through its labels only when
  `training.kubeflow.org/operator-name` tells the kind;
* a suspended job's pods are left alone even if the job also shows a finished condition;
* crash-loop with PODSWEEPER_CRASHLOOP_ACTION=suspend names the pod with action suspend (what
  is suspended is the pod's job, once per job and event); a warning instead when Kueue queues
  the job (label kueue.x-k8s.io/queue-name);
* the opt-out annotation counts when its value is "true" in any letter case; a deleted
  job's annotation no longer protects its orphans (the sweep could not know it);
* failed-mpijob-running: an MPIJob v2beta1 Failed without completionTime is not finished
  for the pod rules; once Failed for the operator grace (its condition's time), not
  suspended, it is suspended; a warning instead when Kueue queues it; skip when it opts out;
* the mpi-operator's launcher (MPIJob v2beta1, specs of model_mpi.py): a pod controlled by
  the batch Job `<name>-launcher` and labelled with the job's name and `operator-name:
  mpi-operator` is named only when that Job (read now) is controlled by the MPIJob of that
  name (kind and uid; the MPIJob served at v2beta1) and has finished (Complete or Failed
  "True"), and is not terminating; then the pod rules apply as to any pod of the job, with no
  operator grace (the operator never deletes a launcher pod); never `orphan`;
* stuck-terminating (opt-in, PODSWEEPER_STUCK_TERMINATING_SECONDS): a pod of a training job
  (its controller a training kind, or its labels naming one; never another controller's, never
  an mpi-operator launcher's), terminating, on a node (spec.nodeName) that is NotReady,
  Unknown or gone, whose deletionTimestamp is at least that many seconds ago: force-delete;
  skip when the pod or the job of its name opts out. Kueue's safe-to-forcefully-delete on the
  pod: "false", never; "true", not before 60 s plus the operator grace in force (Kueue's turn). Only the sweep decides it, over the pods
  a LIST by the training labels finds. A replay knows no nodes (every node counts as Ready),
  so there it never fires;
* liveness is owed only for pods the API can find by label (`training.kubeflow.org/job-name`,
  or the pre-v1.6 `group-name: kubeflow.org` + `job-name`) under the name of their job:
  docs/rules.md has the function LIST a job's pods by label.

Namespace policy (docs/configuration.md, "Namespace policy"), restated: a Namespace's
annotations `podsweeper.dev/mode` (off, dry-run, live), `podsweeper.dev/crashloop-action` (warn,
suspend, delete), `podsweeper.dev/orphan-grace-seconds` and `podsweeper.dev/operator-grace-seconds`
(digits) replace the global setting in that namespace when allowed; otherwise the global one
holds. Always allowed: off, dry-run, warn, a grace no longer than the maximum (and not shorter
than the global one). live under a global dry-run only with the live allowance; a crash-loop
action other than warn and the global one only when the allowance lists it; a grace shorter
than the global one only down to the minimum, when one is set. `off`: nothing is decided there
(as outside the namespaces); `dry-run`: decisions as usual, nothing deleted or suspended. The
replay knows a namespace's annotations from the Namespace events of its stream, in order.

Kubeflow Trainer v2 (TrainJob -> JobSet -> batch Job -> Pod, specs of model_trainer.py) is
restated from the rules' statement, with its own little model of the chain (`chain_named`):
the TrainJob, the JobSet of its name, the batch Jobs labelled with that name, the pods
labelled with a JobSet's uid. Its decisions are about JobSets and Jobs (orphan deletes) and
about the TrainJob (the unbounded-restarts warning, the restarted-after-finish suspend),
never about a pod:
* finished-trainjob-restarted: the TrainJob exists, is not suspended, had finished (a
  Complete or Failed condition "True"; finished_at its lastTransitionTime) and its own JobSet
  (its name, controlled by it, not terminating) was created after finished_at: suspend the
  TrainJob; a warning instead when Kueue queues it (label kueue.x-k8s.io/queue-name) or
  another controller manages it (spec.managedBy); skip when the TrainJob opts out. A
  finished TrainJob's own JobSet is left to the JobSet controller. (This rule replaced
  finished-trainjob-active-jobset, "delete the JobSet", which only got a Failed TrainJob
  restarted by Trainer; the generated worlds never erase a finished condition, so the
  function's own record of a finish says no more here than the condition does.)
* deadline-exceeded-jobset-running: the TrainJob exists, its Failed condition is "True" with
  reason DeadlineExceeded since finished_at at least the operator grace ago, and its own
  JobSet (as above) was created at or before finished_at and still has a Pending or Running
  pod (not terminating, controlled by a batch Job the JobSet controls) labelled with its uid:
  delete that JobSet;
  skip when the TrainJob or the JobSet opts out. (Trainer deletes it once at the deadline and
  never again when that fails, kubeflow/trainer#3833.)
* unbounded-jobset-restarts: on a JobSet add only, the TrainJob exists, has not finished,
  has no activeDeadlineSeconds, and its own JobSet has a failurePolicy rule that restarts
  without counting (RestartJobSetAndIgnoreMaxRestarts, RestartJobAndIgnoreMaxRestarts): warn
  about the TrainJob; skip only by the TrainJob's opt-out.
* orphan: a JobSet named like the TrainJob, not controlled by the existing TrainJob, not
  terminating, controlled by nothing or by a TrainJob, and controlled by a TrainJob or marked
  (`trainer.kubeflow.org/trainjob-ancestor-step` on a replicatedJob template), at least the
  orphan grace old; a batch Job labelled with the TrainJob's name, not controlled by the
  current (existing, not terminating) JobSet of that name, controlled by nothing or by a
  JobSet, marked itself, at least the orphan grace old: delete it; skip when the TrainJob (if
  it exists) or the object opts out.
* expired-trainjob (opt-in: PODSWEEPER_TRAINJOB_TTL_SECONDS above 0): the TrainJob exists,
  finished (a Complete or Failed condition "True"; finished_at its lastTransitionTime) at least
  its TTL ago: delete the TrainJob (its JobSet, Jobs and pods go with it: background
  propagation); skip when it opts out. Its TTL: the namespace's
  `podsweeper.dev/trainjob-ttl-seconds` if allowed (`off` always; seconds only where the
  platform turned the TTL on, and not below max(PODSWEEPER_TRAINJOB_TTL_MIN_SECONDS, 1)), else
  the global one; then the job's own `podsweeper.dev/ttl-seconds-after-finished` (trimmed):
  `off` in any case, none; a whole number of seconds (at most 9 digits), raised to the floor,
  only if that is shorter; anything else keeps the job (none). Never named: a TrainJob suspended, with spec.managedBy
  another controller's (not Trainer's), with an ownerReference, with Trainer's own
  spec.ttlSecondsAfterFinished, whose own JobSet (as above) was created after finished_at, or
  with a Pending or Running pod (not terminating) labelled with its name (jobset-name).
  podsweeper's own record of the finish (the JobSet it finished with) keeps a TrainJob whose
  live JobSet is another: the generated worlds never make two JobSets of one TrainJob before
  its finish, so the record never names another JobSet than the live one made by then.
* a TrainJob never shown to a replay is unknown: nothing is decided for its name.
Readings where the statement is silent:
* the opt-out annotation counts in any letter case, as for v1;
* a batch Job already terminating is not named (its delete is under way): the statement
  says "not terminating" of the JobSets only, and the function agrees on this reading;
* deleting a JobSet or Job takes what it controls with it (background propagation, the
  garbage collector's part): the Jobs it controls and the pods they control, and, as the
  replay's simulated API server does, the pods labelled with a deleted JobSet's uid.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from tests.replay.model_mpi import LauncherJobSpec
from tests.replay.model_trainer import IntermediateSpec, TrainJobSpec
from tests.replay.model_world import T0, JobSpec, NamespaceSpec, PodSpec

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

# Trainer v2, as the statement names it.
TRAINJOB, JOBSET, BATCH_JOB = "TrainJob", "JobSet", "Job"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"
ANCESTOR_MARK = "trainer.kubeflow.org/trainjob-ancestor-step"
UNBOUNDED_ACTIONS = frozenset({"RestartJobSetAndIgnoreMaxRestarts", "RestartJobAndIgnoreMaxRestarts"})
UNBOUNDED_JOBSET_RESTARTS = "unbounded-jobset-restarts"
FINISHED_TRAINJOB_RESTARTED = "finished-trainjob-restarted"
DEADLINE_EXCEEDED_JOBSET_RUNNING = "deadline-exceeded-jobset-running"
FAILED_TRAINJOB_PODGROUP = "failed-trainjob-podgroup"
PODGROUP = "PodGroup"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
TRAINER_CONTROLLER = "trainer.kubeflow.org/trainjob-controller"  # a TrainJob's own managedBy
ORPHAN = "orphan"
EXPIRED_TRAINJOB = "expired-trainjob"
NAMESPACE_TTL = "podsweeper.dev/trainjob-ttl-seconds"
DEFAULT_TTL_FLOOR = 600  # PODSWEEPER_TRAINJOB_TTL_MIN_SECONDS
MPI_OPERATOR = "mpi-operator"
DEFAULT_GRACE = 30  # PODSWEEPER_OPERATOR_GRACE_SECONDS and PODSWEEPER_ORPHAN_GRACE_SECONDS


def is_true(value: str | None) -> bool:
    return value is not None and value.lower() == "true"


def finished(job: JobSpec) -> bool:
    """Succeeded or Failed "True"; not an MPIJob v2beta1 Failed without completionTime."""
    return any(t in ("Succeeded", "Failed") and s == "True" for t, s in job.conditions) and not unsettled(job)


def unsettled(job: JobSpec) -> bool:
    """An MPIJob v2beta1 Failed without completionTime: its operator still runs it."""
    return (
        job.api_version == "kubeflow.org/v2beta1" and ("Failed", "True") in job.conditions and not job.settled
    )


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


def launcher_of(pod: PodSpec) -> str | None:
    """The MPIJob name of a launcher pod (controlled by the batch Job `<name>-launcher`,
    labelled job-name `<name>` and operator-name mpi-operator), or None."""
    owner, name = controller_of(pod), pod.label(JOB_NAME)
    if owner is None or not name or pod.label(OPERATOR_NAME) != MPI_OPERATOR:
        return None
    return (
        name
        if (owner.api_version, owner.kind, owner.name) == ("batch/v1", BATCH_JOB, name + "-launcher")
        else None
    )


def findable(pod: PodSpec) -> bool:
    """Can a LIST by label under the owning job's name return this pod?"""
    if launcher_of(pod) is not None:
        return True  # labelled job-name: its job's name
    owner = belongs(pod)
    if owner is None:
        return False
    name = owner[1]
    return pod.label(JOB_NAME) == name or (pod.label("group-name") == GROUP and pod.label("job-name") == name)


def labelled(pod: PodSpec) -> bool:
    """Does a LIST by the training labels (any job's name) return this pod? (the sweep's)"""
    return bool(pod.label(JOB_NAME)) or (pod.label("group-name") == GROUP and bool(pod.label("job-name")))


def trainjob_finished_at(job: TrainJobSpec) -> datetime | None:
    """When the TrainJob finished (a Complete or Failed condition "True"), or None."""
    return next((at for t, s, at in job.conditions if t in ("Complete", "Failed") and s == "True"), None)


def controller_of(spec) -> object | None:
    """The controller ownerReference of a spec (a pod, JobSet or Job), or None."""
    owner = spec.owner
    return owner if owner is not None and owner.controller is True else None


def controlled_by(spec, kind: str, uid: str | None) -> bool:
    owner = controller_of(spec)
    return owner is not None and uid is not None and owner.kind == kind and owner.uid == uid


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
    deleted: set = field(default_factory=set)  # uids of pods (and JobSets, Jobs) podsweeper deleted
    # Trainer v2: TrainJobs by (namespace, name) and the (namespace, name) of those deleted;
    # JobSets and batch Jobs by (kind, namespace, name).
    trainjobs: dict[tuple, TrainJobSpec] = field(default_factory=dict)
    trainjobs_gone: set = field(default_factory=set)
    workloads: dict[tuple, IntermediateSpec] = field(default_factory=dict)
    finished_uids: dict[tuple, set] = field(default_factory=dict)  # (namespace, name) -> uids seen finished
    # The newest resourceVersion seen per object (what it is, its namespace and name): a
    # replay never rolls an object back to an older change.
    versions: dict[tuple, int] = field(default_factory=dict)
    nodes: dict[str, str] = field(default_factory=dict)  # live: node name -> Ready/NotReady/Unknown/gone
    annotations: dict[str, dict] = field(default_factory=dict)  # namespace -> its annotations now
    _in_force: dict[str, dict] = field(default_factory=dict, repr=False)  # in_force's answers

    # -- the stream ---------------------------------------------------------------------
    def observe(self, verb: str, spec, version: int | None = None) -> bool:
        """Apply a watch change; False when it is about an object podsweeper already deleted,
        or (given its resourceVersion) older than a change of that object already seen: the
        live function re-reads and never sees the older state, so the replay ignores it."""
        if isinstance(spec, NamespaceSpec):
            self._in_force.clear()
            if verb == "delete":
                self.annotations.pop(spec.name, None)
            else:
                self.annotations[spec.name] = dict(spec.annotations)
            return True
        if version is not None:
            what = ("pod" if isinstance(spec, PodSpec) else "job" if isinstance(spec, JobSpec) else "v2",)
            slot = what + tuple(spec.key)
            if version < self.versions.get(slot, version):
                return False
            self.versions[slot] = version
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
        elif isinstance(spec, TrainJobSpec):
            key = (spec.namespace, spec.name)
            if spec.uid in self.deleted:
                return False
            if verb == "delete":
                self.trainjobs.pop(key, None)
                self.trainjobs_gone.add(key)
            else:
                self.trainjobs[key] = spec
                self.trainjobs_gone.discard(key)
                if trainjob_finished_at(spec) is not None:
                    self.finished_uids.setdefault(key, set()).add(spec.uid)
        elif isinstance(spec, IntermediateSpec):
            if spec.uid in self.deleted:
                return False
            if verb == "delete":
                self.workloads.pop(spec.key, None)
            else:
                self.workloads[spec.key] = spec
        return True

    def podsweeper_deleted(self, namespace: str, name: str, uid: str) -> None:
        pod = self.pods.get((namespace, name))
        assert pod is not None and pod.uid == uid, f"deleted {namespace}/{name} uid {uid}: not in the world"
        del self.pods[(namespace, name)]
        self.deleted.add(uid)

    def podsweeper_deleted_intermediate(self, kind: str, namespace: str, name: str, uid: str) -> None:
        """A JobSet or Job podsweeper deleted, and what goes with it (background propagation)."""
        found = self.workloads.get((kind, namespace, name))
        assert found is not None and found.uid == uid, (
            f"deleted {kind} {namespace}/{name} uid {uid}: not in the world"
        )
        self._gone_with(found)

    def podsweeper_deleted_trainjob(self, namespace: str, name: str, uid: str) -> None:
        """A TrainJob podsweeper deleted (expired-trainjob), and what it controls with it."""
        found = self.trainjobs.get((namespace, name))
        assert found is not None and found.uid == uid, (
            f"deleted TrainJob {namespace}/{name} uid {uid}: not in the world"
        )
        del self.trainjobs[(namespace, name)]
        self.trainjobs_gone.add((namespace, name))
        self.deleted.add(uid)
        for child in list(self.workloads.values()):
            owner = controller_of(child)
            if child.key in self.workloads and owner is not None and owner.uid == uid:
                self._gone_with(child)

    def podsweeper_suspended(self, namespace: str, name: str, uid: str) -> None:
        """podsweeper set the TrainJob's spec.suspend (until the stream shows it again)."""
        found = self.trainjobs.get((namespace, name))
        assert found is not None and found.uid == uid, (
            f"suspended TrainJob {namespace}/{name} uid {uid}: not in the world"
        )
        self.trainjobs[(namespace, name)] = replace(found, suspended=True)

    def _gone_with(self, workload: IntermediateSpec) -> None:
        del self.workloads[workload.key]
        self.deleted.add(workload.uid)
        for key, pod in list(self.pods.items()):
            owner = controller_of(pod)
            made = owner is not None and owner.kind == BATCH_JOB and owner.api_version == "batch/v1"
            labelled = pod.label(JOBSET_NAME) and pod.label(JOBSET_UID)
            if made and labelled and workload.uid in (owner.uid, pod.label(JOBSET_UID)):
                del self.pods[key]
                self.deleted.add(pod.uid)
        for child in list(self.workloads.values()):
            owner = controller_of(child)
            if child.key in self.workloads and owner is not None and owner.uid == workload.uid:
                self._gone_with(child)

    # -- the rules ----------------------------------------------------------------------
    @staticmethod
    def _names(value: str) -> set[str]:
        return {part.strip() for part in value.split(",") if part.strip()}

    def allowed(self, namespace: str) -> bool:
        if namespace in self._names(self.settings["exclude_namespaces"]):
            return False
        wanted = self._names(self.settings["namespaces"])
        return (not wanted or namespace in wanted) and self.in_force(namespace)["mode"] != "off"

    def in_force(self, namespace: str) -> dict:
        """The settings in force in a namespace: the global ones, and what its annotations may
        change (the module docstring's restatement)."""
        if namespace not in self._in_force:
            self._in_force[namespace] = self._resolve(namespace)
        return self._in_force[namespace]

    def _resolve(self, namespace: str) -> dict:
        chosen = self.settings
        out = dict(chosen, mode="dry-run" if chosen.get("dry_run") else "live")
        out["trainjob_ttl_seconds"] = chosen.get("trainjob_ttl_seconds") or 0
        out["trainjob_ttl_min_seconds"] = chosen.get("trainjob_ttl_min_seconds", DEFAULT_TTL_FLOOR)
        notes = self.annotations.get(namespace, {})
        if not chosen.get("namespace_policy", True):
            return out
        ttl = (notes.get(NAMESPACE_TTL) or "").strip()
        if ttl == "off":
            out["trainjob_ttl_seconds"] = 0
        elif (
            ttl.isascii()
            and ttl.isdigit()
            and len(ttl) <= 9
            and out["trainjob_ttl_seconds"] > 0
            and int(ttl) >= max(out["trainjob_ttl_min_seconds"], 1)
        ):
            out["trainjob_ttl_seconds"] = int(ttl)
        mode = notes.get("podsweeper.dev/mode")
        if mode in ("off", "dry-run") or (
            mode == "live" and (not chosen.get("dry_run") or chosen.get("namespace_live_allowed"))
        ):
            out["mode"] = mode
        action = notes.get("podsweeper.dev/crashloop-action")
        if (
            action == "warn"
            or action == chosen["crashloop_action"]
            or (
                action in ("suspend", "delete")
                and action in self._names(chosen.get("namespace_crashloop_actions", ""))
            )
        ):
            out["crashloop_action"] = action
        for name in ("orphan_grace_seconds", "operator_grace_seconds"):
            text = (notes.get("podsweeper.dev/" + name.replace("_", "-")) or "").strip()
            if not text.isdigit() or not text.isascii():
                continue
            least = chosen.get(name, DEFAULT_GRACE)
            if chosen.get("namespace_min_grace_seconds") is not None:
                least = min(least, chosen["namespace_min_grace_seconds"])
            if least <= int(text) <= chosen.get("namespace_max_grace_seconds", 7 * 24 * 3600):
                out[name] = int(text)
        out["dry_run"] = out["mode"] != "live"
        return out

    def dry(self, namespace: str) -> bool:
        """Nothing is deleted or suspended in this namespace."""
        return self.in_force(namespace)["dry_run"]

    def job_of(self, pod: PodSpec):
        kind, name, uid = belongs(pod)
        job = self.jobs.get((kind, pod.namespace, name))
        if job is not None:
            return GONE if uid is not None and job.uid != uid else job
        if self.live or (kind, pod.namespace, name) in self.gone:
            return GONE
        return UNKNOWN

    def launcher_job(self, pod: PodSpec, proven: bool = True) -> JobSpec | None:
        """The MPIJob (v2beta1) whose launcher pod this is, if its batch Job proves it;
        `proven=False`: whatever the batch Job is (the near misses of the coverage)."""
        name = launcher_of(pod)
        job = self.jobs.get(("MPIJob", pod.namespace, name)) if name else None
        if job is None or job.api_version != "kubeflow.org/v2beta1":
            return None
        link = self.workloads.get((BATCH_JOB, pod.namespace, name + "-launcher"))
        if not proven:
            return job
        ok = (
            isinstance(link, LauncherJobSpec)
            and link.uid == pod.owner.uid
            and not link.terminating
            and link.finished in ("Complete", "Failed")
            and controlled_by(link, "MPIJob", job.uid)
        )
        return job if ok else None

    def named(self, pod: PodSpec, now: datetime, proven: bool = True) -> tuple[str, str] | None:
        """(rule, action) the rules name for this pod now; action delete / warn / skip."""
        if not self.allowed(pod.namespace) or pod.terminating:
            return None
        if launcher_of(pod) is not None:  # never an orphan; no operator grace
            job = self.launcher_job(pod, proven)
            if job is None or suspended(job):
                return None
            return self._pod_rules(pod, job, now)
        if belongs(pod) is None:
            return None
        job = self.job_of(pod)
        if job == UNKNOWN:
            return None
        if job == GONE:
            age = None if pod.created is None else (now - pod.created).total_seconds()
            if age is None or age < self.in_force(pod.namespace)["orphan_grace_seconds"]:
                return None
            return ("orphan", "skip" if is_true(pod.skip) else "delete")
        if suspended(job) or (finished(job) and self.left_to_operator(job, pod, now)):
            return None
        return self._pod_rules(pod, job, now)

    def _pod_rules(self, pod: PodSpec, job: JobSpec, now: datetime) -> tuple[str, str] | None:
        """The first pod rule that names a pod of this existing job, not suspended, whose
        operator's cleanup is not waited for."""
        named = None
        if finished(job) and pod.phase in ("Pending", "Running") and self.settings["sweep_active_pods"]:
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
            action = self.in_force(pod.namespace)["crashloop_action"]
            # suspend: the job (spec.runPolicy.suspend); a warning where Kueue drives suspend.
            named = ("crash-loop", "warn" if action == "suspend" and job.queued else action)
        if named is None:
            return None
        opted_out = is_true(pod.skip) or is_true(job.skip)
        return (named[0], "skip") if opted_out else named

    def left_to_operator(self, job: JobSpec, pod: PodSpec, now: datetime) -> bool:
        """Whether the operator's own cleanup still has time for this pod: its cleanPodPolicy
        names it (Running: Pending/Running pods; All: every pod) and the job finished (its
        conditions turned at `since`, or T0) less than the operator grace ago."""
        policy = clean_pod_policy(job)
        owned = policy == "All" or (policy == "Running" and pod.phase in ("Pending", "Running"))
        grace = self.in_force(job.namespace).get("operator_grace_seconds", 30)
        return owned and (now - (job.since or T0)).total_seconds() < grace

    def failed_running(self, job: JobSpec, now: datetime) -> str | None:
        """Rule failed-mpijob-running: the action (suspend / warn / skip) for an MPIJob v2beta1
        Failed without completionTime, not suspended, Failed for the operator grace or longer."""
        if not self.allowed(job.namespace) or not unsettled(job) or suspended(job):
            return None
        grace = self.in_force(job.namespace).get("operator_grace_seconds", DEFAULT_GRACE)
        if (now - (job.since or T0)).total_seconds() < grace:
            return None
        return "skip" if is_true(job.skip) else "warn" if job.queued else "suspend"

    def podsweeper_suspended_job(self, kind: str, namespace: str, name: str, uid: str) -> None:
        """podsweeper set the job's runPolicy.suspend (until the stream shows it again)."""
        found = self.jobs.get((kind, namespace, name))
        assert found is not None and found.uid == uid, (
            f"suspended {kind} {namespace}/{name} uid {uid}: not in the world"
        )
        self.jobs[found.key] = replace(found, conditions=found.conditions + (("Suspended", "True"),))

    def warns_no_backoff_limit(self, job: JobSpec) -> bool | None:
        """True/False when docs/rules.md decides; None when it depends on an unstated default."""
        if not self.allowed(job.namespace) or job.backoff_limit is not None:
            return False
        if job.restart_policy is None:
            return None  # the kind's default restartPolicy decides; docs/rules.md names none
        return job.restart_policy in RESTARTING

    def must_delete(self, now: datetime) -> list[tuple[PodSpec, tuple[str, str]]]:
        out = []
        for pod in self.pods.values():
            if self.dry(pod.namespace):
                continue  # dry-run there: nothing is owed
            named = self.named(pod, now)
            if named is not None and named[1] == "delete" and findable(pod):
                out.append((pod, named))
            stuck = self.named_stuck(pod, now)
            if stuck is not None and stuck[1] == "force-delete" and labelled(pod):
                out.append((pod, stuck))
        return out

    def named_stuck(self, pod: PodSpec, now: datetime) -> tuple[str, str] | None:
        """Rule stuck-terminating (opt-in): (rule, force-delete / skip) for this pod now, or None."""
        limit = self.settings.get("stuck_terminating_seconds")
        if limit is None or not self.live or not pod.terminating or pod.node is None:
            return None
        if not self.allowed(pod.namespace) or launcher_of(pod) is not None:
            return None
        owner = belongs(pod)
        if owner is None:
            return None
        if self.nodes.get(pod.node, "Ready") == "Ready" or pod.kueue_safe == "false":
            return None  # a kubelet is there; or the owner said a force delete is not safe
        if pod.kueue_safe == "true":  # Kueue's own failure recovery has 60 s, then the grace
            grace = self.in_force(pod.namespace).get("operator_grace_seconds", DEFAULT_GRACE)
            limit = max(limit, 60 + grace)
        deleted_at = pod.created or T0  # the generated pods' deletionTimestamp
        if (now - deleted_at).total_seconds() < limit:
            return None
        job = self.jobs.get((owner[0], pod.namespace, owner[1]))
        opted_out = is_true(pod.skip) or (job is not None and is_true(job.skip))
        return ("stuck-terminating", "skip" if opted_out else "force-delete")

    # -- the rules, Trainer v2 -----------------------------------------------------------
    def trainjob_of(self, namespace: str, name: str):
        """The TrainJob of that name, GONE, or UNKNOWN (a replay never showed it)."""
        job = self.trainjobs.get((namespace, name))
        if job is not None:
            return job
        return GONE if self.live or (namespace, name) in self.trainjobs_gone else UNKNOWN

    def chain_lineages(self) -> set[tuple[str, str]]:
        """Every (namespace, TrainJob name) something in the world is named after."""
        names = set(self.trainjobs) | set(self.trainjobs_gone)
        for (kind, namespace, name), w in self.workloads.items():
            if kind == JOBSET:
                names.add((namespace, name))
            elif w.label(JOBSET_NAME):
                names.add((namespace, w.label(JOBSET_NAME)))
        return names

    def own_jobset(self, job: TrainJobSpec, namespace: str, name: str) -> IntermediateSpec | None:
        """The TrainJob's own JobSet: its name, controlled by it (kind and uid), not terminating."""
        js = self.workloads.get((JOBSET, namespace, name))
        if js is None or js.terminating:
            return None
        return js if controlled_by(js, TRAINJOB, job.uid) else None

    def chain_named(
        self, namespace: str, name: str, now: datetime, jobset_added: bool = False
    ) -> dict[tuple[str, str], tuple[str, str]]:
        """{(kind, uid): (rule, action)} the rules name in the lineage of TrainJob `name` now;
        `jobset_added`: on a JobSet add event (the unbounded-restarts warning)."""
        if not self.allowed(namespace):
            return {}
        job = self.trainjob_of(namespace, name)
        if job == UNKNOWN:
            return {}
        job = job if isinstance(job, TrainJobSpec) else None  # None: gone
        out: dict[tuple[str, str], tuple[str, str]] = {}
        js = self.workloads.get((JOBSET, namespace, name))
        own = self.own_jobset(job, namespace, name) if job is not None else None
        finished_at = trainjob_finished_at(job) if job is not None else None

        if job is not None and own is not None:
            unbounded = bool(UNBOUNDED_ACTIONS & set(own.failure_actions))
            if jobset_added and unbounded and finished_at is None and job.active_deadline is None:
                action = "skip" if is_true(job.skip) else "warn"
                out[(TRAINJOB, job.uid)] = (UNBOUNDED_JOBSET_RESTARTS, action)
            restarted = finished_at is not None and own.created is not None and own.created > finished_at
            if restarted and not job.suspended:
                out[(TRAINJOB, job.uid)] = (FINISHED_TRAINJOB_RESTARTED, self.restarted_action(job))
            if self._deadline_leftover(job, own, now):
                opted_out = is_true(job.skip) or is_true(own.skip)
                out[(JOBSET, own.uid)] = (DEADLINE_EXCEEDED_JOBSET_RUNNING, "skip" if opted_out else "delete")

        if job is not None and self.expired(job, now):
            out[(TRAINJOB, job.uid)] = (EXPIRED_TRAINJOB, "skip" if is_true(job.skip) else "delete")

        orphans = [w for w in self._orphans(job, js, namespace, name) if self._old_enough(w, now)]
        for w in orphans:
            opted_out = (job is not None and is_true(job.skip)) or is_true(w.skip)
            out[(w.kind, w.uid)] = (ORPHAN, "skip" if opted_out else "delete")
        return out

    def trainjob_ttl(self, job: TrainJobSpec) -> int | None:
        """The TTL in force for this TrainJob (seconds), or None: the module docstring's (an
        annotation neither off nor seconds keeps the job)."""
        in_force = self.in_force(job.namespace)
        ttl, floor = in_force["trainjob_ttl_seconds"], in_force["trainjob_ttl_min_seconds"]
        if ttl <= 0:
            return None
        asked = (job.ttl_asked or "").strip()
        if not asked:
            return ttl
        if asked.lower() == "off":
            return None
        if asked.isascii() and asked.isdigit() and len(asked) <= 9:
            return min(ttl, max(int(asked), floor, 1))
        return None

    def ttl_kept(self, job: TrainJobSpec, now: datetime) -> str | None:
        """Why expired-trainjob keeps this finished TrainJob (its TTL aside), or None."""
        finished_at = trainjob_finished_at(job)
        own = self.own_jobset(job, job.namespace, job.name)
        if job.suspended:
            return "suspended"
        if job.managed_by not in (None, "", TRAINER_CONTROLLER):
            return "managedBy another controller"
        if job.owner is not None:
            return "owned by another object"
        if job.own_ttl is not None:
            return "ttlSecondsAfterFinished set"
        if own is not None and own.created is not None and own.created > finished_at:
            return "JobSet made after its finish"
        if any(
            p.namespace == job.namespace
            and p.label(JOBSET_NAME) == job.name
            and p.phase in ("Pending", "Running")
            and not p.terminating
            for p in self.pods.values()
        ):
            return "a pod of its name active"
        return None

    def expired(self, job: TrainJobSpec, now: datetime) -> bool:
        """Rule expired-trainjob names this TrainJob now (its opt-out aside)."""
        finished_at = trainjob_finished_at(job)
        ttl = self.trainjob_ttl(job)
        if finished_at is None or ttl is None or (now - finished_at).total_seconds() < ttl:
            return False
        return self.ttl_kept(job, now) is None

    def podgroup_named(self, namespace: str, name: str, now: datetime) -> str | None:
        """What failed-trainjob-podgroup names for the TrainJob `name` now: "warn", "skip" (its
        opt-out) or None. A Failed TrainJob, not suspended, failed the operator grace ago, whose
        own PodGroup (controlled by its uid, not being deleted) Volcano holds Inqueue."""
        if not self.allowed(namespace):
            return None
        job = self.trainjobs.get((namespace, name))
        group = self.workloads.get((PODGROUP, namespace, name))
        if job is None or group is None or job.suspended:
            return None
        failed_at = next((at for t, s, at in job.conditions if t == "Failed" and s == "True"), None)
        grace = self.in_force(namespace).get("operator_grace_seconds", DEFAULT_GRACE)
        if failed_at is None or (now - failed_at).total_seconds() < grace:
            return None
        if group.terminating or group.phase != "Inqueue" or not controlled_by(group, TRAINJOB, job.uid):
            return None
        return "skip" if is_true(job.skip) else "warn"

    def _deadline_leftover(self, job: TrainJobSpec, own: IntermediateSpec, now: datetime) -> bool:
        """The TrainJob's own JobSet still runs pods although the TrainJob failed at its deadline."""
        failed_at = next((at for t, s, at in job.conditions if t == "Failed" and s == "True"), None)
        if failed_at is None or job.failed_reason != "DeadlineExceeded":
            return False
        grace = self.in_force(own.namespace).get("operator_grace_seconds", DEFAULT_GRACE)
        if (now - failed_at).total_seconds() < grace or own.created is None or own.created > failed_at:
            return False
        # Its own Jobs: a Job no longer controlled by it keeps its pods when the JobSet goes.
        jobs = {
            w.uid
            for w in self.workloads.values()
            if w.kind == BATCH_JOB and controlled_by(w, JOBSET, own.uid)
        }
        return any(
            p.label(JOBSET_UID) == own.uid
            and p.phase in ("Pending", "Running")
            and not p.terminating
            and p.owner is not None
            and p.owner.kind == BATCH_JOB
            and p.owner.uid in jobs
            for p in self.pods.values()
        )

    def _orphans(self, job: TrainJobSpec | None, js: IntermediateSpec | None, namespace: str, name: str):
        """The JobSet and batch Jobs of the lineage that rule orphan names, age aside."""
        orphan_jobset = (
            js is not None
            and not js.terminating
            and not (job is not None and controlled_by(js, TRAINJOB, job.uid))
            and (controller_of(js) is None or controller_of(js).kind == TRAINJOB)
            and (controller_of(js) is not None or js.template_marked)
        )
        if orphan_jobset:
            yield js
        current = js if js is not None and not js.terminating else None
        for w in self.workloads.values():
            if w.kind != BATCH_JOB or w.namespace != namespace or w.label(JOBSET_NAME) != name:
                continue
            owner = controller_of(w)
            if (
                w.terminating
                or (current is not None and controlled_by(w, JOBSET, current.uid))
                or (owner is not None and owner.kind != JOBSET)
                or w.label(ANCESTOR_MARK) is None
            ):
                continue
            if orphan_jobset and controlled_by(w, JOBSET, js.uid):
                continue  # it goes with its JobSet
            yield w

    def _old_enough(self, workload: IntermediateSpec, now: datetime) -> bool:
        grace = self.in_force(workload.namespace).get("orphan_grace_seconds", DEFAULT_GRACE)
        return workload.created is not None and (now - workload.created).total_seconds() >= grace

    @staticmethod
    def restarted_action(job: TrainJobSpec) -> str:
        """What finished-trainjob-restarted does to this TrainJob: suspend, warn or skip."""
        if is_true(job.skip):
            return "skip"
        return "warn" if job.queued or job.managed_by not in (None, "", TRAINER_CONTROLLER) else "suspend"

    def chain_must_act(self, now: datetime) -> list[tuple[object, tuple[str, str]]]:
        """JobSets and Jobs still present that the rules name for deletion, and TrainJobs not
        suspended that the rules name for a suspend."""
        by_uid = {w.uid: w for w in self.workloads.values()} | {j.uid: j for j in self.trainjobs.values()}
        out = []
        for namespace, name in sorted(self.chain_lineages()):
            if self.dry(namespace):
                continue
            for (_, uid), named in self.chain_named(namespace, name, now).items():
                if named[1] in ("delete", "suspend"):
                    out.append((by_uid[uid], named))
        return out
