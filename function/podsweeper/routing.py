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
        """A pod event that shows a failed run: keep it (its log too, while the pod exists)."""
        if pod.job is None or pod.foreign_controller or not any(c.failed for c in pod.containers):
            return
        gone = verb is Verb.DELETE
        failures = failures_of(
            pod, pod.gpus(self.settings.gpu_resource_names), Source.DELETED if gone else Source.TERMINATED
        )
        self.keeper.keep(cluster, pod.job, failures, read_logs=not gone)

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
