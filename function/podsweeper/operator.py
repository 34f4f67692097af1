"""What a v1 operator deletes itself once its job finished: podsweeper waits for that first."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from podsweeper.config import Settings
from podsweeper.model import CleanPodPolicy, Job, Pod


def operator_deletes(pod: Pod, job: Job) -> bool:
    """Whether the job's operator deletes this pod itself now that the job has finished."""
    if pod.batch_job is not None:
        return False  # a launcher: the mpi-operator's cleanup deletes workers only (#643)
    policy = job.clean_pod_policy
    return policy is CleanPodPolicy.ALL or (policy is CleanPodPolicy.RUNNING and pod.active)


def operator_grace_left(pod: Pod, job: Job, now: datetime, settings: Settings) -> float | None:
    """Seconds the operator still has to delete this pod itself; None when it is not waited for.

    Deleting such a pod at once races the operator (measured with training-operator v1.9.4: it
    deletes a pod's headless Service only after the pod, and gives up on the Service when the
    pod is already gone). A job whose finishing time is not recorded cannot be waited for.
    """
    if not job.finished or job.finished_at is None or not operator_deletes(pod, job):
        return None
    left = settings.operator_grace_seconds - (now - job.finished_at).total_seconds()
    return left if left > 0 else None


def left_to_operator(job: Job | None, pods: Iterable[Pod], now: datetime, settings: Settings) -> str | None:
    """Says which pods are left to the operator's own cleanup for now, if any (for the log)."""
    if job is None:
        return None
    waits = [left for pod in pods if (left := operator_grace_left(pod, job, now, settings)) is not None]
    if not waits:
        return None
    return (
        f"cleanPodPolicy {job.clean_pod_policy.value}: the operator has {max(waits):.0f}s left to delete "
        f"{len(waits)} pod(s) itself (PODSWEEPER_OPERATOR_GRACE_SECONDS); podsweeper is the backstop after that"
    )
