"""What a rule is: one entry (RuleSpec) with its pure checks, and what a check returns.

A rule looks at one shape of object through one or more extension points (a pod of a job, a
job, a chain, a pod stuck terminating); each point is a pure function, `now` passed in. It
returns a Finding: the action it wants and why. It never applies opt-out, namespaces or the
suspend-or-warn choice: the door (podsweeper.rules.door) does that, once, for every rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING

from podsweeper.config import Settings
from podsweeper.decisions import Action, Rule
from podsweeper.model import Intermediate, Job, Node, Pod

if TYPE_CHECKING:
    from podsweeper.lineage import Lineage


class Looks(StrEnum):
    """What a rule looks at: which pass calls it."""

    POD = "a pod of a job"  # the v1 pass, per pod; the first rule that names a pod decides
    JOB = "a job"  # the v1 pass, on the job read fresh
    CHAIN = "a chain"  # a chained job's pass (TrainJob -> JobSet -> batch Job -> Pod)
    STUCK = "a terminating pod (sweep only)"  # the sweep, per pod stuck terminating


@dataclass(frozen=True)
class Context:
    now: datetime
    settings: Settings


@dataclass(frozen=True)
class Finding:
    """What a check found about one object: the action it wants and why.

    `pods`: the pods whose evidence and (while active) GPUs the decision carries, for a
    decision about a job or a JobSet/batch Job; a decision about a pod carries that pod's.
    """

    about: Pod | Job | Intermediate
    action: Action
    reason: str
    pods: tuple[Pod, ...] = ()
    wasted_since: datetime | None = None  # since when the GPUs are held for nothing
    detail: str = ""  # a short fact the PodsCleanedUp Event shows beside the object


PodCheck = Callable[[Pod, Job | None, Context], Finding | None]
JobCheck = Callable[[Job, Context], Finding | None]
ChainCheck = Callable[["Lineage", Context], list[Finding]]
StuckCheck = Callable[[Pod, Node | None, Job | None, Context], Finding | None]


@dataclass(frozen=True)
class Listed:
    """One object as the sweep listed it, with what the listing knows of its job: what a rule's
    `nominates` hook reads to say its pass should run. Never a decision: the pass reads the job
    and its objects again before anything is decided.

    A pod (`pod`, with its job from the listed index, None if not listed), or a chain's JobSet
    or batch Job (`link`; `job`: the job named like a JobSet, as listed; `owned`: the link is
    controlled, by uid, by its listed parent: the job for a JobSet, the JobSet for a batch Job).
    """

    job: Job | None = None
    pod: Pod | None = None
    link: Intermediate | None = None
    owned: bool = False

    @property
    def jobset(self) -> Intermediate | None:
        """The link, when it is its chain's first (a TrainJob's JobSet) and its job's."""
        link, job = self.link, self.job
        if link is None or job is None or not self.owned or job.kind.chain is None:
            return None
        return link if link.link == job.kind.chain.links[0] else None


# Whether what the sweep listed calls for the rule's pass (Looks.STUCK: the stuck pass of the
# pod; any other: its job's pass).
Nominates = Callable[[Listed, Context], bool]


@dataclass(frozen=True)
class RuleSpec:
    """One rule, everything about it in one place: the registry's entry.

    `settings`: the PODSWEEPER_* variables it reads; `wasted`: what "wasted since" means for
    its GPU-seconds; `new_jobs_only`: decided only on a new job's (or new JobSet's) pass.
    """

    rule: Rule
    when: str  # when it acts, and
    does: str  # what it does: the README's table and docs/rules.md use these words
    actions: frozenset[Action]
    wasted: str
    settings: tuple[str, ...] = ()
    warning_reason: str | None = None  # the Event reason of its warning (a blocked suspend's too)
    suspend_reason: str | None = None  # the Event reason when it suspends a job
    # The Event reason written on a job before the rule deletes the job itself: a rule that
    # deletes a training job (not its pods, a JobSet or a Job) names it, and only such a rule.
    job_delete_reason: str | None = None
    new_jobs_only: bool = False
    opt_in: bool = False
    for_kinds: str = ""  # which jobs, when not every kind (e.g. "Trainer v2")
    on_pod: PodCheck | None = None
    on_job: JobCheck | None = None
    on_chain: ChainCheck | None = None
    on_stuck: StuckCheck | None = None
    # What the sweep nominates for this rule from listed state, beside the pod checks (which
    # nominate a v1 job's pass by themselves): a rule that needs no sweep has none.
    nominates: Nominates | None = None

    def __post_init__(self) -> None:
        warns = bool(self.actions & {Action.WARN, Action.SUSPEND})  # a blocked suspend warns
        if warns != (self.warning_reason is not None):
            raise ValueError(f"{self.rule}: a rule that warns names its Event reason, and only then")
        if (Action.SUSPEND in self.actions) != (self.suspend_reason is not None):
            raise ValueError(f"{self.rule}: a rule that suspends names its Event reason, and only then")
        if self.job_delete_reason is not None and Action.DELETE not in self.actions:
            raise ValueError(f"{self.rule}: a rule that deletes its job deletes")
        if not self.looks_at:
            raise ValueError(f"{self.rule}: a rule looks at something")

    @property
    def looks_at(self) -> tuple[Looks, ...]:
        points = (
            (Looks.POD, self.on_pod),
            (Looks.JOB, self.on_job),
            (Looks.CHAIN, self.on_chain),
            (Looks.STUCK, self.on_stuck),
        )
        return tuple(looks for looks, check in points if check is not None)

    @property
    def title(self) -> str:
        """Its name as the tables show it, with the opt-in and the kinds it is for."""
        notes = ", ".join(n for n in ("opt-in" if self.opt_in else "", self.for_kinds) if n)
        return f"`{self.rule.value}`" + (f" ({notes})" if notes else "")
