"""The registry of Kubeflow training kinds podsweeper may touch, and how pods reach them.

Adding a kind is one entry in TRAINING_KINDS; everything else (ownership and labels in
`ownership.py`, the API paths, the RBAC test) reads this table. A v1 kind owns its pods
itself; a kind with a `chain` reaches them through other controllers (Trainer v2: TrainJob ->
JobSet -> batch Job -> Pod), and the chain entry says which, and by which labels.
"""

from __future__ import annotations

from dataclasses import dataclass

# Kueue queues a job by this label, and then drives its suspend switch itself.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# A pod's owner says whether a force delete is safe for it ("true"/"false"); Kueue's failure
# recovery (alpha, gate FailureRecoveryPolicy) force-deletes a "true" pod on an unreachable node
# this long after its deletionTimestamp (its forcefulTerminationGracePeriod, not configurable
# in Kueue v0.17).
KUEUE_SAFE_TO_FORCEFULLY_DELETE = "kueue.x-k8s.io/safe-to-forcefully-delete"
KUEUE_FORCEFUL_TERMINATION_SECONDS = 60

GROUP = "kubeflow.org"  # the v1 training operator's (and the mpi-operator's) group
TRAINER_GROUP = "trainer.kubeflow.org"
# The managedBy value each controller writes as its own (a job naming another is not ours
# to suspend): the training operator's runPolicy.managedBy, the mpi-operator's, Trainer's
# spec.managedBy.
TRAINING_OPERATOR_MANAGED_BY = "kubeflow.org/training-operator"
MPI_OPERATOR_MANAGED_BY = "kubeflow.org/mpi-operator"
TRAINER_MANAGED_BY = "trainer.kubeflow.org/trainjob-controller"


@dataclass(frozen=True)
class IntermediateKind:
    """A controller kind between a pod and its training job (it is not a training job)."""

    kind: str
    group: str
    version: str
    plural: str
    # The condition types that say it finished: (success, failure); () for a kind that never
    # finishes (a PodGroup: its phase follows its pods).
    finished_conditions: tuple[str, str] | tuple[()]

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


BATCH_JOB = IntermediateKind("Job", "batch", "v1", "jobs", ("Complete", "Failed"))
JOBSET = IntermediateKind("JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets", ("Completed", "Failed"))
# Volcano's gang: Trainer's volcano plugin (podGroupPolicy.volcano) makes one per TrainJob, under
# the job's name and controlled by it; Volcano's queue reserves its minResources until it goes.
VOLCANO_PODGROUP = IntermediateKind("PodGroup", "scheduling.volcano.sh", "v1beta1", "podgroups", ())


@dataclass(frozen=True)
class Chain:
    """How a job kind's pods are reached when the job does not own them itself.

    `links` run from the job down: the job controls links[0], which controls links[1], which
    controls the pods. Pods carry `name_label` (the top link's name) and `uid_label` (its uid);
    `marker_label` is what the job's own controller writes on the objects in between, so one
    left without an owner can still be told apart from a look-alike nobody's job ever made.
    """

    links: tuple[IntermediateKind, ...]
    name_label: str
    uid_label: str
    marker_label: str
    # What the job's controller makes beside the chain, under the job's own name and controlled
    # by it, that makes no pod (a scheduler's gang): read by name, listed by the sweep.
    companions: tuple[IntermediateKind, ...] = ()


# Trainer v2: the JobSet has the TrainJob's name; Trainer's runtimes label each replicated
# Job with the step it runs (trainer, dataset-initializer, model-initializer).
TRAINER_CHAIN = Chain(
    links=(JOBSET, BATCH_JOB),
    name_label="jobset.sigs.k8s.io/jobset-name",
    uid_label="jobset.sigs.k8s.io/jobset-uid",
    marker_label="trainer.kubeflow.org/trainjob-ancestor-step",
    companions=(VOLCANO_PODGROUP,),
)


@dataclass(frozen=True)
class Launcher:
    """A job's pod that runs under a batch Job the job controls: the mpi-operator's launcher.

    The pod's controller is the Job `<job name><suffix>`, itself controlled by the job; the pod
    says whose it is by `training.kubeflow.org/job-name` and `operator-name: <operator_name>`.
    Only a pass that reads the Job may decide the pod is the job's (a plain Job's pods may carry
    any labels). The operator's cleanPodPolicy never reaches it (kubeflow/mpi-operator#643), and
    it settles a job only once `status.completionTime` is set: a job Failed without one
    (a worker evicted, #647) is still reconciled, so its deleted pods come back at once.
    """

    link: IntermediateKind
    suffix: str
    operator_name: str
    versions: tuple[str, ...]  # the job versions whose operator runs a launcher this way
    managed_by: str  # its operator's own runPolicy.managedBy value
    manager: str  # its operator, as a reason names it


# mpi-operator v0.8.0 (MPIJob v2beta1): `<name>-launcher`, restartPolicy from the Launcher spec,
# backoffLimit and ttlSecondsAfterFinished from the MPIJob's runPolicy.
MPI_LAUNCHER = Launcher(
    BATCH_JOB, "-launcher", "mpi-operator", ("v2beta1",), MPI_OPERATOR_MANAGED_BY, "the mpi-operator"
)


@dataclass(frozen=True)
class TrainingKind:
    """One training job kind of the Kubeflow Training Operator."""

    kind: str
    plural: str
    replica_specs_key: str  # "" for a kind without replica specs (TrainJob)
    versions: tuple[str, ...] = ("v1",)
    group: str = GROUP
    # restartPolicy a replica gets when its spec names none.
    default_restart_policy: str = "Never"
    # MPIJob still honours its deprecated top-level spec.cleanPodPolicy.
    top_level_clean_pod_policy: bool = False
    # The condition types that say the job finished: (success, failure).
    finished_conditions: tuple[str, str] = ("Succeeded", "Failed")
    # None: the job controls its pods itself (v1). Else the controllers in between.
    chain: Chain | None = None
    # Where the job's suspend switch is in its spec.
    suspend_path: tuple[str, ...] = ("runPolicy", "suspend")
    # Its controller's own managedBy value (any other: podsweeper does not suspend the job),
    # and that controller as a reason names it. A launcher's operator has its own (Launcher).
    managed_by: str = TRAINING_OPERATOR_MANAGED_BY
    manager: str = "the training operator"
    # A pod of the job controlled by a batch Job the job controls (MPIJob v2beta1), if any.
    launcher: Launcher | None = None

    @property
    def suspend_field(self) -> str:
        """Its suspend switch as people write it: spec.runPolicy.suspend, a TrainJob's spec.suspend."""
        return ".".join(("spec", *self.suspend_path))

    def launches(self, version: str) -> Launcher | None:
        """The launcher of this kind at this version, if it runs one."""
        return self.launcher if self.launcher and version in self.launcher.versions else None

    @property
    def operator_name(self) -> str:
        """Value of `training.kubeflow.org/operator-name` on this kind's pods."""
        return f"{self.kind.lower()}-controller"

    @property
    def preferred_version(self) -> str:
        return self.versions[0]

    def api_version(self, version: str | None = None) -> str:
        return f"{self.group}/{version or self.preferred_version}"


TRAINING_KINDS: tuple[TrainingKind, ...] = (
    TrainingKind("PyTorchJob", "pytorchjobs", "pytorchReplicaSpecs", default_restart_policy="OnFailure"),
    TrainingKind("TFJob", "tfjobs", "tfReplicaSpecs"),
    TrainingKind(
        "MPIJob",
        "mpijobs",
        "mpiReplicaSpecs",
        versions=("v1", "v2beta1"),
        top_level_clean_pod_policy=True,
        launcher=MPI_LAUNCHER,
    ),
    TrainingKind("XGBoostJob", "xgboostjobs", "xgbReplicaSpecs"),
    TrainingKind("PaddleJob", "paddlejobs", "paddleReplicaSpecs", default_restart_policy="OnFailure"),
    TrainingKind("JAXJob", "jaxjobs", "jaxReplicaSpecs"),
    # Kubeflow Trainer v2. No cleanPodPolicy, no backoffLimit: its rules are the chain's.
    TrainingKind(
        "TrainJob",
        "trainjobs",
        "",
        versions=("v1alpha1",),
        group=TRAINER_GROUP,
        finished_conditions=("Complete", "Failed"),
        chain=TRAINER_CHAIN,
        suspend_path=("suspend",),
        managed_by=TRAINER_MANAGED_BY,
        manager="Trainer",
    ),
)
# The kinds whose pods say which job they belong to by the training operator's labels.
OPERATOR_KINDS: tuple[TrainingKind, ...] = tuple(k for k in TRAINING_KINDS if k.chain is None)
TRAINJOB = next(k for k in TRAINING_KINDS if k.kind == "TrainJob")

BY_KIND: dict[str, TrainingKind] = {k.kind: k for k in TRAINING_KINDS}
BY_OPERATOR_NAME: dict[str, TrainingKind] = {
    **{k.operator_name: k for k in OPERATOR_KINDS},
    **{k.launcher.operator_name: k for k in OPERATOR_KINDS if k.launcher},
}


def lookup(api_version: str | None, kind: str | None) -> TrainingKind | None:
    """The training kind for an apiVersion/kind pair, or None if it is not one of ours."""
    if not api_version or not kind:
        return None
    group, _, version = api_version.rpartition("/")
    found = BY_KIND.get(kind)
    if found is None or group != found.group or version not in found.versions:
        return None
    return found


LINKS: tuple[IntermediateKind, ...] = tuple(
    dict.fromkeys(link for k in TRAINING_KINDS if k.chain for link in k.chain.links)
)
COMPANIONS: tuple[IntermediateKind, ...] = tuple(
    dict.fromkeys(companion for k in TRAINING_KINDS if k.chain for companion in k.chain.companions)
)
INTERMEDIATE_BY_KIND: dict[str, IntermediateKind] = {link.kind: link for link in (*LINKS, *COMPANIONS)}


def intermediate_lookup(api_version: str | None, kind: str | None) -> IntermediateKind | None:
    """The chain link (JobSet, batch Job) or companion (PodGroup) for an apiVersion/kind pair."""
    return next(
        (link for link in (*LINKS, *COMPANIONS) if link.kind == kind and link.api_version == api_version),
        None,
    )
