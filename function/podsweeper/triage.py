"""Which work an event calls for, decided from the event alone (pure, no API calls).

Events are only triggers: triage picks the job to re-read, never decides anything about
it. Events that no rule could act on are ignored here, so they cost no API request.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from podsweeper.config import Settings
from podsweeper.model import Intermediate, Job, JobRef, Pod, Verb
from podsweeper.ownership import intermediate_job
from podsweeper.triggers import Ignored, ObjectChange


class PassReason(StrEnum):
    """What made podsweeper re-read a job."""

    ADDED = "added"  # a new job that may deserve the no-backoff-limit warning
    FINISHED = "finished"
    DELETED = "deleted"
    CRASH_LOOP = "crash-loop"  # a pod event showed a crash loop past the threshold
    REFERENCE = "reference"  # Reference mode: the event named the job, nothing more
    SWEEP = "sweep"  # the backstop sweep found pods a rule names
    CHAIN = "chain"  # a JobSet or batch Job of a chained job (Trainer v2) changed

    @property
    def lists_pods(self) -> bool:
        """Whether the pass lists the job's pods even while the job is running."""
        return self in (PassReason.CRASH_LOOP, PassReason.SWEEP)


@dataclass(frozen=True)
class JobPass:
    """Re-read one job and its pods, then decide."""

    ref: JobRef
    reason: PassReason
    check_backoff: bool = False  # also decide rule no-backoff-limit on the fresh job
    # List pods by both the v1.6+ and the pre-v1.6 labels (the sweep saw legacy-only pods).
    all_label_sets: bool = False
    # When the event says the job finished (its finishing condition's lastTransitionTime): a
    # claim, never a fact. It only narrows what a fresh read may corroborate (lineage.finish_seen).
    claimed_finish: datetime | None = None


def in_scope(namespace: str, settings: Settings) -> Ignored | None:
    """The namespace gate: every event and every swept job passes through here."""
    if settings.namespace_allowed(namespace):
        return None
    return Ignored(f"namespace {namespace!r} is outside PODSWEEPER_NAMESPACES / excluded")


def triage_object(change: ObjectChange, settings: Settings) -> JobPass | Ignored:
    """An object from a Resource-mode event (or read for a Reference-mode one), in scope."""
    if isinstance(change.obj, Pod):
        return _triage_pod(change.verb, change.obj, settings)
    if isinstance(change.obj, Intermediate):
        return _triage_intermediate(change.verb, change.obj)
    return _triage_job(change.verb, change.obj)


def _triage_pod(verb: Verb, pod: Pod, settings: Settings) -> JobPass | Ignored:
    if pod.job is None:
        return Ignored("not a pod of a training job")
    if pod.job.kind.chain is not None:
        return Ignored(
            f"a {pod.job.kind.kind}'s pods are decided at its JobSet, on JobSet, Job and job events"
        )
    if verb is Verb.DELETE:
        return Ignored("pod deleted")
    if pod.terminating:
        return Ignored("pod already terminating")
    if pod.max_crash_loop_restarts() >= settings.crashloop_restarts:
        return JobPass(pod.job, PassReason.CRASH_LOOP)
    return Ignored("no rule acts on this pod event alone; job events and the sweep cover it")


def _triage_intermediate(verb: Verb, intermediate: Intermediate) -> JobPass | Ignored:
    """A JobSet or batch Job event. Passes only when a chain rule may apply: a new JobSet (a
    TrainJob's may restart without bound, or come back after its TrainJob finished), a gone
    JobSet (its Jobs may be left), and one that has lost its controller (orphaned)."""
    ref = intermediate_job(intermediate)
    if ref is None:
        return Ignored(f"{intermediate.link.kind} {intermediate.name} names no training job")
    chain = ref.kind.chain
    if chain is not None and intermediate.link in chain.companions:
        # The job's events and the sweep say when it finished: its gang's changes add nothing.
        return Ignored(
            f"{intermediate.link.kind} {intermediate.name}: its job's events and the sweep cover it"
        )
    top = chain is not None and intermediate.link == chain.links[0]
    if top and verb is Verb.ADD:
        return JobPass(ref, PassReason.CHAIN, check_backoff=True)
    if top and verb is Verb.DELETE:
        return JobPass(ref, PassReason.CHAIN)
    if verb is not Verb.DELETE and intermediate.controller is None:
        return JobPass(ref, PassReason.CHAIN)
    return Ignored(f"{intermediate.link.kind} {intermediate.name}: no chain rule acts on this change alone")


def _triage_job(verb: Verb, job: Job) -> JobPass | Ignored:
    if verb is Verb.DELETE:
        return JobPass(job.ref, PassReason.DELETED)
    # Only a new job is checked for unbounded restarts; the pass decides on the fresh job.
    check_backoff = verb is Verb.ADD and bool(job.replicas_restarting_forever)
    if (job.finished or job.failed_unsettled_at) and not job.suspended:
        claimed = job.finished_at if job.finished else job.failed_unsettled_at
        return JobPass(job.ref, PassReason.FINISHED, check_backoff=check_backoff, claimed_finish=claimed)
    if check_backoff:
        return JobPass(job.ref, PassReason.ADDED, check_backoff=True)
    return Ignored("job not finished")
