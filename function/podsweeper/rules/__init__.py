"""The rules, loaded from the registry: one line per rule in podsweeper.decisions.Rule, one
module per rule here (podsweeper.rules.<name in lower case>, its checks and its RuleSpec).

The passes (podsweeper.engine), the sweep's nominations, the Events (podsweeper.report), the
docs tables and the registry test all read RULES, in the registry's order: a pod's first rule
(in this order) that names it decides for it.
"""

from __future__ import annotations

from importlib import import_module

from podsweeper.decisions import Rule
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


def _load(rule: Rule) -> RuleSpec:
    spec = import_module(f"podsweeper.rules.{rule.name.lower()}").SPEC
    if not isinstance(spec, RuleSpec) or spec.rule is not rule:
        raise ImportError(f"podsweeper.rules.{rule.name.lower()}.SPEC is not rule {rule.value}'s RuleSpec")
    return spec


RULES: tuple[RuleSpec, ...] = tuple(_load(rule) for rule in Rule)

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
