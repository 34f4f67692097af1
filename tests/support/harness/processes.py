"""Child processes that never outlive the test run, and stopping them by process group."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path


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


def stop_group(proc: subprocess.Popen | None, timeout: float = 10.0) -> None:
    """SIGTERM the child's process group (started with start_new_session), then SIGKILL."""
    if proc is None or proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
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
