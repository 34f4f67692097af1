"""One lock across processes for what is built or installed once and shared: the Go builds in
the cache, apt-get, the container base image.

`make test` runs test files in several worker processes (pytest-xdist), and a soak may run
beside CI: on a cold cache two of them would build the same binary at once (twice the CPU,
and `go build -mod=mod` in one module directory may update its go.sum under the other), or
run apt-get at once (dpkg's lock refuses the second). The second waits here and then finds
the thing there. Not reentrant: take it once, around the whole build.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _directory() -> Path:
    root = Path(os.environ.get("PODSWEEPER_CACHE", Path.home() / ".cache" / "podsweeper"))
    path = root / "locks"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def held(name: str, log=sys.stderr) -> Iterator[None]:
    """Hold the machine-wide lock `name` ("go-build-<module>", "apt", ...); says so when it waits."""
    with open(_directory() / f"{name}.lock", "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            started = time.monotonic()
            print(f"waiting for another process's {name} ...", file=log, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
            print(f"{name}: waited {time.monotonic() - started:.0f}s", file=log, flush=True)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
