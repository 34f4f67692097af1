"""The function served as production serves it (functions-framework -> gunicorn), observable.

Like tests/http/server.py `serve`, plus what the reliability tests need: the gunicorn
worker's pid (to read its RSS and to notice a worker that died and was respawned), the
server's whole stdout+stderr in a file (a pipe nobody reads would block a chatty server,
and the log is checked for secrets), and the decision lines parsed from it.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

from tests.http.server import ROOT, free_port, server_command

# Put into every pod the builders make; must never reach a log.
SECRET = "secret-do-not-log"
# Every log a served function of this suite wrote, checked by test_security.py.
ALL_LOGS: list[Path] = []


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


@dataclass
class Served:
    env: dict[str, str]
    log_path: Path
    url: str = ""
    proc: subprocess.Popen | None = None
    _log: object = field(default=None, repr=False)

    def start(self, timeout: float = 30.0) -> Served:
        port = free_port()
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("PODSWEEPER_") and k != "KUBERNETES_SERVICE_HOST"
        }
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            server_command(port),
            cwd=ROOT,
            env={**env, **self.env},
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        ALL_LOGS.append(self.log_path)
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"function server exited {self.proc.returncode}:\n{self.log()}")
            try:
                if requests.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("function server did not become healthy")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None:
            self._log.close()

    def __enter__(self) -> Served:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- observing it -------------------------------------------------------------------
    @property
    def worker_pids(self) -> list[int]:
        return sorted(children(self.proc.pid))

    def rss(self) -> int:
        """Resident memory of the gunicorn worker(s) that handle the requests."""
        return sum(rss_bytes(pid) for pid in self.worker_pids)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def decisions(self) -> list[dict]:
        lines = []
        for text in self.log().splitlines():
            if text.startswith('{"msg": "decision"'):
                lines.append(json.loads(text))
        return lines

    def healthy(self) -> bool:
        try:
            return requests.get(f"{self.url}/healthz", timeout=5).status_code == 200
        except requests.RequestException:
            return False
