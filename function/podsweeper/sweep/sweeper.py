"""The backstop sweep: list what needs action (podsweeper.sweep.listing), then pass it in a fair
order (podsweeper.sweep.queue), each pass's decisions carried out by the actor.

A sweep lists for at most LIST_SHARE of its time bound, then passes what was nominated until
WORK_SHARE of it is spent; what it did not reach is where the next sweep goes on. The pods
seen stuck terminating get their own pass (rule stuck-terminating) after the jobs'.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

from podsweeper.actions import Acted
from podsweeper.actor import Actor, Ledger
from podsweeper.cluster.base import Cluster
from podsweeper.config import Settings
from podsweeper.errors import ApiUnavailable
from podsweeper.namespaces import NamespacePolicies
from podsweeper.passes import Passes, PassResult
from podsweeper.sweep.leftover import LeftoverGauge
from podsweeper.sweep.listing import Listing
from podsweeper.sweep.queue import WorkQueue
from podsweeper.sweep.run import SweepEnd, SweepReport, SweepRun

# The share of a sweep's time bound its listing may take, and the share its listing and passes
# together may take. Listing 50,000 pods takes most of a 10 s bound on a small control plane:
# read in rounds instead. The rest of the bound is headroom: a tick stays short when the API
# server is slow, and a sweep never holds an instance for most of its bound.
LIST_SHARE = 0.15
WORK_SHARE = 0.25


class Sweeper:
    """One per Pipeline: its listing, its queue and its leftover gauge live across sweeps."""

    def __init__(
        self,
        settings: Settings,
        passes: Passes,
        actor: Actor,
        clock: Callable[[], float] = time.monotonic,
        policies: NamespacePolicies | None = None,
    ):
        self.settings = settings
        self.passes = passes
        self.actor = actor
        self.clock = clock  # the listing's and the work's shares are measured on it
        self.listing = Listing(settings, policies or passes.policies, clock)
        self.queue = WorkQueue()
        self.gauge = LeftoverGauge()

    def sweep(
        self, cluster: Cluster, now: datetime, deadline: float | None, ledger: Ledger, run: SweepRun
    ) -> SweepReport:
        """List, pass, then the stuck pass; the caller publishes `run` (publish)."""
        carried, starved = self.queue.take(run.candidates)
        start = self.clock()
        bound = None if deadline is None else max(0.0, deadline - time.monotonic())
        list_until = None if bound is None else start + LIST_SHARE * bound
        work_until = None if bound is None else start + WORK_SHARE * bound
        self.listing.list_on(cluster, now, list_until, run)
        report = self._run_passes(run, (carried, starved), cluster, now, (deadline, work_until), ledger)
        if run.stuck:
            result = self.passes.stuck(sorted(run.stuck), cluster, now, deadline)
            forced = self._act(result, result.bound, cluster, now, ledger, run).deleted
            stuck_note = f"{forced} of {len(run.stuck)} pod(s) stuck terminating force-deleted{result.note}"
            report = SweepReport(report.end, f"{report.note}; {stuck_note}")
        return report

    def publish(self, run: SweepRun, ledger: Ledger) -> None:
        """The leftover gauge: what the sweep saw wasted, less what it reclaimed."""
        self.gauge.publish(run.leftover, ledger.applied, run.round_done)

    def _act(
        self, result: PassResult, budget: int, cluster: Cluster, now: datetime, ledger: Ledger, run: SweepRun
    ) -> Acted:
        """A chain's pods are not decided one by one: its passes' decisions (a restarted
        TrainJob, an orphaned or leftover JobSet/Job) carry the GPUs their active pods hold."""
        run.count([d for d in result.decisions if d.job.kind.chain is not None])
        return self.actor.act(
            result.decisions, budget, cluster=cluster, now=now, ledger=ledger, keep_first=result.keep_first
        )

    def _run_passes(
        self,
        run: SweepRun,
        queue: tuple[list[tuple[str, str, str]], bool],
        cluster: Cluster,
        now: datetime,
        bounds: tuple[float | None, float | None],
        ledger: Ledger,
    ) -> SweepReport:
        """Run the candidates' passes, those an earlier sweep left first (in the order left),
        then the new ones in job order; what this one leaves (time bound, work share, delete
        cap, an API failure) the next one passes first. `queue`: the jobs left, and whether
        the sweep that left them passed none. `bounds`: the time bound (time.monotonic) and
        the end of the work share (self.clock). A pass starts only if one as long as the
        longest so far still ends within the work share, except the first job left by a sweep
        that passed none: a listing that spends the share never starves the jobs waiting."""
        carried, starved = queue
        deadline, work_until = bounds
        candidates = run.candidates
        order = WorkQueue.order(carried, candidates)
        waiting = set(carried)
        left = self.settings.max_deletes_per_event
        done = 0
        longest = 0.0  # the longest pass so far: one is started only if one as long still fits
        try:
            for index, key in enumerate(order):
                if deadline is not None and time.monotonic() > deadline - 1.0:
                    return self._stopped(SweepEnd.TIME_BOUND, f"after {index} of {len(order)} jobs", run)
                if left <= 0:
                    return self._stopped(SweepEnd.DELETE_CAP, f"after {index} of {len(order)} jobs", run)
                owed = starved and index == 0 and key in waiting
                began = self.clock()
                if work_until is not None and not owed and began + longest > work_until:
                    return self._stopped(SweepEnd.WORK_SHARE, f"after {index} of {len(order)} jobs", run)
                try:
                    result = self.passes.run(candidates[key], cluster, now)
                    left -= self._act(result, min(result.bound, left), cluster, now, ledger, run).sent
                    longest = max(longest, self.clock() - began)
                except ApiUnavailable:
                    if deadline is None or time.monotonic() < deadline - 0.1:
                        raise  # the API failed: 503, the source retries
                    # Out of time within a pass: what it did is reported; this job comes first next time.
                    return self._stopped(
                        SweepEnd.TIME_BOUND, f"in the pass of job {index + 1} of {len(order)}", run
                    )
                done = index + 1
        finally:
            self.queue.leave({key: candidates[key] for key in order[done:]}, passed=done)
        listed = f"; listed {run.listed_pods} training pod(s)"
        if not run.round_done:
            return SweepReport(
                SweepEnd.LISTING, f"swept {len(order)} job(s) needing action{listed}, the next sweep lists on"
            )
        return SweepReport(SweepEnd.DONE, f"swept {len(order)} job(s) needing action{listed}")

    @staticmethod
    def _stopped(end: SweepEnd, where: str, run: SweepRun) -> SweepReport:
        at = {
            SweepEnd.TIME_BOUND: "at its time bound",
            SweepEnd.WORK_SHARE: "at its share of the time bound",
        }.get(end, "at PODSWEEPER_MAX_DELETES_PER_EVENT")
        return SweepReport(
            end,
            f"sweep stopped {at} {where}; the next sweep passes the jobs left first; "
            f"listed {run.listed_pods} training pod(s)",
        )
