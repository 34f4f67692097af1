"""Regenerate tests/fixtures/recorded/seed-experiment-{1,2}.jsonl from a real run.

    python -m tests.e2e.record_seed [--scale 1.0] [--out tests/fixtures/recorded]

Starts a control plane, then plays each of the seed's experiments (tests/e2e/players.py:
the user, the training operator and the kubelet, at the seed's pace times `scale`) in
namespace `default` while `podsweeper record` (as the read-only adapter identity) writes
the watch as ApiServerSource CloudEvents. No podsweeper runs: the files are what the
function would have received in the seed's cluster. Experiment 1 includes the operator's
own cleanPodPolicy All cleanup; experiment 2 runs until the workers' 4th restart (2m45s).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tests.e2e.players import Play, experiment_1, experiment_2
from tests.e2e.recording import RecordProcess

OUT = Path(__file__).resolve().parents[1] / "fixtures" / "recorded"
NAMESPACE = "default"


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
        prog="python -m tests.e2e.record_seed",
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
    args = parser.parse_args(argv)

    from tests.adapter.launcher import install_source_rbac
    from tests.controlplane.launcher import ControlPlane

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


if __name__ == "__main__":
    sys.exit(main())
