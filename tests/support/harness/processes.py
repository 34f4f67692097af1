"""The one launcher of the tests' long-running child processes (`Process`), and their helpers.

Every server, controller and tool a test runs (etcd, kube-apiserver, the Kubeflow and Knative
controllers, the served function, Prometheus, `podsweeper record`) is a `Process`: started with
argv/env/cwd in a session of its own, its output appended to one log file (never an unread
pipe, which would stall it), killed by the kernel if the launcher dies (die_with_parent), waited
for by a ready condition that fails fast once it has exited, stopped by its process group with
SIGTERM and then SIGKILL after a grace, and its log tail carried in every error it raises.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Self


def die_with_parent(parent_pid: int | None = None) -> Callable[[], None]:
    """preexec_fn: have the kernel SIGKILL the child when the launcher dies, even by SIGKILL.

    Linux ties this to the *thread* that forked, so start children from a long-lived thread
    (the main thread, as pytest fixtures and the CLIs do).
    """
    parent = os.getpid() if parent_pid is None else parent_pid

    def hook() -> None:
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass  # not Linux: process groups and stop_group() still clean up
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return hook


def stop_group(proc: subprocess.Popen | None, timeout: float = 10.0, first: int = signal.SIGTERM) -> None:
    """`first` (SIGTERM) to the child's process group (started with start_new_session), then SIGKILL."""
    if proc is None or proc.poll() is not None:
        return
    for sig, wait in ((first, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def kill_group(proc: subprocess.Popen | None) -> None:
    """SIGKILL the child's process group at once, as the OOM killer or a node's loss would end
    it: no handler runs, nothing is flushed. Returns once it has exited."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(10.0)


class ProcessError(RuntimeError):
    """A child exited or never became ready; the message carries its log tail."""


def wait_until(
    what: str,
    condition: Callable[[], Any],
    *,
    timeout: float,
    check: Callable[[], None],
    tails: Callable[[], str],
    error: type[Exception] = ProcessError,
    interval: float = 0.2,
) -> Any:
    """Poll condition() until it returns something truthy (returned). check() raises as soon as
    a child it watches has exited; after `timeout` seconds, error() names `what` and tails()."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        check()
        if time.monotonic() > deadline:
            raise error(f"timed out after {timeout:.0f}s waiting for {what}\n{tails()}")
        time.sleep(interval)


def answers_ok(url: str, timeout: float = 2.0) -> bool:
    """A ready probe: GET url answers 200 (a /readyz, /healthz or /-/ready)."""
    import requests

    try:
        return requests.get(url, timeout=timeout).status_code == 200
    except requests.RequestException:
        return False


class Process:
    """One long-running child with its log file: the one way the tests start a server.

    `launch(argv, env=, cwd=)` starts it and returns at once; `wait(what, condition)` until
    it is ready; `stop()` (stop_signal, then SIGKILL after `grace` seconds) or `kill()`.
    A restart (`relaunch()`) runs the same argv, env and cwd and goes on in the same log.
    Its errors are of the `error` class its owner names, each with the log's last lines.
    """

    def __init__(
        self,
        name: str,
        log_path: Path,
        *,
        error: type[Exception] = ProcessError,
        grace: float = 10.0,
        stop_signal: int = signal.SIGTERM,
    ):
        self.name = name
        self.log_path = Path(log_path)
        self.error = error
        self.grace = grace
        self.stop_signal = stop_signal
        self.proc: subprocess.Popen | None = None
        self._command: tuple[list[str], dict[str, str] | None, Path | None] = ([], None, None)

    def launch(
        self, argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> Self:
        self._command = (list(argv), env, cwd)
        return self.relaunch()

    def relaunch(self) -> Self:
        argv, env, cwd = self._command
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent(),
            )
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 40) -> str:
        """The log's last lines, each cut at 600 characters (a served function logs long JSON)."""
        return "\n".join(line[:600] for line in self.text().splitlines()[-lines:])

    def last_lines(self, lines: int = 40) -> str:
        return f"last lines of {self.log_path}:\n{self.tail(lines)}"

    def check(self) -> None:
        """Raise `error` with the log tail if it has exited (or was never started)."""
        if not self.alive():
            raise self.error(f"{self.name} exited with code {self.returncode}; {self.last_lines()}")

    def wait(self, what: str, condition: Callable[[], Any], timeout: float, interval: float = 0.2) -> Any:
        """Poll condition() until truthy (returned); `error` at once if it exits, or after timeout."""
        return wait_until(
            f"{self.name} to {what}",
            condition,
            timeout=timeout,
            check=self.check,
            tails=self.last_lines,
            error=self.error,
            interval=interval,
        )

    def stop(self, timeout: float | None = None) -> int | None:
        """stop_signal to its process group, SIGKILL after `grace` (or `timeout`); its exit code."""
        stop_group(self.proc, self.grace if timeout is None else timeout, self.stop_signal)
        return self.returncode

    def kill(self) -> None:
        kill_group(self.proc)


def tails(processes: Sequence[Process], lines: int = 15) -> str:
    """The last lines of each log, for an error about several children."""
    return "\n".join(f"--- {p.name} ({p.log_path}):\n{p.tail(lines)}" for p in processes)


def children(pid: int) -> list[int]:
    """The direct children of a process (e.g. gunicorn's workers), from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == pid:
                found.append(int(entry.name))
    return sorted(found)


def memory_kb(pid: int) -> dict[str, int]:
    """VmHWM (peak RSS) and VmRSS of a process in kB; empty once it is gone."""
    out: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                out[key] = int(value.split()[0])
    except OSError:
        pass
    return out


class StopSignal(BaseException):
    """Raised from a SIGTERM/SIGINT handler so `with` blocks unwind and stop what they started."""


def stop_on_signals() -> None:
    """Turn SIGTERM and SIGINT into StopSignal, once: a second signal cannot cut the cleanup short."""

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise StopSignal(signum)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def ready_until_signalled(*checks: Callable[[], None]) -> None:
    """A CLI's ready line: print READY on stdout, then run every check (each raises once a part
    has died) twice a second until SIGTERM/SIGINT (StopSignal, after stop_on_signals())."""
    print("READY", flush=True)
    while True:
        for check in checks:
            check()
        time.sleep(0.5)
