"""`podsweeper record` run as its own process, the way a person runs it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


class RecordProcess:
    """`podsweeper record` as a subprocess; watching once it says so on stderr."""

    def __init__(self, kubeconfig: Path, namespace: str, out: Path, mode: str):
        self.out = out
        self.stderr_path = out.with_suffix(".stderr")
        with self.stderr_path.open("wb") as err:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "podsweeper",
                    "record",
                    "--kubeconfig",
                    str(kubeconfig),
                    "-n",
                    namespace,
                    "--out",
                    str(out),
                    "--mode",
                    mode,
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env={k: v for k, v in os.environ.items() if k != "KUBECONFIG"},
            )
        deadline = time.monotonic() + 30
        while "watching" not in self.stderr():
            assert self.proc.poll() is None, f"record exited:\n{self.stderr()}"
            assert time.monotonic() < deadline, f"record not watching:\n{self.stderr()}"
            time.sleep(0.05)

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def events(self) -> list[dict]:
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.strip()]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)
