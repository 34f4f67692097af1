"""Which work an event calls for, with the reads Reference mode needs: event -> work.

Triage (pure) decides from the object an event carries; Reference mode carries none, so it
is read here first. A pod event that shows a failed run is also where its evidence is kept,
while the pod (and its log) still exists.
"""

from __future__ import annotations

from dataclasses import dataclass

from podsweeper import kinds
from podsweeper.cluster.base import Cluster
from podsweeper.config import Settings
from podsweeper.evidence import Source, failures_of
from podsweeper.keeper import EvidenceKeeper
from podsweeper.model import JobRef, Pod, Verb
from podsweeper.ownership import controlled_by
from podsweeper.report import log_disagreement
from podsweeper.triage import JobPass, PassReason, in_scope, triage_object
from podsweeper.triggers import Ignored, ObjectChange, ReferenceChange, SweepRequest, Trigger


@dataclass(frozen=True)
class Router:
    settings: Settings
    keeper: EvidenceKeeper

    def work_for(self, trigger: Trigger, cluster: Cluster) -> JobPass | SweepRequest | Ignored:
        if isinstance(trigger, (Ignored, SweepRequest)):
            return trigger
        namespace = trigger.namespace if isinstance(trigger, ReferenceChange) else trigger.obj.namespace
        outside = in_scope(namespace, self.settings)
        if outside is not None:
            return outside
        if isinstance(trigger, ReferenceChange):
            return self._resolve_reference(trigger, cluster)
        if isinstance(trigger.obj, Pod):
            self._keep_evidence(trigger.verb, trigger.obj, cluster)
        return triage_object(trigger, self.settings)

    def _keep_evidence(self, verb: Verb, pod: Pod, cluster: Cluster) -> None:
        """A pod event that shows a failed run not kept yet: keep the runs the pod shows when
        read now (its log too, while it exists), if it is that pod and its job's.

        The payload only says where to look: any caller can name any pod. The pod is read fresh
        (the event's uid, still there), its job proven by its controller chain read now, and what
        is kept is the fresh status's failed runs. A delete event's pod is gone and can be read
        no more: nothing is kept from it (the runs it showed were kept from its earlier events)."""
        if verb is Verb.DELETE or pod.job is None or pod.foreign_controller:
            return
        gpus = self.settings.gpu_resource_names
        if not self.keeper.any_new(failures_of(pod, pod.gpus(gpus), Source.TERMINATED)):
            return
        fresh = cluster.get_pod(pod.namespace, pod.name)
        if fresh is None or fresh.uid != pod.uid:
            fact = "gone" if fresh is None else f"another pod (uid {fresh.uid})"
            log_disagreement(f"pod {pod.namespace}/{pod.name} uid {pod.uid} failed", f"{fact}: nothing kept")
            return
        job = proven_job(fresh, cluster)
        if job is None or fresh.job is None or pod.job.key != fresh.job.key:
            log_disagreement(
                f"pod {pod.namespace}/{pod.name} is {pod.job.kind.kind} {pod.job.name}'s",
                "its controller chain, read now, does not prove it: nothing kept",
            )
            return
        failures = failures_of(fresh, fresh.gpus(gpus), Source.TERMINATED)
        if failures:
            self.keeper.keep(cluster, job, failures, read_logs=True)

    def _resolve_reference(self, ref: ReferenceChange, cluster: Cluster) -> JobPass | Ignored:
        """Reference mode carries no object: read it, then triage it like Resource mode."""
        if ref.link is not None:
            intermediate = cluster.get_intermediate(ref.link, ref.namespace, ref.name)
            if intermediate is None:
                if ref.verb is Verb.DELETE and ref.link == kinds.JOBSET:
                    job_ref = JobRef(kinds.TRAINJOB, ref.namespace, ref.name)
                    return JobPass(job_ref, PassReason.CHAIN)  # its Jobs may be left
                return Ignored(f"{ref.link.kind} no longer exists")
            return triage_object(ObjectChange(ref.verb, intermediate), self.settings)
        if ref.kind is not None:  # a job: the pass reads it fresh anyway
            job_ref = JobRef(ref.kind, ref.namespace, ref.name, None, ref.api_version)
            if ref.verb is Verb.DELETE:
                return JobPass(job_ref, PassReason.DELETED)
            # (a TrainJob's warning is decided on its JobSet's add, never on the job's)
            check = ref.verb is Verb.ADD and ref.kind.chain is None
            return JobPass(job_ref, PassReason.REFERENCE, check_backoff=check)
        if ref.verb is Verb.DELETE:
            return Ignored("pod deleted")
        pod = cluster.get_pod(ref.namespace, ref.name)
        if pod is None:
            return Ignored("pod no longer exists")
        return triage_object(ObjectChange(ref.verb, pod), self.settings)


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
