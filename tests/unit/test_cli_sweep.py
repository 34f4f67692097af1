"""`podsweeper sweep` through the CLI's main(), on a simulated cluster: a dry run unless --live,
and a dry run ends with what a live sweep would do and the command that does it."""

from __future__ import annotations

import pytest

import podsweeper.cluster.kube
from podsweeper.cli import main
from podsweeper.cluster.simulated import SimulatedCluster
from podsweeper.config import load_settings
from podsweeper.model import Namespace
from tests.fixtures.builders import at, job, pod
from tests.fixtures.builders import container_status as cs
from tests.fixtures.parse import parse_job, parse_pod

SUCCEEDED = [("Created", at(0)), ("Running", at(2)), ("Succeeded", at(30))]
RUNNING = [("Created", at(0)), ("Running", at(2))]
NAMESPACES = ["team-a", "team-b", "team-c", "team-d"]
ARGV = ["sweep", "--kubeconfig", "/home/me/.kube/config", *(f"-n{n}" for n in NAMESPACES)]
LIVE_COMMAND = (
    "podsweeper sweep --kubeconfig /home/me/.kube/config -n team-a -n team-b -n team-c -n team-d --live"
)


def world() -> SimulatedCluster:
    """team-a: a finished job's 3 running workers and a crash-looping job's 2 workers (1 GPU
    each); team-b: a gone job's 2 orphans; team-c (mode dry-run) and team-d (mode live): a
    finished job's running worker each."""
    cluster = SimulatedCluster()
    cluster.observe_namespace("add", Namespace("team-c", "c", {"podsweeper.dev/mode": "dry-run"}))
    cluster.observe_namespace("add", Namespace("team-d", "d", {"podsweeper.dev/mode": "live"}))

    def add(raw_job, workers, gone=False, **pod_fields):
        cluster.observe("add", parse_job(raw_job))
        for i in range(workers):
            cluster.observe("add", parse_pod(pod(raw_job, "Worker", i, phase="Running", **pod_fields)))
        if gone:
            cluster.observe("delete", parse_job(raw_job))

    add(job(name="done", namespace="team-a", conditions=SUCCEEDED, replicas={"Worker": 3}), 3)
    looping = [cs(state="waiting", reason="CrashLoopBackOff", restarts=9, last_exit=1)]
    add(
        job(name="loop", namespace="team-a", conditions=RUNNING, replicas={"Worker": 2}),
        2,
        containers=looping,
    )
    add(job(name="gone", namespace="team-b", conditions=RUNNING, replicas={"Worker": 2}), 2, gone=True)
    add(job(name="kept", namespace="team-c", conditions=SUCCEEDED, replicas={"Worker": 1}), 1)
    add(job(name="opted", namespace="team-d", conditions=SUCCEEDED, replicas={"Worker": 1}), 1)
    return cluster


@pytest.fixture
def cluster(monkeypatch):
    """The world, handed to the sweep command instead of a real cluster's client."""
    simulated = world()
    monkeypatch.setattr(
        podsweeper.cluster.kube, "connect", lambda settings, kubeconfig=None, make_record_key=True: simulated
    )
    monkeypatch.setenv("PODSWEEPER_CRASHLOOP_ACTION", "suspend")
    monkeypatch.setenv("PODSWEEPER_NAMESPACE_LIVE_ALLOWED", "true")  # team-d's live mode is allowed
    for name in ("PODSWEEPER_DRY_RUN", "PODSWEEPER_NAMESPACES"):
        monkeypatch.delenv(name, raising=False)
    return simulated


def untouched(cluster: SimulatedCluster) -> bool:
    return len(cluster.pods) == 9 and not any(j.suspended for j in cluster.jobs.values())


def test_the_code_default_is_a_dry_run(monkeypatch):
    """What a locally served function (functions-framework --source function/main.py) and
    every Settings built without PODSWEEPER_DRY_RUN get."""
    monkeypatch.delenv("PODSWEEPER_DRY_RUN", raising=False)
    assert load_settings().dry_run is True
    monkeypatch.setenv("PODSWEEPER_DRY_RUN", "false")
    assert load_settings().dry_run is False


def test_a_sweep_without_live_changes_nothing_and_says_what_a_live_one_would_do(cluster, capsys):
    assert main(ARGV) == 0
    assert untouched(cluster)
    err = capsys.readouterr().err
    summary = err[err.index("dry run: nothing was deleted or suspended") :].splitlines()
    assert summary == [
        "dry run: nothing was deleted or suspended. A live sweep would:",
        "  delete   finished-job-active-pod  team-a  3 Pods        3 GPUs",
        "  delete   finished-job-active-pod  team-d  1 Pod         1 GPU",
        "  delete   orphan                   team-b  2 Pods        2 GPUs",
        "  suspend  crash-loop               team-a  1 PyTorchJob  2 GPUs",
        "GPUs it would free: 8",
        "Held back even live (the namespace's podsweeper.dev/mode is dry-run):",
        "  delete  finished-job-active-pod  team-c  1 Pod  1 GPU",
        f"To act: {LIVE_COMMAND}",
    ]


def test_a_dry_run_writes_nothing_and_says_what_a_live_one_would(cluster, capsys, monkeypatch):
    """A person's look at a cluster changes nothing in it, not even an Event or a record (the
    deployed function in dry-run does write its warnings: docs/rules.md, dry-run)."""
    monkeypatch.setenv("PODSWEEPER_CRASHLOOP_ACTION", "warn")
    assert main(ARGV) == 0
    assert untouched(cluster)
    assert cluster.events == {} and cluster.evidence == {} and cluster.finish_marks == {}
    err = capsys.readouterr().err
    assert "  suspend  " not in err
    assert "Warning Events a live sweep would write: 2" in err
    assert "not written (a dry run writes nothing): 2 Events" in err


@pytest.mark.parametrize(
    "flags, env",
    [
        (["--dry-run"], {}),  # kept for scripts: the default, said again
        ([], {"PODSWEEPER_DRY_RUN": "false"}),  # the served function's switch is not the CLI's
    ],
)
def test_only_live_acts(cluster, capsys, monkeypatch, flags, env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main([*ARGV, *flags]) == 0
    assert untouched(cluster)
    assert f"To act: {LIVE_COMMAND}" in capsys.readouterr().err


def test_live_acts_as_the_preview_said(cluster, capsys, monkeypatch):
    monkeypatch.setenv("PODSWEEPER_DRY_RUN", "true")  # --live is the one switch here
    assert main([*ARGV, "--live"]) == 0
    left = sorted(f"{p.namespace}/{p.name}" for p in cluster.pods.values())
    assert left == ["team-a/loop-worker-0", "team-a/loop-worker-1", "team-c/kept-worker-0"]
    assert [j.name for j in cluster.jobs.values() if j.suspended] == ["loop"]
    assert "dry run" not in capsys.readouterr().err


def test_live_and_dry_run_together_is_a_usage_error(cluster, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([*ARGV, "--live", "--dry-run"])
    assert exit_.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
    assert untouched(cluster)


def test_a_dry_run_over_the_cap_says_a_live_sweep_goes_on_over_several(cluster, capsys, monkeypatch):
    monkeypatch.setenv("PODSWEEPER_MAX_DELETES_PER_EVENT", "4")
    assert main(ARGV) == 0
    assert untouched(cluster)
    err = capsys.readouterr().err
    assert "GPUs it would free: 8" in err  # a dry run sends nothing: the cap holds nothing back
    assert "One live sweep sends at most 4 DELETEs (PODSWEEPER_MAX_DELETES_PER_EVENT)" in err


def test_a_dry_run_with_nothing_to_do_says_so(monkeypatch, capsys):
    monkeypatch.setattr(
        podsweeper.cluster.kube,
        "connect",
        lambda settings, kubeconfig=None, make_record_key=True: SimulatedCluster(),
    )
    assert main(["sweep"]) == 0
    err = capsys.readouterr().err
    assert "dry run: a live sweep would delete or suspend nothing." in err and "To act" not in err
