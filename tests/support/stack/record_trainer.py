"""Regenerate tests/fixtures/recorded/trainer-*.jsonl from the real Trainer v2 world.

    python -m tests.support.stack.record_trainer [--out tests/fixtures/recorded]

Starts a control plane and `World(trainer=True)` (JobSet v0.12.0, Trainer v2.3.0, the garbage
collector, the Job controller, the scheduler, kwok GPU nodes) and runs four scenarios at once,
each in its own namespace with its own `podsweeper record` (the read-only adapter identity,
Resource mode). No podsweeper runs: the files are what the function would have received. The
user only creates a TrainJob (and a namespaced runtime copy) and, where the scenario says so,
deletes something with propagation Orphan; Trainer, JobSet, the Job controller and kwok do the
rest.

- `trainer-complete`: 2 pods exit 0 after 3 s; recorded until the TrainJob is Complete.
- `trainer-failed-restarted`: a runtime copy whose JobSet has ttlSecondsAfterFinished 2; the
  pods exit 1 every second, the Job reaches its backoffLimit, the TrainJob is Failed; the TTL
  deletes the JobSet and Trainer makes a new one (and drops Failed). Recorded until the new
  JobSet's pods run (the loop goes on: it would restart again ~20 s later).
- `trainer-orphan-jobset`: a running TrainJob, 32 s old, deleted with propagation Orphan: its
  JobSet keeps running with no owner. Recorded 3 s past the delete.
- `trainer-orphan-job`: a running TrainJob's JobSet, 32 s old, deleted with propagation Orphan:
  Trainer makes a new JobSet whose Job is blocked by the old Job's name. Recorded 3 s past the
  delete.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.trainer import trainjob
from tests.support.harness.waiting import wait_for
from tests.support.stack.record_seed import OUT, _quiet
from tests.support.stack.recording import RecordProcess
from tests.support.world.trainjobs import JOBSET, TRAINER, Cluster

OLD_ENOUGH = 32  # seconds: past the function's default orphan grace (30 s) when the delete comes


def complete(k: Cluster, note: Callable[[str], None]) -> None:
    k.create_trainjob(trainjob("done", run_for="3s"))
    note("created TrainJob done")
    wait_for("done Complete", lambda: k.condition(k.trainjob("done"), "Complete"), timeout=90)
    note("Complete")


def failed_restarted(k: Cluster, note: Callable[[str], None]) -> None:
    runtime = k.runtime_copy("torch-ttl", ttlSecondsAfterFinished=2)
    k.create_trainjob(trainjob("again", exit_code="1", run_for="1s", runtime=runtime))
    note("created TrainJob again (runtime torch-ttl: JobSet TTL 2 s)")
    first = wait_for("again's JobSet", lambda: k.jobset("again"), timeout=30)
    wait_for("again Failed", lambda: k.condition(k.trainjob("again"), "Failed"), timeout=120, interval=0.05)
    note("Failed")
    uid = first["metadata"]["uid"]
    wait_for("a new JobSet", lambda: k.replaced_jobset("again", uid), timeout=30)
    note("new JobSet made by Trainer")
    wait_for("its pods Running", lambda: k.running("again"), timeout=30)
    note("its pods Running")


def _old_and_running(k: Cluster, name: str, note: Callable[[str], None]) -> None:
    t0 = time.monotonic()
    k.create_trainjob(trainjob(name, run_for="1h"))
    note(f"created TrainJob {name}")
    wait_for("2 pods Running", lambda: k.running(name), timeout=60)
    time.sleep(max(0.0, OLD_ENOUGH - (time.monotonic() - t0)))


def orphan_jobset(k: Cluster, note: Callable[[str], None]) -> None:
    _old_and_running(k, "lost", note)
    k.delete(TRAINER, "trainjobs", "lost", "Orphan")
    note("TrainJob lost deleted, propagation Orphan")
    wait_for("the TrainJob gone", lambda: k.trainjob("lost") is None, timeout=30)
    time.sleep(3)


def orphan_job(k: Cluster, note: Callable[[str], None]) -> None:
    _old_and_running(k, "clash", note)
    k.delete(JOBSET, "jobsets", "clash", "Orphan")
    note("JobSet clash deleted, propagation Orphan")
    time.sleep(3)


# name -> (scenario, wait for the watch to go quiet before stopping: not for a crash loop,
# which never does and would only add more restarts to the file)
SCENARIOS: dict[str, tuple[Callable[[Cluster, Callable[[str], None]], None], bool]] = {
    "trainer-complete": (complete, True),
    "trainer-failed-restarted": (failed_restarted, False),
    "trainer-orphan-jobset": (orphan_jobset, True),
    "trainer-orphan-job": (orphan_job, True),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.stack.record_trainer",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", type=Path, default=OUT, help=f"directory (default {OUT})")
    args = parser.parse_args(argv)

    from kubernetes import client

    from tests.support.adapter.launcher import install_source_rbac
    from tests.support.controlplane.launcher import ControlPlane
    from tests.support.world.launcher import World

    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="podsweeper-record-trainer-"))
    failures: dict[str, BaseException] = {}
    logs: dict[str, list[str]] = {name: [] for name in SCENARIOS}
    with ControlPlane(log=sys.stderr) as cp, World(cp, trainer=True, log=sys.stderr):
        api = cp.api_client("admin")
        install_source_rbac(api)
        kubeconfig = cp.write_kubeconfig(work / "kubeconfig-source", "source")
        recorders: dict[str, RecordProcess] = {}
        for name in SCENARIOS:
            client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
            recorders[name] = RecordProcess(kubeconfig, name, work / f"{name}.jsonl", "Resource")

        codes: dict[str, int] = {}

        def run(name: str) -> None:
            t0 = time.monotonic()

            def note(text: str) -> None:
                logs[name].append(f"{time.monotonic() - t0:7.3f}s {text}")

            try:
                scenario, quiet = SCENARIOS[name]
                scenario(Cluster(api, name), note)
                if quiet:
                    _quiet(recorders[name])
            except (Exception, pytest.fail.Exception) as e:  # noqa: BLE001 (each reported below)
                failures[name] = e
            finally:
                codes[name] = recorders[name].stop()  # the scenario's end is the file's end

        threads = [threading.Thread(target=run, args=(name,), name=name) for name in SCENARIOS]
        print(f"record_trainer: running {len(threads)} scenarios...", file=sys.stderr, flush=True)
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for name, recorder in recorders.items():
            code = codes[name]
            if code != 0:
                failures.setdefault(name, RuntimeError(f"record exited {code}: {recorder.stderr()}"))
            if name in failures:
                continue
            out = args.out / f"{name}.jsonl"
            out.write_text(recorder.out.read_text())
            print(f"record_trainer: {out}: {len(recorder.events())} events", file=sys.stderr)
            print("\n".join(f"  {line}" for line in logs[name]), file=sys.stderr)
        api.close()
    shutil.rmtree(work, ignore_errors=True)
    for name, error in failures.items():
        print(f"record_trainer: {name} failed: {error}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
