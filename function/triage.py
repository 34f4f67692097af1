"""Which work an event calls for, decided from the event alone (pure, no API calls).

Events are only triggers: triage picks the job to re-read, never decides a delete.
Events that no rule could act on are ignored here, so they cost no API request.
"""

from __future__ import annotations

from dataclasses import dataclass

from function.config import Settings
from function.engine import decide_new_job
from function.intake import ObjectChange
from function.model import Job, JobRef, Pod


@dataclass(frozen=True)
class JobPass:
    """Re-read one job and its pods, then decide. `why` names what triggered it."""

    ref: JobRef
    why: str  # "added" | "finished" | "deleted" | "crash-loop" | "sweep"
    check_backoff: bool = False
    # List pods by both the v1.6+ and the pre-v1.6 labels (the sweep saw legacy-only pods).
    all_label_sets: bool = False


@dataclass(frozen=True)
class Ignored:
    reason: str


def triage_object(change: ObjectChange, settings: Settings) -> JobPass | Ignored:
    obj = change.obj
    if not settings.namespace_allowed(obj.namespace):
        return Ignored(f"namespace {obj.namespace!r} is outside PODSWEEPER_NAMESPACES / excluded")
    if isinstance(obj, Pod):
        return _triage_pod(change.verb, obj, settings)
    return _triage_job(change.verb, obj, settings)


def _triage_pod(verb: str, pod: Pod, settings: Settings) -> JobPass | Ignored:
    if pod.job is None:
        return Ignored("not a pod of a training job")
    if verb == "delete":
        return Ignored("pod deleted")
    if pod.terminating:
        return Ignored("pod already terminating")
    if pod.max_crash_loop_restarts() >= settings.crashloop_restarts:
        return JobPass(pod.job, "crash-loop")
    return Ignored("no rule acts on this pod event alone; job events and the sweep cover it")


def _triage_job(verb: str, job: Job, settings: Settings) -> JobPass | Ignored:
    if verb == "delete":
        return JobPass(job.ref, "deleted")
    warn = verb == "add" and bool(decide_new_job(job, settings))
    if job.finished and not job.suspended:
        return JobPass(job.ref, "finished", check_backoff=warn)
    if warn:
        return JobPass(job.ref, "added", check_backoff=True)
        return JobPass(job.ref, "finished")
    return Ignored("job not finished")

