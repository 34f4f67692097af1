"""Printing a replay: a human timeline by default, JSON lines with --json."""

from __future__ import annotations

import json
from typing import Any, TextIO

from podsweeper.decisions import Result
from podsweeper.evidence import Source
from podsweeper.model import Intermediate, Job, Pod
from podsweeper.replay import ReplayRun, ReplayStep
from podsweeper.triggers import ObjectChange, ReferenceChange, SweepRequest


def _what(step: ReplayStep) -> str:
    trigger = step.intake.trigger
    verb = step.intake.attributes.type.rsplit(".", 1)[-1]
    if isinstance(trigger, ObjectChange):
        obj = trigger.obj
        if isinstance(obj, Pod):
            loops = obj.max_crash_loop_restarts()
            state = f"{obj.phase}" + (f", CrashLoopBackOff x{loops}" if loops else "")
            return f"pod {verb:<6} {obj.namespace}/{obj.name} ({state})"
        state = obj.finished or ("Suspended" if obj.suspended else "active")
        if isinstance(obj, Intermediate):  # a JobSet or batch Job of a Trainer v2 chain
            owner = obj.controller
            made_by = f"controller {owner.kind} {owner.name}" if owner else "no controller"
            return f"{obj.link.kind} {verb} {obj.namespace}/{obj.name} ({state}, {made_by})"
        if obj.kind.chain is not None:  # a TrainJob: no cleanPodPolicy
            return f"{obj.kind.kind} {verb} {obj.namespace}/{obj.name} ({state})"
        return f"{obj.kind.kind} {verb} {obj.namespace}/{obj.name} ({state}, cleanPodPolicy {obj.clean_pod_policy})"
    if isinstance(trigger, ReferenceChange):
        return f"reference {verb} {trigger.namespace}/{trigger.name}"
    if isinstance(trigger, SweepRequest):
        if step.final:
            return "final sweep: what the PingSource would run next (--no-final-sweep leaves it out)"
        return "ping: backstop sweep"
    return f"{step.intake.attributes.type} (ignored: {trigger.reason})"


def print_step_human(step: ReplayStep, out: TextIO) -> None:
    applied = step.outcome.applied
    trigger = step.intake.trigger
    about_job = isinstance(trigger, ObjectChange) and isinstance(trigger.obj, Job | Intermediate)
    if not applied and step.observed is None and not about_job and not isinstance(trigger, SweepRequest):
        return  # quiet for the many pod events that change nothing
    print(f"{step.time:%H:%M:%S}  {_what(step)}", file=out)
    if step.observed:
        print(f"          ignored: {step.observed}", file=out)
    elif not applied and step.outcome.note:
        print(f"          nothing to do: {step.outcome.note}", file=out)
    for item in applied:
        d = item.decision
        result = f" -> {item.result.value}" if item.result and item.result is not Result.WARNED else ""
        print(
            f"          {d.action.value.upper():<6} {d.kind} {d.namespace}/{d.name}{result}  "
            f"[{d.rule.value}] {d.reason}",
            file=out,
        )
        for c in d.evidence:
            print(
                f"                 evidence {c.name}: exit code {c.exit_code}, reason {c.reason}, "
                f"{c.restart_count} restarts",
                file=out,
            )


def print_step_json(step: ReplayStep, out: TextIO) -> None:
    for item in step.outcome.applied:
        line = {
            "event_id": step.outcome.event_id,
            **item.decision.as_dict(),
            "result": item.result.value if item.result else None,
            "time": step.time.isoformat(),
            "file": step.path,
            "line": step.line,
        }
        print(json.dumps(line), file=out)


def print_header(paths: list[str], out: TextIO) -> None:
    print(
        f"Replaying {', '.join(paths)} against a simulated cluster built from the events "
        "(nothing real is touched).\n",
        file=out,
    )


def print_summary(run: ReplayRun, out: TextIO) -> None:
    counts: dict[str, int] = {}
    for step in run.steps:
        for item in step.outcome.applied:
            key = f"{item.decision.action.value} ({item.decision.rule.value})"
            counts[key] = counts.get(key, 0) + 1
    print(f"\n{len(run.steps)} events replayed.", file=out)
    for key, count in sorted(counts.items()):
        print(f"  {count:>4} x {key}", file=out)
    remaining = sorted(f"{p.namespace}/{p.name} ({p.phase})" for p in run.cluster.pods.values())
    print(f"pods left in the simulated cluster: {', '.join(remaining) or 'none'}", file=out)


def _source(value: Any) -> str:
    """A record's source and what it means; one this version does not know, as written."""
    try:
        source = Source(value)
    except ValueError:
        return str(value)
    return f"{source.value} ({source.meaning})"


def print_evidence(job: str, records: list[dict[str, Any]], out: TextIO, as_json: bool = False) -> None:
    """A job's kept failures as a timeline (or JSON lines): when, which run, how it ended, and
    what became of its pod (the record's source, said in words: a reader in a hurry must not
    take "would be deleted (dry-run)" or "deferred" for a delete)."""
    if as_json:
        for record in records:
            print(json.dumps(record, sort_keys=True), file=out)
        return
    print(f"Evidence kept for {job}: {len(records)} failed run(s).", file=out)
    for r in records:
        ended = r.get("finished_at", "?")
        how = ", ".join(
            part
            for part in (
                f"exit code {r['exit_code']}" if "exit_code" in r else "",
                f"signal {r['signal']}" if "signal" in r else "",
                f"reason {r['reason']}" if "reason" in r else "",
                f"{r.get('restart_count', 0)} restarts",
                f"{r['gpus']} GPU(s)" if r.get("gpus") else "",
            )
            if part
        )
        print(f"\n{ended}  {r.get('pod')}/{r.get('container')} on {r.get('node') or '?'}: {how}", file=out)
        print(f"    started {r.get('started_at', '?')}; source: {_source(r.get('source'))}", file=out)
        if r.get("message"):
            print(f"    message: {r['message']}", file=out)
        for line in (r.get("logs") or "").splitlines():
            print(f"    | {line}", file=out)
