"""Reporting: one JSON log line per decision, and the Kubernetes Events that keep evidence.

Event names are derived from what they are about, so the same warning again updates one
Event (its count) instead of creating a new one per event received.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
from collections.abc import Iterable
from datetime import datetime
from typing import TextIO

from podsweeper.decisions import Decision, Result, Rule
from podsweeper.model import ContainerView, EventRecord, JobRef
from podsweeper.policy import Knob, knobs_of
from podsweeper.rules import BY_RULE

decision_log = logging.getLogger("podsweeper.decisions")

MAX_EVENT_MESSAGE = 1024


def warning_reason(rule: Rule) -> str:
    """The Event reason of a rule's warning: its registry entry's (podsweeper.rules)."""
    reason = BY_RULE[rule].warning_reason
    if reason is None:
        raise ValueError(f"rule {rule} never warns")
    return reason


def suspend_reason(rule: Rule) -> str:
    """The Event reason when a rule suspends a job: its registry entry's."""
    reason = BY_RULE[rule].suspend_reason
    if reason is None:
        raise ValueError(f"rule {rule} never suspends")
    return reason


def job_delete_reason(rule: Rule) -> str:
    """The Event reason written before a rule deletes a training job itself: its entry's. A
    rule without one never deletes a job (the acting side asks here before every such delete)."""
    reason = BY_RULE[rule].job_delete_reason
    if reason is None:
        raise ValueError(f"rule {rule} never deletes a training job")
    return reason


class _StdoutHandler(logging.StreamHandler[TextIO]):
    """Writes to sys.stdout as it is at each line, not as it was at set-up (as logging's own
    last-resort handler does for stderr): a redirect made later (the CLI's caller, a test's
    capture) still gets the decision lines, even when a Service was built first."""

    @property
    def stream(self) -> TextIO:
        return sys.stdout

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


def setup_logging() -> None:
    """Decision lines are JSON already: print them bare, one per line, on stdout. Once per
    process: the Service and the CLI both call it."""
    if decision_log.handlers:
        return
    handler = _StdoutHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    decision_log.addHandler(handler)
    decision_log.setLevel(logging.INFO)
    decision_log.propagate = False


def rule_knobs(rule: Rule) -> tuple[Knob, ...]:
    """What a namespace may set that this rule's decisions depend on (besides the mode)."""
    return knobs_of(BY_RULE[rule].settings)


def applied_settings(decision: Decision) -> dict[str, dict[str, str]]:
    """The settings a decision was made under and where each came from ({} if not stamped)."""
    return {} if decision.policy is None else decision.policy.applied(rule_knobs(decision.rule))


def _settings_note(decision: Decision, *more: Decision) -> str:
    """The same, for an Event's message (the decisions of one job: one namespace, one policy)."""
    if decision.policy is None:
        return ""
    knobs = [knob for d in (decision, *more) for knob in rule_knobs(d.rule)]
    return f" [podsweeper settings: {decision.policy.describe(knobs)}]"


def log_decision(
    event_id: str, decision: Decision, result: Result | None, dry_run: bool, gpu_seconds: float = 0.0
) -> None:
    line = {
        "msg": "decision",
        "event_id": event_id,
        **decision.as_dict(),
        "result": result.value if result else None,
        "dry_run": dry_run,
        "gpus": decision.gpus,
        "gpu_seconds": round(gpu_seconds, 1),
        "settings": applied_settings(decision),
    }
    decision_log.info(json.dumps(line, sort_keys=False))


def log_disagreement(claim: str, fresh: str) -> None:
    """An event whose payload the fresh read contradicts: said once in the decision log, and
    nothing is done on it (a payload is a claim, never a fact)."""
    line = {"msg": "payload disagrees with fresh state", "claim": claim, "fresh": fresh}
    decision_log.info(json.dumps(line, sort_keys=False))


def _event_name(job: JobRef, *parts: str) -> str:
    digest = hashlib.sha256("|".join((job.uid or "", *parts)).encode()).hexdigest()[:16]
    return f"{job.name[:200]}.{digest}"


def truncate(message: str, tail: str = "") -> str:
    """At most MAX_EVENT_MESSAGE characters; `tail` (the settings note) is kept whole."""
    room = MAX_EVENT_MESSAGE - len(tail)
    return (message if len(message) <= room else message[: room - 3] + "...") + tail


def describe_container(c: ContainerView) -> str:
    facts = []
    if c.exit_code is not None:
        facts.append(f"exit code {c.exit_code}")
    if c.reason:
        facts.append(f"reason {c.reason}")
    if c.crash_looping:
        facts.append("CrashLoopBackOff")
    facts.append(f"{c.restart_count} restarts")
    return f"{c.name}: {', '.join(facts)}"


def warning_event(decision: Decision, now: datetime) -> EventRecord:
    """One Warning per (job, pod, rule): repeats bump the count of the same Event, a crash
    loop's only when the pod's restart count has grown since."""
    about = decision.name if decision.is_pod else ""
    progress = None
    if decision.rule is Rule.CRASH_LOOP:
        progress = max((c.restart_count for c in decision.evidence), default=None)
    return EventRecord(
        name=_event_name(decision.job, decision.rule.value, about),
        involved=decision.job,
        type="Warning",
        reason=warning_reason(decision.rule),
        message=truncate(f"{decision.kind} {decision.name}: {decision.reason}", _settings_note(decision)),
        time=now,
        progress=progress,
    )


def suspend_event(decision: Decision, now: datetime) -> EventRecord:
    """podsweeper set the job's suspend switch, and why (the rule's reason)."""
    switch = decision.job.kind.suspend_field
    return EventRecord(
        name=_event_name(decision.job, "suspend"),
        involved=decision.job,
        type="Warning",
        reason=suspend_reason(decision.rule),
        message=truncate(
            f"podsweeper suspended the job ({switch}: true): {decision.kind} {decision.name}: "
            f"{decision.reason}. Fix the cause, then set suspend: false to start it again.",
            _settings_note(decision),
        ),
        time=now,
    )


def job_delete_event(decision: Decision, now: datetime) -> EventRecord:
    """Written on the job before podsweeper deletes it (rule expired-trainjob): the last word
    on it its owners can read (Events are not owned by it: they outlive it by the API server's
    event TTL), with where its evidence went."""
    return EventRecord(
        name=_event_name(decision.job, decision.rule.value),
        involved=decision.job,
        type="Normal",
        reason=job_delete_reason(decision.rule),
        message=truncate(
            f"podsweeper deletes {decision.kind} {decision.name} (uid {decision.uid}): {decision.reason}. "
            f"Its evidence: podsweeper evidence {decision.namespace}/{decision.name}",
            _settings_note(decision),
        ),
        time=now,
    )


def cleanup_event(job: JobRef, deleted: Iterable[Decision], now: datetime) -> EventRecord:
    """PodsCleanedUp: which pods (or, for a chain, which JobSets/Jobs and so their pods) went,
    why, and how their containers died."""
    deleted = sorted(deleted, key=lambda d: (d.kind, d.name))
    parts = []
    for d in deleted:
        facts = "; ".join([*([d.detail] if d.detail else []), *(describe_container(c) for c in d.evidence)])
        shown = d.name if d.is_pod else f"{d.kind} {d.name}"
        parts.append(f"{shown} [{d.rule.value}]" + (f" ({facts})" if facts else ""))
    gpus = sum(d.gpus for d in deleted)
    held = sum(d.gpu_seconds(now) for d in deleted)
    reclaimed = f" ({gpus} GPU(s) freed, {held:.0f} GPU-seconds held since no longer needed)" if gpus else ""
    pods = sum(1 for d in deleted if d.is_pod)
    what = [f"{pods} pod(s)"] if pods else []
    if len(deleted) > pods:
        what.append(f"{len(deleted) - pods} object(s) with their pods")
    message = f"podsweeper deleted {' and '.join(what)}{reclaimed}: " + ", ".join(parts)
    return EventRecord(
        name=_event_name(job, "cleanup", *(d.uid for d in deleted)),
        involved=job,
        type="Normal",
        reason="PodsCleanedUp",
        message=truncate(message, _settings_note(*deleted)),
        time=now,
    )
