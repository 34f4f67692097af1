"""The registry of rules: one entry per rule, in the order passes decide them.

Adding a rule is one module here (its checks and its RuleSpec) plus one line in RULES; the
passes (podsweeper.engine), the Events (podsweeper.report), the docs tables and the registry
test all read this table. A pod's first rule (in this order) that names it decides for it.
"""

from __future__ import annotations

from podsweeper.decisions import Rule
from podsweeper.rules import (
    clean_pod_policy_all,
    crash_loop,
    deadline_exceeded_jobset_running,
    failed_mpijob_running,
    finished_job_active_pod,
    finished_trainjob_restarted,
    no_backoff_limit,
    orphan,
    stuck_terminating,
    unbounded_jobset_restarts,
)
from podsweeper.rules.base import (
    ChainCheck,
    Context,
    Finding,
    JobCheck,
    Looks,
    PodCheck,
    RuleSpec,
    StuckCheck,
)

RULES: tuple[RuleSpec, ...] = (
    orphan.SPEC,
    finished_job_active_pod.SPEC,
    clean_pod_policy_all.SPEC,
    crash_loop.SPEC,
    no_backoff_limit.SPEC,
    failed_mpijob_running.SPEC,
    stuck_terminating.SPEC,
    finished_trainjob_restarted.SPEC,
    unbounded_jobset_restarts.SPEC,
    deadline_exceeded_jobset_running.SPEC,
)

BY_RULE: dict[Rule, RuleSpec] = {spec.rule: spec for spec in RULES}


def looking_at(looks: Looks) -> tuple[RuleSpec, ...]:
    """The rules a pass of this shape calls, in order."""
    return tuple(spec for spec in RULES if looks in spec.looks_at)


# Each pass shape's (rule, check) pairs, resolved once: the sweep runs the pod checks for
# every pod it lists.
POD_CHECKS: tuple[tuple[RuleSpec, PodCheck], ...] = tuple(
    (s, s.on_pod) for s in looking_at(Looks.POD) if s.on_pod
)
JOB_CHECKS: tuple[tuple[RuleSpec, JobCheck], ...] = tuple(
    (s, s.on_job) for s in looking_at(Looks.JOB) if s.on_job
)
CHAIN_CHECKS: tuple[tuple[RuleSpec, ChainCheck], ...] = tuple(
    (s, s.on_chain) for s in looking_at(Looks.CHAIN) if s.on_chain
)
STUCK_CHECKS: tuple[tuple[RuleSpec, StuckCheck], ...] = tuple(
    (s, s.on_stuck) for s in looking_at(Looks.STUCK) if s.on_stuck
)

__all__ = [
    "BY_RULE",
    "CHAIN_CHECKS",
    "JOB_CHECKS",
    "POD_CHECKS",
    "RULES",
    "STUCK_CHECKS",
    "Context",
    "Finding",
    "Looks",
]
