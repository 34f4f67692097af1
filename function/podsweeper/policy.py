"""Namespace policy: what a Namespace's podsweeper.dev/ annotations change there, and how far.

Pure: the global Settings and one namespace's annotations in, that namespace's policy out
(each value with where it came from, and the problems found). The bounds are the global
configuration's:

* a namespace may always make podsweeper safer: `off`, `dry-run`, `warn` for a crash loop,
  longer graces (up to PODSWEEPER_NAMESPACE_MAX_GRACE_SECONDS);
* `podsweeper.dev/evidence-logs: off` keeps no container text (log lines, termination
  message) in its evidence; `on` only where the global settings read logs there already;
* it may make podsweeper bolder only where the platform allowed it: `live` under a global
  dry-run only with PODSWEEPER_NAMESPACE_LIVE_ALLOWED, a crash-loop action other than `warn`
  and the global one only if PODSWEEPER_NAMESPACE_CRASHLOOP_ACTIONS names it, a shorter grace
  only down to PODSWEEPER_NAMESPACE_MIN_GRACE_SECONDS (unset: none shorter);
* `podsweeper.dev/trainjob-ttl-seconds` (rule expired-trainjob): `off` always; a number of
  seconds only where the platform turned the TTL on (PODSWEEPER_TRAINJOB_TTL_SECONDS) and not
  below PODSWEEPER_TRAINJOB_TTL_MIN_SECONDS;
* a value that is not understood, or not allowed, is a problem: the global setting is used
  for it (the caller writes a Warning Event on the Namespace).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from podsweeper.config import CrashLoopAction, Settings

T = TypeVar("T")
PREFIX = "podsweeper.dev/"
# podsweeper.dev/ annotations on a Namespace that are not a policy (none today besides these).
NOT_POLICY = frozenset({f"{PREFIX}skip"})


class Mode(StrEnum):
    """What podsweeper does in a namespace: code branches on this, never on the words."""

    OFF = "off"  # nothing: no decision, no delete, no suspend, no warning, no CloudEvent
    DRY_RUN = "dry-run"  # decide and report, delete and suspend nothing
    LIVE = "live"


class Knob(StrEnum):
    """What a namespace may set: its annotation is podsweeper.dev/<value>."""

    MODE = "mode"
    CRASHLOOP_ACTION = "crashloop-action"
    ORPHAN_GRACE = "orphan-grace-seconds"
    OPERATOR_GRACE = "operator-grace-seconds"
    EVIDENCE_LOGS = "evidence-logs"
    TRAINJOB_TTL = "trainjob-ttl-seconds"

    @property
    def annotation(self) -> str:
        return PREFIX + self.value


# The knobs a rule's decisions depend on, by the PODSWEEPER_* variables its entry names.
KNOB_OF_VARIABLE = {
    "PODSWEEPER_CRASHLOOP_ACTION": Knob.CRASHLOOP_ACTION,
    "PODSWEEPER_ORPHAN_GRACE_SECONDS": Knob.ORPHAN_GRACE,
    "PODSWEEPER_OPERATOR_GRACE_SECONDS": Knob.OPERATOR_GRACE,
    "PODSWEEPER_TRAINJOB_TTL_SECONDS": Knob.TRAINJOB_TTL,
}
_GRACE_FIELD = {Knob.ORPHAN_GRACE: "orphan_grace_seconds", Knob.OPERATOR_GRACE: "operator_grace_seconds"}
_MAX_DIGITS = 9  # a grace annotation longer than this is refused before it is parsed
_ON_OFF = {"on": True, "off": False}


@dataclass(frozen=True)
class NamespacePolicy:
    """The settings in force in one namespace, where each came from, and what was wrong."""

    namespace: str
    mode: Mode
    crashloop_action: CrashLoopAction
    orphan_grace_seconds: int
    operator_grace_seconds: int
    from_namespace: frozenset[Knob] = frozenset()  # the knobs its annotations set
    problems: tuple[str, ...] = ()  # one line each: the annotation, its value, why refused
    # Whether container text (log lines, termination messages) may be kept in its evidence.
    evidence_logs: bool = True
    trainjob_ttl_seconds: int = 0  # rule expired-trainjob's retention here; 0: off

    @property
    def dry_run(self) -> bool:
        """Nothing is deleted or suspended here (off counts too: nothing is done at all)."""
        return self.mode is not Mode.LIVE

    def value(self, knob: Knob) -> str:
        values = {
            Knob.MODE: self.mode.value,
            Knob.CRASHLOOP_ACTION: self.crashloop_action.value,
            Knob.ORPHAN_GRACE: str(self.orphan_grace_seconds),
            Knob.OPERATOR_GRACE: str(self.operator_grace_seconds),
            Knob.EVIDENCE_LOGS: "on" if self.evidence_logs else "off",
            Knob.TRAINJOB_TTL: str(self.trainjob_ttl_seconds) if self.trainjob_ttl_seconds else "off",
        }
        return values[knob]

    def applied(self, knobs: Iterable[Knob] = ()) -> dict[str, dict[str, str]]:
        """The mode and `knobs` as in force, each with where it came from (log lines, CloudEvents)."""
        return {
            knob.value: {"value": self.value(knob), "from": self._source(knob)}
            for knob in dict.fromkeys((Knob.MODE, *knobs))
        }

    def describe(self, knobs: Iterable[Knob] = ()) -> str:
        """The same, in words for an Event's message."""
        return ", ".join(
            f"{knob.value} {self.value(knob)} ({self._source(knob)})"
            for knob in dict.fromkeys((Knob.MODE, *knobs))
        )

    def _source(self, knob: Knob) -> str:
        return f"namespace annotation {knob.annotation}" if knob in self.from_namespace else "global"


def global_mode(settings: Settings) -> Mode:
    return Mode.DRY_RUN if settings.dry_run else Mode.LIVE


def global_logs(settings: Settings, namespace: str) -> bool:
    """Whether the global settings let container text be kept in this namespace's evidence."""
    return settings.evidence_log_lines > 0 and namespace not in settings.evidence_logs_excluded


def global_policy(settings: Settings, namespace: str) -> NamespacePolicy:
    """The policy of a namespace that sets nothing: the global settings."""
    return NamespacePolicy(
        namespace,
        global_mode(settings),
        settings.crashloop_action,
        settings.orphan_grace_seconds,
        settings.operator_grace_seconds,
        evidence_logs=global_logs(settings, namespace),
        trainjob_ttl_seconds=settings.trainjob_ttl_seconds,
    )


def knobs_of(variables: Iterable[str]) -> tuple[Knob, ...]:
    """The knobs among a rule's PODSWEEPER_* variables (RuleSpec.settings)."""
    return tuple(KNOB_OF_VARIABLE[v] for v in variables if v in KNOB_OF_VARIABLE)


def resolve(settings: Settings, namespace: str, annotations: Mapping[str, str]) -> NamespacePolicy:
    """The policy in force in `namespace`, from the global settings and its annotations."""
    policy = global_policy(settings, namespace)
    if not settings.namespace_policy:
        return policy
    chosen: dict[Knob, object] = {}
    problems: list[str] = []
    for key in sorted(annotations):
        if not key.startswith(PREFIX) or key in NOT_POLICY:
            continue
        raw = annotations[key]
        try:
            knob = Knob(key.removeprefix(PREFIX))
        except ValueError:
            problems.append(f"{key}: not an annotation podsweeper reads on a Namespace (ignored)")
            continue
        value, refused = _judge(settings, knob, raw.strip(), namespace)
        if refused is None:
            chosen[knob] = value
        else:
            used = policy.value(knob)
            problems.append(f"{key}: {raw[:64]!r} {refused}; the global {knob.value} {used} is used")
    return NamespacePolicy(
        namespace,
        _as(chosen.get(Knob.MODE), Mode, policy.mode),
        _as(chosen.get(Knob.CRASHLOOP_ACTION), CrashLoopAction, policy.crashloop_action),
        _as(chosen.get(Knob.ORPHAN_GRACE), int, policy.orphan_grace_seconds),
        _as(chosen.get(Knob.OPERATOR_GRACE), int, policy.operator_grace_seconds),
        frozenset(chosen),
        tuple(problems),
        _as(chosen.get(Knob.EVIDENCE_LOGS), bool, policy.evidence_logs),
        _as(chosen.get(Knob.TRAINJOB_TTL), int, policy.trainjob_ttl_seconds),
    )


def _as(value: object, kind: type[T], default: T) -> T:
    return value if isinstance(value, kind) else default


def _judge(settings: Settings, knob: Knob, raw: str, namespace: str) -> tuple[object, str | None]:
    """The value an annotation asks for, or why it is refused."""
    if knob is Knob.EVIDENCE_LOGS:
        if raw not in _ON_OFF:
            return None, "is not on or off"
        if _ON_OFF[raw] and not global_logs(settings, namespace):
            return (
                None,
                "is not allowed: the global settings keep no log text here "
                "(PODSWEEPER_EVIDENCE_LOG_LINES, PODSWEEPER_EVIDENCE_LOGS_EXCLUDE_NAMESPACES)",
            )
        return _ON_OFF[raw], None
    if knob is Knob.TRAINJOB_TTL:
        return _ttl(settings, raw)
    if knob is Knob.MODE:
        try:
            mode = Mode(raw)
        except ValueError:
            return None, "is not a mode (off, dry-run or live)"
        if mode is Mode.LIVE and settings.dry_run and not settings.namespace_live_allowed:
            return (
                None,
                "is not allowed: the global setting is dry-run (PODSWEEPER_NAMESPACE_LIVE_ALLOWED is false)",
            )
        return mode, None
    if knob is Knob.CRASHLOOP_ACTION:
        try:
            action = CrashLoopAction(raw)
        except ValueError:
            return None, "is not a crash-loop action (warn, suspend or delete)"
        allowed = {CrashLoopAction.WARN, settings.crashloop_action} | settings.namespace_crashloop_action_set
        if action not in allowed:
            return None, "is not allowed here (PODSWEEPER_NAMESPACE_CRASHLOOP_ACTIONS does not name it)"
        return action, None
    if not raw.isascii() or not raw.isdigit() or len(raw) > _MAX_DIGITS:
        return None, "is not a whole number of seconds"
    seconds, ceiling = int(raw), settings.namespace_max_grace_seconds
    floor = getattr(settings, _GRACE_FIELD[knob])
    if settings.namespace_min_grace_seconds is not None:
        floor = min(floor, settings.namespace_min_grace_seconds)
    if seconds > ceiling:
        return None, f"is longer than PODSWEEPER_NAMESPACE_MAX_GRACE_SECONDS ({ceiling})"
    if seconds < floor:
        return None, f"is shorter than a namespace may set ({floor}: PODSWEEPER_NAMESPACE_MIN_GRACE_SECONDS)"
    return seconds, None


def _ttl(settings: Settings, raw: str) -> tuple[object, str | None]:
    """A namespace's TrainJob retention: `off` always (keeping is the safe side); seconds only
    where the platform turned the rule on, and not below its floor (a namespace cannot make
    finished jobs vanish before anyone looked)."""
    if raw == "off":
        return 0, None
    if not raw.isascii() or not raw.isdigit() or len(raw) > _MAX_DIGITS:
        return None, "is not off or a whole number of seconds"
    if settings.trainjob_ttl_seconds <= 0:
        return (
            None,
            "is not allowed: the platform has not turned the TTL on (PODSWEEPER_TRAINJOB_TTL_SECONDS)",
        )
    seconds, floor = int(raw), settings.trainjob_ttl_min_seconds
    if seconds < max(floor, 1):
        return None, f"is shorter than a namespace may set ({floor}: PODSWEEPER_TRAINJOB_TTL_MIN_SECONDS)"
    return seconds, None


def effective(settings: Settings, policy: NamespacePolicy) -> Settings:
    """The global settings with the namespace's policy applied: what its passes decide with
    (the rules read their graces and the crash-loop action from it, the acting side dry-run)."""
    if not policy.from_namespace:
        return settings
    return settings.model_copy(
        update={
            "dry_run": policy.dry_run,
            "crashloop_action": policy.crashloop_action,
            "orphan_grace_seconds": policy.orphan_grace_seconds,
            "operator_grace_seconds": policy.operator_grace_seconds,
            "trainjob_ttl_seconds": policy.trainjob_ttl_seconds,
        }
    )
