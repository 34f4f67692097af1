"""How a pod is tied to its training job: the controller ownerReference, else the labels.

The one home of the training operators' pod labels (the v1.6+ set and the pre-v1.6 one) and
of the ownership rule. The API LISTs by the selectors here; the simulated cluster and the
tests match labels in memory with the functions here, so both always select the same pods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from podsweeper import kinds
from podsweeper.model import JobRef

JOB_NAME_LABEL = "training.kubeflow.org/job-name"
OPERATOR_NAME_LABEL = "training.kubeflow.org/operator-name"
# Before training-operator v1.6 pods carried these instead.
LEGACY_JOB_NAME_LABEL = "job-name"
LEGACY_GROUP_LABEL = "group-name"

# The label selectors that find every training pod: the v1.6+ set and the pre-v1.6 one.
TRAINING_POD_SELECTORS = (JOB_NAME_LABEL, f"{LEGACY_GROUP_LABEL}={kinds.GROUP},{LEGACY_JOB_NAME_LABEL}")


def job_pod_selectors(job_name: str) -> tuple[str, str]:
    """The two label selectors that find one job's pods (v1.6+ first, then pre-v1.6)."""
    return (
        f"{JOB_NAME_LABEL}={job_name}",
        f"{LEGACY_GROUP_LABEL}={kinds.GROUP},{LEGACY_JOB_NAME_LABEL}={job_name}",
    )


def labelled_job_names(labels: Mapping[str, str]) -> set[str]:
    """Every job name these labels tie a pod to (a pod may carry both label sets)."""
    names = set()
    if JOB_NAME_LABEL in labels:
        names.add(labels[JOB_NAME_LABEL])
    if labels.get(LEGACY_GROUP_LABEL) == kinds.GROUP and LEGACY_JOB_NAME_LABEL in labels:
        names.add(labels[LEGACY_JOB_NAME_LABEL])
    return names


def has_training_label(labels: Mapping[str, str]) -> bool:
    """What TRAINING_POD_SELECTORS select, matched in memory."""
    return bool(labelled_job_names(labels))


def labels_name_job(labels: Mapping[str, str], job_name: str) -> bool:
    """What job_pod_selectors(job_name) select, matched in memory."""
    return job_name in labelled_job_names(labels)


def has_current_labels(labels: Mapping[str, str]) -> bool:
    """Labelled the v1.6+ way (a pod with only the pre-v1.6 set needs both LISTs)."""
    return JOB_NAME_LABEL in labels


@dataclass(frozen=True)
class Owner:
    """An ownerReference, as plain data."""

    api_version: str
    kind: str
    name: str
    uid: str = ""
    controller: bool = False


@dataclass(frozen=True)
class Ownership:
    """The job a pod belongs to (None: not ours), and whether another controller owns it."""

    job: JobRef | None
    foreign_controller: bool = False


def pod_ownership(namespace: str, owners: Iterable[Owner], labels: Mapping[str, str]) -> Ownership:
    """Controller ownerReference first; only a pod with no controller at all may be claimed
    by its labels (a pod some other controller owns is never ours, whatever its labels), and
    then only when the operator-name label tells the job's kind."""
    controller = next((o for o in owners if o.controller), None)
    if controller is not None:
        kind = kinds.lookup(controller.api_version, controller.kind)
        if kind is None:
            return Ownership(None, foreign_controller=True)
        return Ownership(
            JobRef(kind, namespace, controller.name, controller.uid or None, controller.api_version)
        )
    name = labels.get(JOB_NAME_LABEL)
    if not name and labels.get(LEGACY_GROUP_LABEL) == kinds.GROUP:
        name = labels.get(LEGACY_JOB_NAME_LABEL)
    kind = kinds.BY_OPERATOR_NAME.get(labels.get(OPERATOR_NAME_LABEL, ""))
    if not name or kind is None:
        return Ownership(None)  # no job, or a job whose kind cannot be told: not ours
    return Ownership(JobRef(kind, namespace, name))
