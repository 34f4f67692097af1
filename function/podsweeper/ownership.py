"""How a pod is tied to its training job: the controller ownerReference, else the labels.

The one home of the training operators' pod labels (the v1.6+ set and the pre-v1.6 one), of
the chained kinds' pod labels (kinds.Chain) and of the ownership rule. The API LISTs by the selectors here; the simulated cluster and the
tests match labels in memory with the functions here, so both always select the same pods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from podsweeper import kinds
from podsweeper.model import Intermediate, JobRef, Owner

JOB_NAME_LABEL = "training.kubeflow.org/job-name"
OPERATOR_NAME_LABEL = "training.kubeflow.org/operator-name"
# Before training-operator v1.6 pods carried these instead.
LEGACY_JOB_NAME_LABEL = "job-name"
LEGACY_GROUP_LABEL = "group-name"

CHAINS: tuple[kinds.Chain, ...] = tuple(dict.fromkeys(k.chain for k in kinds.TRAINING_KINDS if k.chain))
# The label selectors that find every pod a training job controls itself: the v1.6+ set and
# the pre-v1.6 one. (A chain's pods are reached through its JobSets and Jobs instead.)
TRAINING_POD_SELECTORS = (JOB_NAME_LABEL, f"{LEGACY_GROUP_LABEL}={kinds.GROUP},{LEGACY_JOB_NAME_LABEL}")
CHAIN_POD_SELECTORS = tuple(chain.name_label for chain in CHAINS)


def selects(selector: str, labels: Mapping[str, str]) -> bool:
    """Whether a selector of the forms used here (`key`, `key=value`, joined by commas)
    selects these labels: the API's matching, in memory."""
    for term in selector.split(","):
        key, equals, value = term.partition("=")
        if key not in labels or (equals and labels[key] != value):
            return False
    return True


def controlled_by(controller: Owner | None, kind: str, uid: str | None) -> bool:
    """Whether this controller ownerReference names exactly that object: its kind and its uid
    (a uid alone could be a same-named object's of another kind; a name never proves it)."""
    return controller is not None and uid is not None and controller.kind == kind and controller.uid == uid


def job_pod_selectors(ref: JobRef) -> tuple[str, ...]:
    """The label selectors that find one job's pods (v1: v1.6+ first, then pre-v1.6)."""
    if ref.kind.chain is not None:
        return (f"{ref.kind.chain.name_label}={ref.name}",)
    return (
        f"{JOB_NAME_LABEL}={ref.name}",
        f"{LEGACY_GROUP_LABEL}={kinds.GROUP},{LEGACY_JOB_NAME_LABEL}={ref.name}",
    )


def labelled_job_names(labels: Mapping[str, str]) -> set[tuple[bool, str]]:
    """Every (chained?, job name) these labels tie a pod to (a pod may carry both v1 sets)."""
    names = set()
    if JOB_NAME_LABEL in labels:
        names.add((False, labels[JOB_NAME_LABEL]))
    if labels.get(LEGACY_GROUP_LABEL) == kinds.GROUP and LEGACY_JOB_NAME_LABEL in labels:
        names.add((False, labels[LEGACY_JOB_NAME_LABEL]))
    for chain in CHAINS:
        if chain.name_label in labels:
            names.add((True, labels[chain.name_label]))
    return names


def has_training_label(labels: Mapping[str, str]) -> bool:
    """What TRAINING_POD_SELECTORS select, matched in memory."""
    return any(not chained for chained, _ in labelled_job_names(labels))


def labels_name_job(labels: Mapping[str, str], ref: JobRef) -> bool:
    """What job_pod_selectors(ref) select, matched in memory."""
    return (ref.kind.chain is not None, ref.name) in labelled_job_names(labels)


def has_current_labels(labels: Mapping[str, str]) -> bool:
    """Labelled the v1.6+ way, or a chain's (a pod with only the pre-v1.6 set needs both LISTs)."""
    return JOB_NAME_LABEL in labels or any(chain.name_label in labels for chain in CHAINS)


@dataclass(frozen=True)
class Ownership:
    """The job a pod belongs to (None: not ours), and whether another controller owns it."""

    job: JobRef | None
    foreign_controller: bool = False
    batch_job: Owner | None = None  # the batch Job controlling the pod (a chain's, or a launcher's), if any


def pod_ownership(namespace: str, owners: Iterable[Owner], labels: Mapping[str, str]) -> Ownership:
    """Controller ownerReference first; only a pod with no controller at all may be claimed
    by its labels (a pod some other controller owns is never ours, whatever its labels), and
    then only when the operator-name label tells the job's kind.

    A pod controlled by a chain's last link (a batch Job) whose labels name the chain's top
    (a JobSet, by name and uid) is a candidate of the chained kind (a TrainJob of that name):
    only a pass that reads the chain may decide it is one (a plain JobSet's pods look alike)."""
    controller = next((o for o in owners if o.controller), None)
    if controller is not None:
        kind = kinds.lookup(controller.api_version, controller.kind)
        if kind is None:
            return _launched(namespace, controller, labels) or _chained(namespace, controller, labels)
        return Ownership(
            JobRef(kind, namespace, controller.name, controller.uid or None, controller.api_version)
        )
    name = labels.get(JOB_NAME_LABEL)
    if not name and labels.get(LEGACY_GROUP_LABEL) == kinds.GROUP:
        name = labels.get(LEGACY_JOB_NAME_LABEL)
    operator = labels.get(OPERATOR_NAME_LABEL, "")
    kind = kinds.BY_OPERATOR_NAME.get(operator)
    if not name or kind is None:
        return Ownership(None)  # no job, or a job whose kind cannot be told: not ours
    launcher = kind.launcher
    if launcher is not None and operator == launcher.operator_name:  # the version that operator serves
        return Ownership(JobRef(kind, namespace, name, None, kind.api_version(launcher.versions[0])))
    return Ownership(JobRef(kind, namespace, name))


def _launched(namespace: str, controller: Owner, labels: Mapping[str, str]) -> Ownership | None:
    """A launcher pod (kinds.Launcher): its controller is the batch Job named after the job its
    labels name. A candidate only: the pass proves the Job is that job's (engine.proven_launchers)."""
    name = labels.get(JOB_NAME_LABEL)
    kind = kinds.BY_OPERATOR_NAME.get(labels.get(OPERATOR_NAME_LABEL, ""))
    launcher = kind.launcher if kind is not None else None
    if (
        not name
        or kind is None
        or launcher is None
        or labels.get(OPERATOR_NAME_LABEL) != launcher.operator_name
        or (controller.api_version, controller.kind) != (launcher.link.api_version, launcher.link.kind)
        or controller.name != name + launcher.suffix
    ):
        return None
    ref = JobRef(kind, namespace, name, None, kind.api_version(launcher.versions[0]))
    return Ownership(ref, batch_job=controller)


def _chained(namespace: str, controller: Owner, labels: Mapping[str, str]) -> Ownership:
    for kind in kinds.TRAINING_KINDS:
        chain = kind.chain
        if chain is None:
            continue
        last = chain.links[-1]
        if (
            controller.kind == last.kind
            and controller.api_version == last.api_version
            and labels.get(chain.name_label)
            and labels.get(chain.uid_label)
        ):
            return Ownership(JobRef(kind, namespace, labels[chain.name_label]), batch_job=controller)
    return Ownership(None, foreign_controller=True)


def intermediate_job(intermediate: Intermediate) -> JobRef | None:
    """The chained job a JobSet, batch Job or companion (PodGroup) would belong to (by its name
    or labels), if its kind is in a chain at all. Only a pass reading the chain decides whether it does."""
    for kind in kinds.TRAINING_KINDS:
        chain = kind.chain
        if chain is None or intermediate.link not in (*chain.links, *chain.companions):
            continue
        if intermediate.link == chain.links[0] or intermediate.link in chain.companions:
            return JobRef(kind, intermediate.namespace, intermediate.name)
        name = intermediate.labels.get(chain.name_label)
        return JobRef(kind, intermediate.namespace, name) if name else None
    return None
