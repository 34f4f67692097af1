"""Proof from fresh reads: whose a pod is, by its controller chain read now (with uids).

A payload's claim that a pod is a job's is a claim; what is acted on or recorded for a job is
proven here first, by reading each link of the chain the pod names.
"""

from __future__ import annotations

from podsweeper.cluster.base import Cluster
from podsweeper.model import JobRef, Pod
from podsweeper.ownership import controlled_by


def proven_job(pod: Pod, cluster: Cluster) -> JobRef | None:
    """The job a pod read now belongs to, proven by reading its controller chain now (with the
    job's uid); None when the chain does not hold. A pod claimed by labels only (no controller)
    is its labelled job's if that job exists: labels are the operators' own claim for such pods."""
    ref = pod.job
    if ref is None or pod.foreign_controller:
        return None
    job = cluster.get_job(ref)
    if job is None or (ref.uid and job.uid != ref.uid):
        return None
    link = pod.batch_job
    if link is None:
        return job.ref
    chain = ref.kind.chain
    if chain is None:  # a launcher pod: its batch Job is controlled by the job itself
        launcher = ref.kind.launches(job.ref.version)
        batch = cluster.get_intermediate(launcher.link, pod.namespace, link.name) if launcher else None
        if batch is None or batch.uid != link.uid:
            return None
        return job.ref if controlled_by(batch.controller, ref.kind.kind, job.uid) else None
    batch = cluster.get_intermediate(chain.links[-1], pod.namespace, link.name)
    jobset = cluster.get_intermediate(chain.links[0], pod.namespace, ref.name)
    if batch is None or batch.uid != link.uid or jobset is None:
        return None
    if not controlled_by(jobset.controller, ref.kind.kind, job.uid):
        return None
    return job.ref if controlled_by(batch.controller, jobset.link.kind, jobset.uid) else None
