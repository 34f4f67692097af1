"""Big jobs and big clusters: concurrent deletes (bounded), the client-side rate limit, and a
sweep that streams pods and resumes where it stopped."""

from __future__ import annotations

import dataclasses
import gc
import threading
import time
import weakref

import pytest

from podsweeper.actor import Actor, Ledger
from podsweeper.cluster.base import PodPage
from podsweeper.cluster.ratelimit import RateLimiter
from podsweeper.cluster.simulated import SimulatedCluster
from podsweeper.config import Settings
from podsweeper.decisions import Result
from podsweeper.errors import ApiUnavailable
from podsweeper.intake import parse_event
from podsweeper.namespaces import NamespacePolicies
from podsweeper.passes import Passes
from podsweeper.pipeline import Pipeline
from podsweeper.sweep import WORK_SHARE, SweepEnd, Sweeper, SweepRun
from tests.fixtures.builders import at, event, job, ping, pod, split
from tests.fixtures.clusters import SlowPages
from tests.fixtures.parse import parse_job, parse_pod

SUCCEEDED = [("Created", at(0)), ("Running", at(2)), ("Succeeded", at(30))]


NOW = at(600)


def handle(pipeline, raw_event, now=NOW):
    return pipeline.handle(parse_event(*split(raw_event)), now)


class SlowDeletes(SimulatedCluster):
    """Deletes take a while and count how many are in flight at once. Each waits (up to half
    a second) for `crowd` deletes to be in flight together, so a loaded machine's slow thread
    starts cannot hide a bound that is used."""

    crowd = 1

    def __post_init__(self):
        super().__post_init__()
        self.lock = threading.Condition()
        self.in_flight = self.most_in_flight = 0

    def delete_pod(self, *args, **kwargs):
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self.lock.notify_all()
            self.lock.wait_for(lambda: self.in_flight >= self.crowd, timeout=0.5)
        time.sleep(0.005)
        with self.lock:
            self.in_flight -= 1
            return super().delete_pod(*args, **kwargs)


def finished_job_with_workers(cluster, workers):
    j = job(conditions=SUCCEEDED, replicas={"Worker": workers})
    cluster.observe("add", parse_job(j))
    for i in range(workers):
        cluster.observe("add", parse_pod(pod(j, "Worker", i, phase="Running")))
    return j


@pytest.mark.parametrize("concurrency", [1, 4, 16])
def test_deletes_of_one_pass_run_concurrently_up_to_the_bound(concurrency):
    cluster = SlowDeletes()
    cluster.crowd = concurrency
    j = finished_job_with_workers(cluster, 24)
    pipeline = Pipeline(cluster, Settings(dry_run=False, delete_concurrency=concurrency))
    outcome = handle(pipeline, event("update", j, at(40)))
    assert [a.result for a in outcome.applied] == [Result.DELETED] * 24
    assert cluster.most_in_flight == concurrency  # never more, and the bound is used
    assert [a.decision.name for a in outcome.applied] == sorted(
        (a.decision.name for a in outcome.applied), key=lambda n: int(n.rsplit("-", 1)[1])
    )  # reported in the decisions' order, whatever order the deletes finished in
    assert len(cluster.events) == 1  # one PodsCleanedUp for the job


def test_the_replay_deletes_one_after_another():
    cluster = SlowDeletes()
    j = finished_job_with_workers(cluster, 6)
    handle(Pipeline(cluster, Settings(dry_run=False), concurrent_deletes=False), event("update", j, at(40)))
    assert cluster.most_in_flight == 1 and not cluster.pods


def test_an_api_failure_mid_pass_still_reports_the_deletes_made():
    class FailsAfterThree(SimulatedCluster):
        calls = 0

        def delete_pod(self, *args, **kwargs):
            FailsAfterThree.calls += 1
            if FailsAfterThree.calls > 3:
                raise ApiUnavailable("time bound for this event exceeded")
            return super().delete_pod(*args, **kwargs)

    cluster = FailsAfterThree()
    j = finished_job_with_workers(cluster, 8)
    reported = []
    pipeline = Pipeline(cluster, Settings(dry_run=False, delete_concurrency=4))
    with pytest.raises(ApiUnavailable):
        pipeline.handle(parse_event(*split(event("update", j, at(40)))), at(600))
    reported = [e.record.message for e in cluster.events.values()]
    assert len(cluster.pods) == 5 and reported and "deleted 3 pod(s)" in reported[0]


class FakeClock:
    def __init__(self):
        self.now = 100.0
        self.slept: list[float] = []

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def test_rate_limiter_allows_the_burst_then_the_sustained_rate():
    clock = FakeClock()
    limiter = RateLimiter(qps=2, burst=3, clock=lambda: clock.now, sleep=clock.sleep)
    waits = [limiter.acquire() for _ in range(5)]
    assert waits[:3] == [0, 0, 0] and waits[3] == pytest.approx(0.5) and waits[4] == pytest.approx(0.5)
    clock.now += 10  # idle: the bucket refills, but never beyond the burst
    assert [limiter.acquire() for _ in range(3)] == [0, 0, 0] and limiter.acquire() > 0


def test_rate_limiter_refuses_a_wait_past_the_deadline():
    clock = FakeClock()
    limiter = RateLimiter(qps=1, burst=1, clock=lambda: clock.now, sleep=clock.sleep)
    limiter.acquire(deadline=clock.now + 5)
    with pytest.raises(ApiUnavailable, match="rate limit"):
        limiter.acquire(deadline=clock.now + 0.5)
    assert limiter.acquire(deadline=clock.now + 5) == pytest.approx(1.0)  # the refusal took no token


def test_rate_limiter_is_shared_by_concurrent_callers():
    limiter = RateLimiter(qps=200, burst=10)
    started = time.monotonic()
    threads = [threading.Thread(target=lambda: [limiter.acquire() for _ in range(15)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # 60 requests, 10 at once, then 200/s: at least 50 / 200 = 0.25 s
    assert time.monotonic() - started >= 0.24


class PagedPods(SimulatedCluster):
    """Hands out fresh copies of its pods page by page, and at each new page counts how many
    copies handed out earlier are still alive: what the sweep kept of the pages it decided."""

    def __post_init__(self):
        super().__post_init__()
        self.page_size = 50
        self.most_kept = 0

    def training_pod_pages(self, namespace, chained=False, resume=None):
        handed: list[weakref.ref] = []
        for page in super().training_pod_pages(namespace, chained, resume):
            gc.collect()
            self.most_kept = max(self.most_kept, sum(1 for r in handed if r() is not None))
            copies = [dataclasses.replace(held) for held in page.pods]
            handed += [weakref.ref(copy) for copy in copies]
            yield PodPage(copies, page.resume)
            del copies, page


def test_the_sweep_streams_pods_and_keeps_none_of_a_page_it_has_decided():
    cluster = PagedPods()
    for n in range(20):  # 20 running jobs of 10 pods: 200 pods in 4 pages, nothing to do
        j = job(name=f"run-{n}", conditions=[("Created", at(0)), ("Running", at(2))], replicas={"Worker": 10})
        cluster.observe("add", parse_job(j))
        for i in range(10):
            cluster.observe("add", parse_pod(pod(j, "Worker", i, phase="Running")))
    outcome = handle(Pipeline(cluster, Settings(dry_run=False)), ping(at(600)))
    assert outcome.applied == [] and "swept 0 job(s)" in outcome.note
    # At a page turn, only the page just decided is still alive (the sweep's loop variable):
    # 4 pages listed, never more than one held.
    assert cluster.most_kept <= cluster.page_size


def test_a_stopped_sweep_resumes_after_the_last_job_it_passed():
    cluster = SimulatedCluster()
    names = []
    for n in range(3):
        j = job(name=f"done-{n}", conditions=SUCCEEDED, replicas={"Worker": 1})
        cluster.observe("add", parse_job(j))
        cluster.observe("add", parse_pod(pod(j, "Worker", 0, phase="Running")))
        names.append(f"done-{n}-worker-0")
    pipeline = Pipeline(cluster, Settings(dry_run=False, max_deletes_per_event=1))
    order = []
    for tick in range(3):
        outcome = handle(pipeline, ping(at(600 + tick)))
        order += [a.decision.name for a in outcome.applied]
        if tick < 2:
            assert outcome.sweep is SweepEnd.DELETE_CAP
            assert "the next sweep passes the jobs left first" in outcome.note
    assert order == names and not cluster.pods


def test_a_sweep_deletes_no_more_than_its_cap_even_within_one_big_job():
    """A sweep has no declared size: PODSWEEPER_MAX_DELETES_PER_EVENT bounds all of it, the
    pass of a job that declares more included; the rest is deferred to the next sweep."""
    cluster = SimulatedCluster()
    finished_job_with_workers(cluster, 5)
    pipeline = Pipeline(cluster, Settings(dry_run=False, max_deletes_per_event=2, delete_concurrency=1))
    outcome = handle(pipeline, ping(at(600)))
    results = [a.result for a in outcome.applied]
    assert results.count(Result.DELETED) == 2 and results.count(Result.DEFERRED) == 3, results
    assert len(cluster.pods) == 3
    handle(pipeline, ping(at(601)))
    handle(pipeline, ping(at(602)))
    assert not cluster.pods


class DeletesAnswerGoneOrConflict(SimulatedCluster):
    """Every pod DELETE is sent and answers 404 or 409 in turn (another replica raced us, the
    pod changed): nothing is deleted, so every pass decides the same pods again. `sent` counts
    the requests."""

    def __post_init__(self):
        super().__post_init__()
        self.lock = threading.Lock()
        self.sent = 0

    def delete_pod(self, namespace, name, uid, resource_version="", force=False):
        with self.lock:
            self.sent += 1
            return Result.GONE if self.sent % 2 else Result.CONFLICT


@pytest.mark.parametrize("concurrency", [1, 16])
def test_every_delete_sent_counts_toward_the_bound_whatever_it_answers(concurrency):
    """docs/rules.md: every DELETE counts toward a bound, whatever it answers. 12 finished jobs
    of 3 running workers and 12 gone jobs' 3 orphans each, every DELETE answering 404 or 409:
    no sweep and no job event sends more than PODSWEEPER_MAX_DELETES_PER_EVENT (counting only
    the deletes that deleted, a sweep sent all 72)."""
    cluster = DeletesAnswerGoneOrConflict()
    gone = []
    for n in range(12):
        finished_job_with_workers_named(cluster, f"done-{n:02d}", 3)
        orphaned = job(name=f"gone-{n:02d}", conditions=[("Created", at(0)), ("Running", at(2))])
        cluster.observe("add", parse_job(orphaned))
        for i in range(3):
            cluster.observe("add", parse_pod(pod(orphaned, "Worker", i, phase="Running")))
        cluster.observe("delete", parse_job(orphaned))
        gone.append(orphaned)
    cap = 5
    pipeline = Pipeline(
        cluster, Settings(dry_run=False, max_deletes_per_event=cap, delete_concurrency=concurrency)
    )
    for tick in range(4):  # the sweeps go on with the jobs left: each is bounded alone
        cluster.sent = 0
        outcome = handle(pipeline, ping(at(600 + tick)))
        results = [a.result for a in outcome.applied if a.result is not None]
        assert cluster.sent == cap, (tick, cluster.sent)  # the bound is used, never passed
        assert results.count(Result.GONE) + results.count(Result.CONFLICT) == cap, results
        assert outcome.sweep is SweepEnd.DELETE_CAP, outcome.note
    # A job's delete event: its orphans have no declared size, the fixed cap bounds the pass.
    small = Pipeline(
        cluster, Settings(dry_run=False, max_deletes_per_event=2, delete_concurrency=concurrency)
    )
    cluster.sent = 0
    outcome = handle(small, event("delete", gone[0], at(701)))
    assert cluster.sent == 2 and outcome.deferred == 1


def finished_job_with_workers_named(cluster, name, workers):
    j = job(name=name, conditions=SUCCEEDED, replicas={"Worker": workers})
    cluster.observe("add", parse_job(j))
    for i in range(workers):
        cluster.observe("add", parse_pod(pod(j, "Worker", i, phase="Running")))
    return j


def big_cluster_with_leftovers(cluster, jobs=40, finished=(5, 15, 25, 35)):
    """40 jobs of 5 workers (40 pages of 5 pods); the finished ones' workers still run."""
    for n in range(jobs):
        conditions = SUCCEEDED if n in finished else [("Created", at(0)), ("Running", at(2))]
        j = job(name=f"job-{n:02d}", conditions=conditions, replicas={"Worker": 5})
        cluster.observe("add", parse_job(j))
        for i in range(5):
            cluster.observe("add", parse_pod(pod(j, "Worker", i, phase="Running")))
    return {f"job-{n:02d}-worker-{i}" for n in finished for i in range(5)}


def test_a_big_sweep_lists_in_rounds_within_its_share_of_the_time_bound():
    """A listing longer than LIST_SHARE of the time bound stops after the page that ends that
    share, the passes run on what it nominated, and the next sweep lists on from there: every
    named pod goes within one round, nothing else is deleted, and each page is listed once."""
    cluster = SlowPages()
    named = big_cluster_with_leftovers(cluster)
    pipeline = Pipeline(cluster, Settings(dry_run=False))
    ends, notes, deleted = [], [], set()
    for tick in range(10):
        deadline = time.monotonic() + 2.0  # LIST_SHARE of 2 s: ~25 of the 40 pages' 0.8 s
        outcome = pipeline.handle(parse_event(*split(ping(at(600 + tick)))), at(600 + tick), deadline)
        ends.append(outcome.sweep)
        notes.append(outcome.note)
        deleted |= {a.decision.name for a in outcome.applied if a.result is Result.DELETED}
        if outcome.sweep is SweepEnd.DONE:
            break
    assert ends[0] is SweepEnd.LISTING and ends[-1] is SweepEnd.DONE, ends
    assert "the next sweep lists on" in notes[0] and "listed 0 training pod(s)" not in notes[0]
    assert deleted == named
    assert cluster.pages_listed == 40  # one round: each page once


class SweepClock:
    """The sweep's clock, moved on by the test: a pass or a page costs what the test says."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def timed_sweeper(settings, clock, pass_seconds, passed):
    """A Sweeper whose every pass takes `pass_seconds` on `clock`, recording the jobs passed."""

    class Timed(Passes):
        def run(self, work, cluster, now):
            passed.append(work.ref.name)
            clock.now += pass_seconds
            return super().run(work, cluster, now)

    return sweeper_of(settings, Timed(settings, NamespacePolicies(settings)), clock)


def sweeper_of(settings, passes, clock):
    """A Sweeper whose actor acts as the settings say (these tests' settings: dry-run)."""
    return Sweeper(settings, passes, Actor(settings, passes.policies), clock=clock)


def test_a_sweep_passes_within_its_work_share_and_the_next_goes_on_with_those_left():
    """A sweep starts no pass that, as long as its longest so far, would end past WORK_SHARE of
    its time bound, and says so; the next sweep passes the jobs left first: each named job is
    passed within two ticks, in order."""
    cluster = SimulatedCluster()
    big_cluster_with_leftovers(cluster)
    settings = Settings(dry_run=True)
    clock, passed = SweepClock(), []
    # Passes of 1.2 s in a share of 2.5 s: a third would end past it, so two a sweep.
    sweeper = timed_sweeper(settings, clock, WORK_SHARE * 10 / 2 - 0.05, passed)
    ends = []
    for _ in range(2):
        run = SweepRun()
        report = sweeper.sweep(cluster, NOW, time.monotonic() + 10, Ledger("test"), run)
        ends.append(report.end)
        if report.end is SweepEnd.WORK_SHARE:
            assert "at its share of the time bound after 2 of 4 jobs" in report.note, report.note
    assert ends[0] is SweepEnd.WORK_SHARE
    assert passed[:4] == ["job-05", "job-15", "job-25", "job-35"], passed  # the one left, first


def test_a_listing_that_spends_the_work_share_never_starves_the_jobs_waiting():
    """A sweep whose listing alone spends the work share passes nothing, and the next one then
    passes the first job left whatever its own listing took: on a cluster whose every tick
    lists that long, every other tick passes one job, each in turn."""

    class SlowListing(SimulatedCluster):
        def training_pod_pages(self, namespace, chained=False, resume=None):
            for page in super().training_pod_pages(namespace, chained, resume):
                clock.now += 10  # a whole time bound a page
                yield page

    cluster = SlowListing()
    big_cluster_with_leftovers(cluster)
    settings = Settings(dry_run=True)
    clock, passed = SweepClock(), []
    sweeper = timed_sweeper(settings, clock, 0.0, passed)
    counts = []
    for _ in range(8):
        before = len(passed)
        sweeper.sweep(cluster, NOW, time.monotonic() + 10, Ledger("test"), SweepRun())
        counts.append(len(passed) - before)
    assert counts == [0, 1] * 4, counts
    assert passed == ["job-05", "job-15", "job-25", "job-35"], passed


def test_a_big_index_is_read_across_ticks_and_no_page_is_decided_before_it_is_complete():
    """A kind's jobs are listed within the listing's share too: an index longer than that is
    read on by the next sweep, page by page, each page once a round; the pod page that needed
    it is decided only once it is complete, and the round nominates every finished job."""

    class SlowJobPages(SimulatedCluster):
        job_pages_listed = 0

        def job_pages(self, namespace, kind, resume=None):
            for page in super().job_pages(namespace, kind, resume):
                self.job_pages_listed += 1
                clock.now += 1.0  # two pages fill the listing's share of a 10 s bound
                yield page

    cluster = SlowJobPages()
    cluster.page_size = 5
    named = big_cluster_with_leftovers(cluster)  # 40 jobs: 8 pages of jobs, 40 pages of pods
    settings = Settings(dry_run=True)
    clock, passed = SweepClock(), []
    sweeper = timed_sweeper(settings, clock, 0.0, passed)
    listed, nominated = [], set()
    for _ in range(60):
        run = SweepRun()
        sweeper.sweep(cluster, NOW, time.monotonic() + 10, Ledger("test"), run)
        listed.append(run.listed_pods)
        nominated |= {key[2] for key in run.candidates}
        if run.round_done:
            break
    assert run.round_done
    # Three ticks of two job pages each decide no pod; the fourth reads the last two and then
    # its first pod page (the listing's share is spent after it).
    assert listed[:4] == [0, 0, 0, 5], listed
    assert sum(listed) == 200  # then every pod once
    assert cluster.job_pages_listed == 8
    assert nominated == {name.rsplit("-worker-", 1)[0] for name in named}


def test_an_unbounded_sweep_lists_everything_at_once():
    """The CLI sweep (no time bound) is one round, however long the listing takes."""
    cluster = SlowPages()
    named = big_cluster_with_leftovers(cluster)
    outcome = handle(Pipeline(cluster, Settings(dry_run=False)), ping(at(600)))
    assert outcome.sweep is SweepEnd.DONE and cluster.pages_listed == 40
    assert {a.decision.name for a in outcome.applied if a.result is Result.DELETED} == named


def test_a_failed_listing_goes_on_where_it_started():
    """An API failure in the middle of a listing answers 503; the next sweep lists again from
    where the failed one started, so no page is skipped."""

    class FailsOnce(SlowPages):
        failed = False

        def training_pod_pages(self, namespace, chained=False, resume=None):
            for index, page in enumerate(super().training_pod_pages(namespace, chained, resume)):
                if index == 3 and not self.failed:
                    self.failed = True
                    raise ApiUnavailable("list pods: API answered 503")
                yield page

    cluster = FailsOnce()
    named = big_cluster_with_leftovers(cluster)
    pipeline = Pipeline(cluster, Settings(dry_run=False))
    with pytest.raises(ApiUnavailable):
        handle(pipeline, ping(at(600)))
    outcome = handle(pipeline, ping(at(601)))
    assert outcome.sweep is SweepEnd.DONE
    assert {a.decision.name for a in outcome.applied if a.result is Result.DELETED} == named


def test_rounds_go_through_every_namespace_in_scope_in_turn():
    """With PODSWEEPER_NAMESPACES, a round lists each namespace in turn, its chains after its
    pods; a tick that ends between two namespaces goes on with the next one."""
    cluster = SimulatedCluster()
    cluster.page_size = 1
    named = set()
    for namespace in ("team-a", "team-b", "team-c"):
        j = job(name="done", namespace=namespace, conditions=SUCCEEDED, replicas={"Worker": 2})
        cluster.observe("add", parse_job(j))
        for i in range(2):
            cluster.observe("add", parse_pod(pod(j, "Worker", i, phase="Running")))
        named.add((namespace, "done"))
    settings = Settings(namespaces="team-a,team-b,team-c", dry_run=True)
    ticks = iter(range(0, 10**6, 1000))
    sweeper = sweeper_of(settings, Passes(settings, NamespacePolicies(settings)), lambda: float(next(ticks)))
    seen, rounds = [], 0
    for _ in range(10):
        run = SweepRun()
        sweeper.sweep(cluster, NOW, time.monotonic() + 3600, Ledger("test"), run)
        seen.append(sorted({(key[1], key[2]) for key in run.candidates}))
        if run.round_done:
            rounds += 1
            break
    assert rounds == 1 and len(seen) == 6  # one page (one pod) a tick, 3 namespaces x 2 pods
    assert {nominated for tick in seen for nominated in tick} == named
