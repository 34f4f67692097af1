"""How each object the stream shows reads on the page: its state's label, colour and note.

One function per kind of object, so what a state *means* (a pod's phase and restarts, a job's
conditions) is said in one place, apart from how the observations become rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from podsweeper.intake import Ignored, ObjectChange, SweepRequest
from podsweeper.model import Job, Pod, Verb, Workload
from podsweeper.replay import ReplayStep


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


def restarts(pod: Pod) -> int:
    return max((c.restart_count for c in pod.containers), default=0)


def pod_state(pod: Pod, at: datetime) -> Seen:
    count = restarts(pod)
    loops = pod.max_crash_loop_restarts()
    label = pod.phase + (" (terminating)" if pod.terminating else "")
    if loops:
        label += f", CrashLoopBackOff x{loops}"
    elif count:
        label += f", {count} restarts"
    tone = pod.phase.lower() if pod.phase in ("Pending", "Running", "Succeeded", "Failed") else "unknown"
    short = f"CrashLoop x{loops}" if loops else pod.phase
    return Seen(at, label, tone, crash_loop=bool(loops), restarts=count, short=short)


def pod_text(pod: Pod) -> str:
    return pod_state(pod, datetime.min).label


def job_state(job: Job, verb: Verb, at: datetime) -> Seen:
    if verb is Verb.DELETE:
        return Seen(at, "deleted", "deleted", note="the job was deleted (watch event)")
    if job.finished:
        since = f"; condition since {job.finished_at:%H:%M:%S}" if job.finished_at else ""
        return Seen(at, f"finished: {job.finished}", job.finished.lower(), note=f"{job.finished}{since}")
    if job.suspended:
        return Seen(at, "suspended", "suspended", note="spec.runPolicy.suspend is true")
    if verb is Verb.ADD:
        return Seen(at, "created", "created", note="added, not finished")
    return Seen(at, "running", "running", note="updated, no Succeeded/Failed condition")


def trigger_text(step: ReplayStep) -> str:
    """What led to a decision: the event, the sweep, or why the event was ignored."""
    trigger = step.intake.trigger
    if isinstance(trigger, SweepRequest):
        return "backstop sweep (ping)"
    if isinstance(trigger, ObjectChange):
        obj = trigger.obj
        kind = (
            "pod" if isinstance(obj, Pod) else obj.link.kind if isinstance(obj, Workload) else obj.kind.kind
        )
        return f"{kind} {trigger.verb.value} {obj.namespace}/{obj.name}"
    if isinstance(trigger, Ignored):
        return f"ignored event: {trigger.reason}"
    return f"reference {trigger.verb.value} {trigger.namespace}/{trigger.name}"
