"""`podsweeper record` run as its own process, the way a person runs it."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from tests.support.harness.processes import Process


class RecordProcess(Process):
    """`podsweeper record` as a subprocess; watching once it says so. `stop()` is a Ctrl-C
    (SIGINT), SIGKILL after 10 s; it returns the exit code."""

    def __init__(self, kubeconfig: Path, namespace: str, out: Path, mode: str):
        super().__init__(
            "record", out.with_suffix(".stderr"), error=AssertionError, stop_signal=signal.SIGINT
        )
        self.out = out
        argv = [
            sys.executable,
            "-m",
            "podsweeper",
            "record",
            "--kubeconfig",
            str(kubeconfig),
            "-n",
            namespace,
        ]
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        self.launch([*argv, "--out", str(out), "--mode", mode], env=env)
        self.wait("say it is watching", lambda: "watching" in self.stderr(), timeout=30, interval=0.05)

    def stderr(self) -> str:
        return self.text()

    def events(self) -> list[dict]:
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.strip()]
