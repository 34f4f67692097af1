"""Serving the function (and the no-op baseline) with the production command, and watching it.

The command is tests/http/server.py's `server_command` — the Dockerfile's CMD
(`functions-framework --source ... --target handle --signature-type cloudevent`) plus a
loopback host and port — so gunicorn runs with functions-framework's own settings
(1 worker, gthread, 4 threads per core). The no-op baseline is the same command with
`--source bench/noop_main.py`. Output goes to a log file, never to an unread pipe (a full
pipe would stall a server that logs its decisions).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.controlplane.launcher import _die_with_parent
from tests.http.server import ROOT, UNREACHABLE_KUBECONFIG, free_port, server_command

NOOP_SOURCE = Path(__file__).resolve().parent / "noop_main.py"


def command(port: int, noop: bool = False) -> list[str]:
    argv = server_command(port)
    if noop:
        argv[argv.index("--source") + 1] = str(NOOP_SOURCE)
    return argv


def unreachable_kubeconfig(directory: Path) -> Path:
    """A kubeconfig whose API server is a closed port: an accidental API call answers 503."""
    path = directory / "unreachable.kubeconfig"
    path.write_text(UNREACHABLE_KUBECONFIG % free_port())
    return path


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PODSWEEPER_")}
    for key in ("WORKERS", "THREADS", "CLOUD_RUN_TIMEOUT_SECONDS", "GUNICORN_LOG_LEVEL"):
        env.pop(key, None)  # functions-framework's defaults, as in production
    env["PYTHONUNBUFFERED"] = "1"  # as the Dockerfile sets it
    return {**env, **extra}


class Server:
    """One served instance; `url`, `port`, `pid` (gunicorn master), `workers()`."""

    def __init__(self, name: str, env: dict[str, str], noop: bool = False, logdir: Path | None = None):
        self.name = name
        self.port = free_port()
        while self.port == 8080:  # Knative's receive adapter always binds its probes there
            self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.logdir = logdir or Path(tempfile.mkdtemp(prefix="podsweeper-bench-"))
        self.log_path = self.logdir / f"{name}.log"
        self.argv = command(self.port, noop)
        self.env = clean_env(env)
        self.proc: subprocess.Popen | None = None
        self.started_at = 0.0

    def start(self) -> Server:
        log = self.log_path.open("ab")
        self.started_at = time.perf_counter()
        self.proc = subprocess.Popen(
            self.argv,
            cwd=ROOT,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent(os.getpid()),
        )  # no server outlives a killed run
        log.close()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def check_alive(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} server exited; log {self.log_path}:\n{self.tail()}")

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def wait_listening(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name} server did not listen; log:\n{self.tail()}") from None
                time.sleep(0.02)

    def workers(self) -> list[int]:
        try:
            text = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text()
        except OSError:
            return []
        return [int(p) for p in text.split()]

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def memory_kb(pid: int) -> dict[str, int]:
    """VmHWM (peak RSS) and VmRSS of a process, in kB."""
    out: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                out[key] = int(value.split()[0])
    except OSError:
        pass
    return out


def instance_memory(server: Server) -> dict[str, float]:
    """Peak RSS in MB of the gunicorn worker(s) and the master of one instance."""
    master = memory_kb(server.pid)
    workers = [memory_kb(pid) for pid in server.workers()]
    return {
        "master_peak": master.get("VmHWM", 0) / 1024,
        "worker_peak": sum(w.get("VmHWM", 0) for w in workers) / 1024,
        "workers": len(workers),
    }
