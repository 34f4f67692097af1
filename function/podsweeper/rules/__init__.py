"""The rules: one module per rule here (its checks, its sweep hook, its RuleSpec), in the
order of the registry, podsweeper.decisions.Rule.

Adding a rule is its module, its name in Rule (the order the passes decide in: a pod's first
rule that names it decides for it) and its module's name in the import below: RULES follows
Rule's order, and a name in Rule without its module fails the import. The passes
(podsweeper.engine), the sweep's nominations, the Events (podsweeper.report), the docs tables
and the registry test all read RULES. (Imported by name, never loaded dynamically: the package
loads no code by a computed name.)
"""

from __future__ import annotations

from podsweeper.decisions import Rule
from podsweeper.rules import (
    clean_pod_policy_all,
    crash_loop,
    deadline_exceeded_jobset_running,
    expired_trainjob,
    failed_mpijob_running,
    failed_trainjob_podgroup,
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
    Listed,
    Looks,
    Nominates,
    PodCheck,
    RuleSpec,
    StuckCheck,
)


def _spec(rule: Rule) -> RuleSpec:
    """The rule's module, imported above under its name in lower case, and its spec."""
    module = globals().get(rule.name.lower())
    spec = getattr(module, "SPEC", None)
    if not isinstance(spec, RuleSpec) or spec.rule is not rule:
        raise ImportError(f"rule {rule.value} (podsweeper.decisions.Rule) has no module imported here")
    return spec


RULES: tuple[RuleSpec, ...] = tuple(_spec(rule) for rule in Rule)

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


def nominating(looks: Looks) -> tuple[tuple[RuleSpec, Nominates], ...]:
    """The rules of a pass shape that nominate from listed state, with their hooks: the sweep
    asks these, so a new rule never opens the sweep."""
    return tuple((s, s.nominates) for s in looking_at(looks) if s.nominates)


__all__ = [
    "BY_RULE",
    "CHAIN_CHECKS",
    "JOB_CHECKS",
    "POD_CHECKS",
    "RULES",
    "STUCK_CHECKS",
    "Context",
    "Finding",
    "Listed",
    "Looks",
]
