"""How each object the stream shows reads on the page: its state's label, colour and note.

One function per kind of object, so what a state *means* (a pod's phase and restarts, a job's
or a JobSet's conditions, what suspending a job does) is said in one place, apart from how the
observations become rows. What differs between kinds is read from the kind table
(`podsweeper.kinds`), never from a kind's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from podsweeper.kinds import TrainingKind
from podsweeper.model import Intermediate, Job, Pod, Verb
from podsweeper.replay import ReplayStep
from podsweeper.triggers import Ignored, ObjectChange, SweepRequest


@dataclass
class Seen:
    """One observed state of a row, before it becomes a span."""

    time: datetime
    label: str
    tone: str
    crash_loop: bool = False
    note: str = ""
    restarts: int = 0
    short: str = ""


def pod_state(pod: Pod, at: datetime) -> Seen:
    restarts = max((c.restart_count for c in pod.containers), default=0)
    loops = pod.max_crash_loop_restarts()
    label = pod.phase + (" (terminating)" if pod.terminating else "")
    if loops:
        label += f", CrashLoopBackOff x{loops}"
    elif restarts:
        label += f", {restarts} restarts"
    tone = pod.phase.lower() if pod.phase in ("Pending", "Running", "Succeeded", "Failed") else "unknown"
    short = f"CrashLoop x{loops}" if loops else pod.phase
    return Seen(at, label, tone, crash_loop=bool(loops), restarts=restarts, short=short)


def _finished_tone(finished: str, conditions: tuple[str, str] | tuple[()]) -> str:
    """A finishing condition's colour: each kind names its success its own way (Succeeded,
    Complete, Completed)."""
    return "succeeded" if conditions and finished == conditions[0] else "failed"


def suspend_note(job: Job) -> str:
    """What a suspended job's switch does: a v1 operator deletes the job's pods; a chained
    kind's controller suspends the chain's top (a TrainJob's JobSet), which suspends the rest."""
    kind = job.kind
    switch = kind.suspend_field
    if kind.chain is not None:
        top, last = kind.chain.links[0], kind.chain.links[-1]
        return (
            f"{switch} is true: the {kind.kind} controller suspends its {top.kind}, "
            f"which suspends its {last.kind}s (their pods go, the {top.kind} stays)"
        )
    launcher = kind.launches(job.ref.version)
    if launcher is not None:
        return f"{switch} is true: the operator deletes its workers and suspends its launcher {launcher.link.kind}"
    return f"{switch} is true: the operator deletes its pods"


def job_state(job: Job, verb: Verb, at: datetime) -> Seen:
    success, failure = job.kind.finished_conditions
    if verb is Verb.DELETE:
        return Seen(at, "deleted", "deleted", note="the job was deleted (watch event)")
    if job.finished:
        since = f"; condition since {job.finished_at:%H:%M:%S}" if job.finished_at else ""
        tone = _finished_tone(job.finished, job.kind.finished_conditions)
        return Seen(at, f"finished: {job.finished}", tone, note=f"{job.finished}{since}")
    if job.suspended:
        return Seen(at, "suspended", "suspended", note=suspend_note(job))
    if verb is Verb.ADD:
        return Seen(at, "created", "created", note="added, not finished")
    return Seen(at, "running", "running", note=f"updated, no {success}/{failure} condition")


def job_facts(kind: TrainingKind, job: Job) -> str:
    """The subtitle's fact about how the job's pods are cleaned up: a v1 job's cleanPodPolicy,
    or, for a kind that has none, the chain its pods hang from."""
    if kind.chain is not None:
        return "pods through " + " → ".join(link.kind for link in kind.chain.links)
    return f"cleanPodPolicy {job.clean_pod_policy.value}"


def intermediate_state(intermediate: Intermediate, verb: Verb, at: datetime) -> Seen:
    """A JobSet's or batch Job's state; one left without a controller is `orphaned`."""
    owner = intermediate.controller
    made_by = f"controller {owner.kind} {owner.name}" if owner else "no controller: orphaned"
    if intermediate.finished:
        tone = _finished_tone(intermediate.finished, intermediate.link.finished_conditions)
        label, note = f"finished: {intermediate.finished}", f"{intermediate.finished} condition"
    elif intermediate.suspended:
        label, tone, note = "suspended", "suspended", "spec.suspend or its Suspended condition"
    elif owner is None:
        label, tone, note = "orphaned", "orphaned", "not finished"
    elif verb is Verb.ADD:
        label, tone, note = "created", "created", "added, not finished"
    else:
        label, tone, note = "active", "running", "updated, not finished"
    short = label
    if intermediate.terminating:
        label += " (terminating)"
    if owner is None and tone != "orphaned":
        label += ", no controller"
    return Seen(at, label, tone, note=f"{note}; {made_by}", short=short)


def trigger_text(step: ReplayStep) -> str:
    """What led to a decision: the event, the sweep, or why the event was ignored."""
    trigger = step.intake.trigger
    if isinstance(trigger, SweepRequest):
        return "backstop sweep (ping)"
    if isinstance(trigger, ObjectChange):
        obj = trigger.obj
        kind = (
            "pod"
            if isinstance(obj, Pod)
            else obj.link.kind
            if isinstance(obj, Intermediate)
            else obj.kind.kind
        )
        return f"{kind} {trigger.verb.value} {obj.namespace}/{obj.name}"
    if isinstance(trigger, Ignored):
        return f"ignored event: {trigger.reason}"
    return f"reference {trigger.verb.value} {trigger.namespace}/{trigger.name}"
