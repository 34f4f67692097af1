"""Regenerate tests/fixtures/recorded/seed-experiment-{1,2}.jsonl from a real run.

    python -m tests.support.stack.record_seed [--world real|players] [--scale 1.0] [--out tests/fixtures/recorded]

Starts a control plane and, in namespace `default`, runs each of the seed's experiments while
`podsweeper record` (as the read-only adapter identity) writes the watch as ApiServerSource
CloudEvents. No podsweeper runs: the files are what the function would have received.

- `--world real` (the default; what the files hold now): tests/support/world, the real training
  operator v1.9.4, garbage collector, scheduler and kwok nodes. The user creates job `pytest`
  (experiment 1: cleanPodPolicy All, a master and 3 workers all exiting 0 after 5 s;
  experiment 2: examples/pytorchjob-seed.yaml) and the operator does the rest. Experiment 1
  runs until the operator has removed every pod; experiment 2 until every worker has
  restarted 4 times.
- `--world players`: tests/support/stack/players.py plays the user, the operator and the kubelet at the
  seed's pace times `--scale`; experiment 1 includes the operator's own cleanup, experiment 2
  runs until the workers' 4th restart (2m45s).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

from tests.support.stack.players import Play, experiment_1, experiment_2
from tests.support.stack.recording import RecordProcess

ROOT = Path(__file__).resolve().parents[3]
OUT = ROOT / "tests" / "fixtures" / "recorded"
SEED = ROOT / "examples" / "pytorchjob-seed.yaml"
NAMESPACE = "default"
GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"


def seed_job(experiment: int) -> dict:
    """Experiment 2 is examples/pytorchjob-seed.yaml; experiment 1 the same job with
    cleanPodPolicy All and every replica exiting 0 after 5 s."""
    (job,) = [d for d in yaml.safe_load_all(SEED.read_text()) if d]
    if experiment == 1:
        job["spec"]["runPolicy"] = {"cleanPodPolicy": "All"}
        for spec in job["spec"]["pytorchReplicaSpecs"].values():
            spec["template"]["metadata"]["annotations"] = {
                "sim.podsweeper.dev/exit-code": "0",
                "sim.podsweeper.dev/run-for": "5s",
            }
    return job


def _until(what: str, condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"record_seed: timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


def run_real(api, experiment: int) -> list[str]:
    """Create the job as a user does; wait for the experiment's end. Returns a log."""
    from kubernetes import client

    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    log: list[str] = []
    t0 = time.monotonic()

    def note(text: str) -> None:
        log.append(f"{time.monotonic() - t0:7.3f}s {text}")

    def job() -> dict:
        return custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, "pytest")

    def pods() -> dict:
        items = core.list_namespaced_pod(
            NAMESPACE, label_selector="training.kubeflow.org/job-name=pytest"
        ).items
        return {p.metadata.name: p for p in items}

    def succeeded() -> bool:
        conditions = (job().get("status") or {}).get("conditions") or []
        return any(c["type"] == "Succeeded" and c["status"] == "True" for c in conditions)

    custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, seed_job(experiment))
    note("created PyTorchJob pytest")
    _until("Succeeded", succeeded, 90)
    note("Succeeded")
    if experiment == 1:
        _until("the operator removing every pod", lambda: not pods(), 60)
        note("every pod removed by the operator")
    else:

        def restarted_4_times() -> bool:
            workers = [p for n, p in pods().items() if "-worker-" in n]
            return len(workers) == 3 and all(
                sum(c.restart_count for c in p.status.container_statuses or []) >= 4 for p in workers
            )

        _until("every worker's 4th restart", restarted_4_times, 120)
        note("every worker restarted 4 times")
    return log


def _clear_real(api) -> None:
    """Delete the job (the garbage collector removes its pods and Services); not recorded."""
    from kubernetes import client

    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    custom.delete_collection_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL)
    _until(
        "the job's pods gone",
        lambda: (
            not core.list_namespaced_pod(NAMESPACE, label_selector="training.kubeflow.org/job-name").items
        ),
        60,
    )


def _quiet(recorder: RecordProcess, quiet: float = 1.0, timeout: float = 20.0) -> int:
    """Wait until the recording has not grown for `quiet` seconds; returns its length."""
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        count = len(recorder.events())
        if count != last:
            last, since = count, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
        time.sleep(0.1)
    return last


def _clear(play: Play) -> None:
    """Remove what an experiment left (not recorded: the recorder is stopped by then)."""
    for plural in ("pytorchjobs",):
        play.custom.delete_collection_namespaced_custom_object("kubeflow.org", "v1", NAMESPACE, plural)
    play.core.delete_collection_namespaced_pod(NAMESPACE, grace_period_seconds=0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.stack.record_seed",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="time factor on the seed's timeline (default 1.0: its real pace)",
    )
    parser.add_argument("--out", type=Path, default=OUT, help=f"directory (default {OUT})")
    parser.add_argument(
        "--world",
        choices=("real", "players"),
        default="real",
        help="real: the training operator and friends (default); players: the scripted players",
    )
    args = parser.parse_args(argv)
    if args.world == "real":
        return _record_real(args.out)

    from tests.support.adapter.launcher import install_source_rbac
    from tests.support.controlplane.launcher import ControlPlane

    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="podsweeper-record-seed-"))
    with ControlPlane(log=sys.stderr) as cp:
        api = cp.api_client("admin")
        install_source_rbac(api)
        kubeconfig = cp.write_kubeconfig(work / "kubeconfig-source", "source")
        for name, play_it in (
            ("seed-experiment-1", lambda p: experiment_1(p, operator_cleanup=True)),
            ("seed-experiment-2", lambda p: experiment_2(p, until=165)),
        ):
            out = args.out / f"{name}.jsonl"
            recorder = RecordProcess(kubeconfig, NAMESPACE, work / f"{name}.jsonl", "Resource")
            try:
                play = Play(api, NAMESPACE, scale=args.scale)
                print(f"record_seed: playing {name} at scale {args.scale:g}...", file=sys.stderr, flush=True)
                play_it(play)
                count = _quiet(recorder)
            finally:
                code = recorder.stop()
            if code != 0:
                print(recorder.stderr(), file=sys.stderr)
                return 1
            out.write_text(recorder.out.read_text())
            print(f"record_seed: {out}: {count} events", file=sys.stderr, flush=True)
            print("\n".join(f"  {line}" for line in play.log), file=sys.stderr)
            _clear(play)
        api.close()
    shutil.rmtree(work, ignore_errors=True)
    return 0


def _record_real(out_dir: Path) -> int:
    from tests.support.adapter.launcher import install_source_rbac
    from tests.support.controlplane.launcher import ControlPlane
    from tests.support.world.launcher import World

    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="podsweeper-record-seed-"))
    with ControlPlane(log=sys.stderr) as cp, World(cp, log=sys.stderr):
        api = cp.api_client("admin")
        install_source_rbac(api)
        kubeconfig = cp.write_kubeconfig(work / "kubeconfig-source", "source")
        for experiment in (1, 2):
            name = f"seed-experiment-{experiment}"
            recorder = RecordProcess(kubeconfig, NAMESPACE, work / f"{name}.jsonl", "Resource")
            try:
                print(
                    f"record_seed: running {name} against the real operator...", file=sys.stderr, flush=True
                )
                log = run_real(api, experiment)
                count = _quiet(recorder) if experiment == 1 else len(recorder.events())
            finally:
                code = recorder.stop()
            if code != 0:
                print(recorder.stderr(), file=sys.stderr)
                return 1
            out = out_dir / f"{name}.jsonl"
            out.write_text(recorder.out.read_text())
            print(f"record_seed: {out}: {count} events", file=sys.stderr, flush=True)
            print("\n".join(f"  {line}" for line in log), file=sys.stderr)
            _clear_real(api)
        api.close()
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
