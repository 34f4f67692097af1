"""Debian's chromium for Playwright (its own browser download is not used, nor reachable here).

Installed with apt-get when /usr/bin/chromium is missing (root only); otherwise a clear error,
never a skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.support.harness import locks

CHROMIUM = Path("/usr/bin/chromium")
# Headless, and nothing of its own on the network: a request the page makes is the page's.
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


class ChromiumMissing(RuntimeError):
    pass


def _run(cmd: list[str], timeout: float) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        raise ChromiumMissing(
            f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )


def ensure_chromium() -> Path:
    """The chromium binary, installed from Debian's packages if missing."""
    if CHROMIUM.exists():
        return CHROMIUM
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ChromiumMissing(f"{CHROMIUM} is missing; install it as root: apt-get install -y chromium")
    with locks.held("apt"):  # dpkg takes one apt-get at a time
        if not CHROMIUM.exists():
            _run(["apt-get", "update", "-q"], timeout=600)
            _run(["apt-get", "install", "-y", "-q", "chromium"], timeout=1200)
    if not CHROMIUM.exists():
        raise ChromiumMissing(f"apt-get installed chromium but {CHROMIUM} is still missing")
    return CHROMIUM
