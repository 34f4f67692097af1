"""Which work an event calls for, with the reads Reference mode needs: event -> work.

Triage (pure) decides from the object an event carries; Reference mode carries none, so it
is read here first. Routing only reads: a pod event that claims a failed run is handed on as
a sighting, which the acting handle (podsweeper.actor) proves and keeps.
"""

from __future__ import annotations

from dataclasses import dataclass

from podsweeper import kinds
from podsweeper.cluster.base import Cluster
from podsweeper.config import Settings
from podsweeper.model import JobRef, Pod, Verb
from podsweeper.triage import JobPass, PassReason, in_scope, triage_object
from podsweeper.triggers import Ignored, ObjectChange, ReferenceChange, SweepRequest, Trigger

Work = JobPass | SweepRequest | Ignored


@dataclass(frozen=True)
class Sighting:
    """A pod event in scope, as its payload claims it: where its evidence may be (a claim:
    podsweeper.actor reads the pod and its chain before it keeps anything)."""

    verb: Verb
    pod: Pod


@dataclass(frozen=True)
class Router:
    settings: Settings

    def work_for(self, trigger: Trigger, cluster: Cluster) -> tuple[Work, Sighting | None]:
        """The work the event calls for, and the pod it sighted (Resource mode, in scope)."""
        if isinstance(trigger, (Ignored, SweepRequest)):
            return trigger, None
        namespace = trigger.namespace if isinstance(trigger, ReferenceChange) else trigger.obj.namespace
        outside = in_scope(namespace, self.settings)
        if outside is not None:
            return outside, None
        if isinstance(trigger, ReferenceChange):
            return self._resolve_reference(trigger, cluster), None
        sighted = Sighting(trigger.verb, trigger.obj) if isinstance(trigger.obj, Pod) else None
        return triage_object(trigger, self.settings), sighted

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
