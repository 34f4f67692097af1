"""Plain data the decision engine works on: what a pod or a job *is*, nothing more.

Built from Kubernetes objects by `podsweeper.objects` (the typed edge); the engine, the
simulated cluster and the reports only ever see these frozen dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from podsweeper.kinds import IntermediateKind, TrainingKind

SKIP_ANNOTATION = "podsweeper.dev/skip"
# The retention a TrainJob asks for (rule expired-trainjob): "off", or seconds, only shorter.
TTL_ANNOTATION = "podsweeper.dev/ttl-seconds-after-finished"

# restartPolicy values under which a failed replica is restarted in place.
RESTARTING_POLICIES = frozenset({"OnFailure", "Always", "ExitCode"})


class CleanPodPolicy(StrEnum):
    """What the operator itself deletes when a job finishes (spec.runPolicy.cleanPodPolicy)."""

    NONE = "None"  # nothing
    RUNNING = "Running"  # its Pending and Running pods
    ALL = "All"  # every pod


# Phases in which a pod still holds its node's resources.
ACTIVE_PHASES = frozenset({"Pending", "Running"})
TERMINATED_PHASES = frozenset({"Succeeded", "Failed", "Unknown"})


class Verb(StrEnum):
    """A watched change, as ApiServerSource names it (watch ADDED / MODIFIED / DELETED)."""

    ADD = "add"
    UPDATE = "update"
    DELETE = "delete"


@dataclass(frozen=True)
class Owner:
    """An ownerReference, as plain data."""

    api_version: str
    kind: str
    name: str
    uid: str = ""
    controller: bool = False


@dataclass(frozen=True)
class JobRef:
    """Names a training job; `uid` is what a pod's ownerReference says, if it has one."""

    kind: TrainingKind
    namespace: str
    name: str
    uid: str | None = None
    api_version: str | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind.kind, self.namespace, self.name)

    @property
    def version(self) -> str:
        if self.api_version and "/" in self.api_version:
            return self.api_version.rpartition("/")[2]
        return self.kind.preferred_version


@dataclass(frozen=True)
class ContainerView:
    """One container's state, kept as evidence of why it died."""

    name: str
    restart_count: int
    waiting_reason: str | None = None
    exit_code: int | None = None
    reason: str | None = None
    message: str | None = None
    signal: int | None = None
    started_at: str | None = None  # RFC 3339, as the API wrote it
    finished_at: str | None = None
    # The termination shown is the previous run's (lastState): the container runs again.
    restarted: bool = False
    # The terminated run's containerID: a kubelet shows one run as `state` (restart count n),
    # in CrashLoopBackOff as `lastState` (still n), then running again as `lastState` (n + 1).
    run_id: str | None = None

    @property
    def failed(self) -> bool:
        """Its (last) run ended in failure: a non-zero exit, or a reason other than Completed."""
        if self.exit_code is None:
            return False
        return self.exit_code != 0 or (self.reason or "Completed") != "Completed"

    @property
    def crash_looping(self) -> bool:
        return self.waiting_reason == "CrashLoopBackOff"

    @property
    def has_evidence(self) -> bool:
        return self.exit_code is not None or self.crash_looping


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    uid: str
    phase: str
    labels: dict[str, str] = field(default_factory=dict, hash=False)
    opted_out: bool = False
    terminating: bool = False
    created: datetime | None = None
    job: JobRef | None = None
    # Set when the pod has a controller that is not a training job: never ours.
    foreign_controller: bool = False
    containers: tuple[ContainerView, ...] = ()
    # The version decided on: a delete is refused (409) if the pod changed since.
    resource_version: str = ""
    started: datetime | None = None  # status.startTime
    # (name, amount) of each extended resource the pod holds, e.g. ("nvidia.com/gpu", 8).
    extended_resources: tuple[tuple[str, int], ...] = ()
    node: str | None = None
    # The controller between the pod and its job when the job reaches it through a chain
    # (Trainer v2: the batch Job); None for a pod its job controls itself.
    batch_job: Owner | None = None
    # metadata.deletionTimestamp: when the pod's grace period ends (set once it is terminating).
    deletion_due: datetime | None = None
    # Its owner's word on a force delete (kinds.KUEUE_SAFE_TO_FORCEFULLY_DELETE): True, False,
    # or None when the annotation is absent or says neither.
    safe_to_force_delete: bool | None = None

    @property
    def active(self) -> bool:
        return self.phase in ACTIVE_PHASES

    def gpus(self, resource_names: frozenset[str]) -> int:
        """GPUs the pod holds: its extended resources of the given (GPU) names."""
        return sum(amount for name, amount in self.extended_resources if name in resource_names)

    def max_crash_loop_restarts(self) -> int:
        """Highest restart count among containers waiting in CrashLoopBackOff (0 if none)."""
        return max((c.restart_count for c in self.containers if c.crash_looping), default=0)


@dataclass(frozen=True)
class Job:
    kind: TrainingKind
    namespace: str
    name: str
    uid: str
    api_version: str
    opted_out: bool = False
    # Its labels: who owns it (a team's labels), carried into the CloudEvents about it.
    labels: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    finished: str | None = None  # "Succeeded" / "Failed" when finished
    finished_at: datetime | None = None  # the finishing condition's lastTransitionTime
    suspended: bool = False
    clean_pod_policy: CleanPodPolicy = CleanPodPolicy.NONE
    backoff_limit: int | None = None
    active_deadline_seconds: int | None = None
    # replica type -> restartPolicy (defaults applied)
    restart_policies: tuple[tuple[str, str], ...] = ()
    # Sum of the replica specs' `replicas`: how many pods the job itself says it runs.
    declared_replicas: int = 0
    # Why podsweeper must not suspend this job (another controller drives its suspend), if so.
    suspend_blocked: str | None = None
    created: datetime | None = None
    # Failed, but its operator still runs it (MPIJob v2beta1 Failed without completionTime,
    # kinds.Launcher): since when, and the condition's reason. `finished` stays None for it.
    failed_unsettled_at: datetime | None = None
    # The reason of the failure condition: an unsettled MPIJob's, or a Failed TrainJob's
    # (Trainer's DeadlineExceeded).
    failed_reason: str = ""
    # A TrainJob's Suspended condition's lastTransitionTime (either status): when it was last
    # suspended or resumed (Kueue's admission, a person's). Trainer makes its first JobSet then.
    suspend_changed_at: datetime | None = None
    # Rule expired-trainjob's: who else decides its life, its own TTL field, its annotation (raw).
    managed_by: str | None = None
    owned_by: str | None = None
    sets_own_ttl: bool = False
    ttl_asked: str | None = None
    resource_version: str = field(default="", compare=False)  # a TrainJob's: its delete's precondition

    @property
    def ref(self) -> JobRef:
        return JobRef(self.kind, self.namespace, self.name, self.uid, self.api_version)

    @property
    def restarts_unbounded(self) -> bool:
        """No backoffLimit and no deadline: nothing will ever stop failed pods restarting."""
        return self.backoff_limit is None and self.active_deadline_seconds is None

    @property
    def replicas_restarting_forever(self) -> tuple[str, ...]:
        """Replica types whose failed pods restart in place (restartPolicy OnFailure, Always or
        ExitCode) with no backoffLimit to stop them."""
        if self.backoff_limit is not None:
            return ()
        return tuple(sorted(r for r, policy in self.restart_policies if policy in RESTARTING_POLICIES))


@dataclass(frozen=True)
class FinishMark:
    """podsweeper's own record that a chained job (TrainJob) finished, and with which JobSet.

    Trainer v2.3.0 removes a Failed TrainJob's Failed condition when it makes a new JobSet for
    it; this record, kept in a ConfigMap the job owns, is what still says it had finished."""

    condition: str  # "Complete" or "Failed"
    at: datetime | None
    top_uid: str  # the JobSet that finished ("" if it was already gone)


class NodeReady(StrEnum):
    """A node's Ready condition status, as the API writes it."""

    TRUE = "True"
    FALSE = "False"  # NotReady: the kubelet reports the node unhealthy
    UNKNOWN = "Unknown"  # no report: node-lifecycle's verdict on a silent kubelet (or no condition)


@dataclass(frozen=True)
class Node:
    """A node's readiness, as rule stuck-terminating reads it."""

    name: str
    ready: NodeReady
    since: datetime | None = None  # that condition's lastTransitionTime


@dataclass(frozen=True)
class Intermediate:
    """A JobSet or batch Job in a training job's chain (Trainer v2), or a companion beside it
    (a Volcano PodGroup), as plain data."""

    link: IntermediateKind
    namespace: str
    name: str
    uid: str
    controller: Owner | None  # its controller ownerReference; None once orphaned
    labels: dict[str, str] = field(default_factory=dict, hash=False)
    # Labels of what it makes (a JobSet's replicated Job templates; a Job's own labels):
    # where the training job's controller leaves its mark.
    template_labels: tuple[tuple[str, str], ...] = ()
    opted_out: bool = False
    terminating: bool = False
    created: datetime | None = None
    finished: str | None = None  # a Completed/Failed (JobSet) or Complete/Failed (Job) condition
    suspended: bool = False
    # Suspended once and running again (JobSet writes Suspended=False only on a resume).
    resumed: bool = False
    # JobSet failurePolicy rule actions that restart without counting against maxRestarts.
    unbounded_restart_actions: tuple[str, ...] = ()
    resource_version: str = ""
    # A Volcano PodGroup's phase, the minResources its queue reserves while it is Inqueue, and
    # its queue ("" for the others).
    phase: str = ""
    reserves: tuple[tuple[str, str], ...] = ()
    queue: str = ""

    def marked(self, marker_label: str) -> bool:
        return marker_label in self.labels or any(k == marker_label for k, _ in self.template_labels)


@dataclass(frozen=True)
class Namespace:
    """A Namespace as podsweeper reads it: its podsweeper.dev/ annotations are its policy."""

    name: str
    uid: str = ""
    annotations: dict[str, str] = field(default_factory=dict, hash=False)

    @property
    def namespace(self) -> str:
        """Where Events about it are written: in itself."""
        return self.name


@dataclass(frozen=True)
class EventRecord:
    """A Kubernetes Event about a job (or a Namespace whose policy podsweeper cannot use).
    Same `name` = same Event: its count goes up."""

    name: str
    involved: JobRef | Namespace
    type: str  # "Normal" | "Warning"
    reason: str
    message: str
    time: datetime
    # A mark that must grow for a repeat to be written (a crash loop's restart count): the
    # count of a warning then follows crashes, not how often podsweeper looked.
    progress: int | None = None
