"""GPU time counted: what each deleted pod held since it stopped being needed, and what the
rules name right now (the leftover gauge, meaningful in dry-run)."""

from __future__ import annotations

import json
import time

import pytest
from prometheus_client import REGISTRY

from podsweeper.cluster.simulated import SimulatedCluster
from podsweeper.config import Settings
from podsweeper.intake import parse_event
from podsweeper.model import Verb
from podsweeper.pipeline import Pipeline
from podsweeper.sweep import SweepEnd
from tests.fixtures import trainer as v2
from tests.fixtures.builders import at, event, job, ping, pod, split
from tests.fixtures.clusters import SlowPages
from tests.fixtures.parse import parse_intermediate, parse_job, parse_pod

SUCCEEDED = [("Created", at(0)), ("Running", at(2)), ("Succeeded", at(30))]


def with_resources(raw, containers=None, init=None):
    raw["spec"]["containers"] = containers or []
    if init is not None:
        raw["spec"]["initContainers"] = init
    return raw


def container(**resources):
    return {"name": "c", "resources": resources}


@pytest.mark.parametrize(
    "name, containers, init, expected",
    [
        (
            "limits and requests equal",
            [container(limits={"nvidia.com/gpu": "8"}, requests={"nvidia.com/gpu": "8"})],
            None,
            8,
        ),
        ("limits only", [container(limits={"nvidia.com/gpu": "2"})], None, 2),
        (
            "summed over containers",
            [container(limits={"nvidia.com/gpu": 1}), container(limits={"nvidia.com/gpu": 3})],
            None,
            4,
        ),
        (
            "an init container asking more wins",
            [container(limits={"nvidia.com/gpu": "1"})],
            [container(limits={"nvidia.com/gpu": "2"})],
            2,
        ),
        ("cpu and memory are not GPUs", [container(limits={"cpu": "4", "memory": "8Gi"})], None, 0),
        ("another vendor's GPU", [container(limits={"amd.com/gpu": "2"})], None, 2),
        ("a non-GPU extended resource", [container(limits={"example.com/fpga": "1"})], None, 0),
        ("no resources at all", [{"name": "c"}], None, 0),
    ],
)
def test_gpus_a_pod_holds(name, containers, init, expected):
    j = job()
    p = parse_pod(with_resources(pod(j, "Worker", 0), containers, init))
    assert p.gpus(Settings().gpu_resource_names) == expected, name


def test_gpu_resource_names_are_configurable():
    j = job()
    p = parse_pod(with_resources(pod(j, "Worker", 0), [container(limits={"example.com/fpga": "1"})]))
    assert p.gpus(Settings(gpu_resources="example.com/fpga").gpu_resource_names) == 1


def sample(name, **labels):
    return REGISTRY.get_sample_value(name, labels) or 0.0


def seed_cluster(namespace):
    j = job(namespace=namespace, conditions=SUCCEEDED)  # 1 master + 3 workers, 1 GPU each
    cluster = SimulatedCluster()
    cluster.observe("add", parse_job(j))
    cluster.observe("add", parse_pod(pod(j, "Master", 0, phase="Succeeded")))
    for i in range(3):
        cluster.observe("add", parse_pod(pod(j, "Worker", i, phase="Running")))
    return j, cluster


def test_reclaimed_gpu_seconds_count_from_the_job_finishing_to_the_delete():
    j, cluster = seed_cluster("gpu-live")
    labels = {"namespace": "gpu-live", "rule": "finished-job-active-pod"}
    before = sample("podsweeper_reclaimed_gpu_seconds_total", **labels)
    outcome = Pipeline(cluster, Settings(dry_run=False)).handle(
        parse_event(*split(event("update", j, at(40)))), at(130)
    )
    assert len(outcome.applied) == 3
    # 3 workers x 1 GPU x (130 s - finished at 30 s)
    assert sample("podsweeper_reclaimed_gpu_seconds_total", **labels) - before == pytest.approx(300)
    (cleaned,) = cluster.events.values()
    assert "3 GPU(s) freed, 300 GPU-seconds" in cleaned.record.message


def test_dry_run_reclaims_nothing_and_the_sweep_shows_the_leftover_gpus():
    j, cluster = seed_cluster("gpu-dry")
    labels = {"namespace": "gpu-dry", "rule": "finished-job-active-pod"}
    before = sample("podsweeper_reclaimed_gpu_seconds_total", **labels)
    pipeline = Pipeline(cluster, Settings(dry_run=True))
    pipeline.handle(parse_event(*split(ping(at(600)))), at(600))
    assert sample("podsweeper_leftover_gpus", **labels) == 3
    assert sample("podsweeper_reclaimed_gpu_seconds_total", **labels) == before
    # The same sweep, live: the pods go, and so does the leftover.
    Pipeline(cluster, Settings(dry_run=False)).handle(parse_event(*split(ping(at(601)))), at(601))
    assert sample("podsweeper_leftover_gpus", **labels) == 0
    assert sample("podsweeper_reclaimed_gpu_seconds_total", **labels) - before == pytest.approx(3 * 571)


def test_the_decision_line_carries_the_gpus_and_gpu_seconds():
    import io
    import logging

    from podsweeper.report import decision_log

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    decision_log.addHandler(handler)
    decision_log.setLevel(logging.INFO)
    try:
        j, cluster = seed_cluster("gpu-log")
        Pipeline(cluster, Settings(dry_run=False)).handle(
            parse_event(*split(event("update", j, at(40)))), at(90)
        )
    finally:
        decision_log.removeHandler(handler)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(line["gpus"], line["gpu_seconds"]) for line in lines] == [(1, 60.0)] * 3


def test_a_sweep_in_rounds_replaces_the_leftover_gauge_when_its_round_ends():
    """On a big cluster a round of the sweep takes several ticks: the gauge shows the whole
    round's count when it ends, never one tick's share of it."""
    j, seeded = seed_cluster("gpu-rounds")
    cluster = SlowPages(pods=seeded.pods, jobs=seeded.jobs)
    cluster.page_size, cluster.delay = 1, 0.3  # the master, then one worker a page
    labels = {"namespace": "gpu-rounds", "rule": "finished-job-active-pod"}
    pipeline = Pipeline(cluster, Settings(dry_run=True))
    ends, gauge = [], []
    for tick in range(5):
        deadline = time.monotonic() + 2.0  # LIST_SHARE of 2 s: two pages a tick
        outcome = pipeline.handle(parse_event(*split(ping(at(600 + tick)))), at(600 + tick), deadline)
        ends.append(outcome.sweep)
        gauge.append(sample("podsweeper_leftover_gpus", **labels))
        if outcome.sweep is SweepEnd.DONE:
            break
    assert ends[0] is SweepEnd.LISTING and ends[-1] is SweepEnd.DONE, ends
    assert gauge[:-1] == [0] * (len(gauge) - 1) and gauge[-1] == 3


def test_the_leftover_gauge_counts_trainer_v2_lineages():
    """A chain's pods are decided at their TrainJob/JobSet: the sweep counts what those hold."""
    tj = v2.trainjob(ns="gpu-v2", conditions=[("Complete", at(50))])
    restarted = v2.jobset(tj, ns="gpu-v2", created=at(120))  # made after the finish: training again
    job = v2.batch_job(restarted)
    cluster = SimulatedCluster()
    cluster.observe(Verb.ADD, parse_job(tj))
    for obj in (restarted, job):
        cluster.observe(Verb.ADD, parse_intermediate(obj))
    for i in range(2):  # 1 GPU each, running
        cluster.observe(Verb.ADD, parse_pod(v2.pod(job, i)))
    labels = {"namespace": "gpu-v2", "rule": "finished-trainjob-restarted"}
    Pipeline(cluster, Settings(dry_run=True)).handle(parse_event(*split(ping(at(600)))), at(600))
    assert sample("podsweeper_leftover_gpus", **labels) == 2
    # Live, the TrainJob is suspended (Trainer then removes the pods): nothing is left over.
    Pipeline(cluster, Settings(dry_run=False)).handle(parse_event(*split(ping(at(601)))), at(601))
    assert cluster.jobs[("TrainJob", "gpu-v2", "tj")].suspended
    assert sample("podsweeper_leftover_gpus", **labels) == 0
