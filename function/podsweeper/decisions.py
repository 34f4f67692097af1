"""What the engine returns: one Decision per object a rule names, with the rule's name."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from podsweeper.kinds import IntermediateKind
from podsweeper.model import ContainerView, JobRef
from podsweeper.policy import NamespacePolicy


class Rule(StrEnum):
    """The registry of rules: one line per rule, in the order the passes decide them (a pod's
    first rule that names it decides for it). Each is one module, podsweeper.rules.<name in
    lower case>, imported by podsweeper.rules, whose RULES follow this order."""

    ORPHAN = "orphan"
    FINISHED_JOB_ACTIVE_POD = "finished-job-active-pod"
    CLEAN_POD_POLICY_ALL = "clean-pod-policy-all"
    CRASH_LOOP = "crash-loop"
    NO_BACKOFF_LIMIT = "no-backoff-limit"
    FAILED_MPIJOB_RUNNING = "failed-mpijob-running"  # mpi-operator (MPIJob v2beta1), #647
    STUCK_TERMINATING = "stuck-terminating"  # opt-in
    FINISHED_TRAINJOB_RESTARTED = "finished-trainjob-restarted"  # Trainer v2 (podsweeper.lineage)
    UNBOUNDED_JOBSET_RESTARTS = "unbounded-jobset-restarts"
    DEADLINE_EXCEEDED_JOBSET_RUNNING = "deadline-exceeded-jobset-running"
    FAILED_TRAINJOB_PODGROUP = "failed-trainjob-podgroup"  # Trainer v2 with Volcano, trainer#4033
    EXPIRED_TRAINJOB = "expired-trainjob"  # opt-in, Trainer v2 (trainer#4052)


class Action(StrEnum):
    DELETE = "delete"
    WARN = "warn"
    SUSPEND = "suspend"  # the pod's job: spec.runPolicy.suspend = true
    FORCE_DELETE = "force-delete"  # grace period 0: only rule stuck-terminating
    SKIP = "skip"

    @property
    def deletes(self) -> bool:
        return self in (Action.DELETE, Action.FORCE_DELETE)


class Target(StrEnum):
    """What a decision is about: code that acts branches on this, never on a kind's name."""

    POD = "pod"
    JOB = "job"  # the training job itself (a warning, a suspend)
    INTERMEDIATE = "intermediate"  # a chain's JobSet or batch Job: Decision.link says which


class Result(StrEnum):
    """What carrying out a decision did (a skip has none)."""

    DELETED = "deleted"
    GONE = "gone"  # 404: already deleted by someone else
    CONFLICT = "conflict"  # 409: a precondition failed (a new pod has this name, or it changed)
    DRY_RUN = "dry-run"
    DEFERRED = "deferred"  # over PODSWEEPER_MAX_DELETES_PER_EVENT: the next event or sweep
    WARNED = "warned"  # a Warning Event was written (or its count bumped)
    ALREADY_WARNED = "already-warned"  # nothing new since the last warning: not written again
    SUSPENDED = "suspended"  # the job was suspended (by this decision or another of the pass)


@dataclass(frozen=True)
class Decision:
    rule: Rule
    action: Action
    target: Target
    namespace: str
    name: str
    uid: str
    reason: str
    job: JobRef
    evidence: tuple[ContainerView, ...] = ()
    resource_version: str = ""  # of the pod as decided on; the delete's precondition
    gpus: int = 0  # GPUs the pod holds (PODSWEEPER_GPU_RESOURCES)
    node: str | None = None  # where the pod ran
    # A short fact the PodsCleanedUp Event shows beside the pod (stuck-terminating: its node's state).
    detail: str = ""
    # Since when those GPUs are wasted: the job finished, or the crash loop began (the pod
    # started); None when unknown (an orphan's job vanished at a time nothing records).
    wasted_since: datetime | None = None
    link: IntermediateKind | None = None  # the chain link, when target is INTERMEDIATE
    # The job's labels (who owns it), as read now; empty when the job is gone.
    owner: tuple[tuple[str, str], ...] = ()
    # The namespace's policy it was decided under (podsweeper.policy); None: the global settings.
    policy: NamespacePolicy | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if (self.target is Target.INTERMEDIATE) != (self.link is not None):
            raise ValueError("a decision about a JobSet or batch Job names its link, and only then")

    @property
    def kind(self) -> str:
        """The object's kind as people read it: Pod, JobSet, Job, or the job's own kind."""
        if self.target is Target.POD:
            return "Pod"
        if self.link is not None:
            return self.link.kind
        return self.job.kind.kind

    @property
    def is_pod(self) -> bool:
        return self.target is Target.POD

    def gpu_seconds(self, now: datetime) -> float:
        """GPU-seconds held from `wasted_since` to `now` (0 when that start is unknown)."""
        if not self.gpus or self.wasted_since is None:
            return 0.0
        return self.gpus * max(0.0, (now - self.wasted_since).total_seconds())

    def as_dict(self) -> dict[str, str]:
        return {
            "rule": self.rule.value,
            "action": self.action.value,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "reason": self.reason,
            "job": f"{self.job.kind.kind}/{self.job.name}",
        }
