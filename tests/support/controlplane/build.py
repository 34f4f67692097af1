"""Build the control-plane binaries from Go modules into a cache outside the clone.

Binaries are cached by version under ``$PODSWEEPER_CACHE`` (default
``~/.cache/podsweeper``), so a second run builds nothing. A failed build raises with the
build's own output: tests must fail, never skip, when the control plane is missing.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.support.controlplane.versions import ADAPTER_EVENTING_VERSION, ETCD_VERSION, KUBERNETES_VERSION
from tests.support.harness import locks

HERE = Path(__file__).parent


def cache_root() -> Path:
    return Path(os.environ.get("PODSWEEPER_CACHE", Path.home() / ".cache" / "podsweeper"))


@dataclass(frozen=True)
class GoBinary:
    """One binary built from a Go package inside one of our helper modules."""

    name: str
    version: str
    package: str
    module_dir: Path
    # Extra -X flags (a version stamp); part of the cache key, so a change builds anew.
    stamp: tuple[str, ...] = ()
    # Build tags (e.g. leaving parts out); part of the cache key too.
    tags: tuple[str, ...] = ()
    # What the progress lines say: how long a cold build takes, every how many packages a line.
    cold_build: str = "5-20 minutes"
    progress_every: int = 200

    @property
    def path(self) -> Path:
        tag = f"{self.version}-stamped" if self.stamp else self.version
        if self.tags:
            tag += "-" + "-".join(self.tags)
        return cache_root() / f"{self.name}-{tag}" / self.name

    @property
    def ldflags(self) -> str:
        return " ".join(["-s", "-w", *(f"-X {flag}" for flag in self.stamp)])


def source_digest(directory: Path, names: tuple[str, ...] = ("go.mod", "go.sum", "main.go")) -> str:
    """The cache key of a binary built from our own Go sources: an edit builds anew."""
    digest = hashlib.sha256()
    for name in names:
        digest.update((directory / name).read_bytes())
    return digest.hexdigest()[:12]


def kubernetes_version_stamp(version: str) -> tuple[str, ...]:
    """What Kubernetes' own build sets (hack/lib/version.sh): /version then reports the real
    release, which controllers and kubectl read, instead of v0.0.0-master."""
    major, minor, _ = version.removeprefix("v").split(".")
    package = "k8s.io/component-base/version"
    return tuple(
        f"{package}.{name}={value}"
        for name, value in (
            ("gitVersion", version),
            ("gitMajor", major),
            ("gitMinor", minor),
            ("gitTreeState", "clean"),
            ("buildDate", "2026-01-01T00:00:00Z"),
        )
    )


KUBE_APISERVER = GoBinary(
    "kube-apiserver",
    KUBERNETES_VERSION,
    "k8s.io/kubernetes/cmd/kube-apiserver",
    HERE / "gomod",
    stamp=kubernetes_version_stamp(KUBERNETES_VERSION),
)
ETCD = GoBinary("etcd", ETCD_VERSION, "go.etcd.io/etcd/server/v3", HERE / "gomod")
RECEIVE_ADAPTER = GoBinary(
    "apiserver_receive_adapter",
    ADAPTER_EVENTING_VERSION,
    "knative.dev/eventing/cmd/apiserver_receive_adapter",
    HERE.parent / "adapter" / "gomod",
)


class BuildError(RuntimeError):
    """A Go build failed; the message carries the compiler's output."""


def ensure_built(binary: GoBinary, log=sys.stderr, prepare: Callable[[], object] | None = None) -> Path:
    """Return the cached binary, building it first if it is not there yet (`prepare` first, under
    the same lock: one build at a time in a module directory, tests.support.harness.locks, as
    `-mod=mod` may extend its go.sum; builds in other modules go on at once, so a test waiting
    for a small tool never waits for another module's minutes-long build)."""
    if binary.path.exists():
        return binary.path
    with locks.held(f"go-build-{binary.module_dir.name}", log):
        if binary.path.exists():  # another process built it while this one waited
            return binary.path
        if prepare is not None:
            prepare()
        return _build(binary, log)


def _build(binary: GoBinary, log) -> Path:
    go = shutil.which("go")
    if go is None:
        raise BuildError("go is not on PATH: install Go 1.26 to build the control plane")
    binary.path.parent.mkdir(parents=True, exist_ok=True)
    # One partial file per process: two runs sharing the cache (a soak beside CI) may build the
    # same binary at once; each renames its own complete file into place.
    partial = binary.path.with_suffix(f".partial-{os.getpid()}")
    print(
        f"building {binary.name} {binary.version} from {binary.package} "
        f"(cold builds take {binary.cold_build} on 2 cores)...",
        file=log,
        flush=True,
    )
    started = time.monotonic()
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    proc = subprocess.Popen(
        [
            go,
            "build",
            "-v",
            "-trimpath",
            f"-ldflags={binary.ldflags}",
            *([f"-tags={','.join(binary.tags)}"] if binary.tags else []),
            "-o",
            str(partial),
            binary.package,
        ],
        cwd=binary.module_dir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    tail: list[str] = []
    packages = 0
    assert proc.stdout is not None
    for line in proc.stdout:
        tail = (tail + [line.rstrip()])[-60:]
        packages += 1
        if packages % binary.progress_every == 0:
            print(
                f"  {binary.name}: {packages} packages compiled, {time.monotonic() - started:.0f}s",
                file=log,
                flush=True,
            )
    if proc.wait() != 0:
        raise BuildError(f"building {binary.name} failed:\n" + "\n".join(tail))
    partial.replace(binary.path)
    print(f"built {binary.path} in {time.monotonic() - started:.0f}s", file=log, flush=True)
    return binary.path


def main(argv: list[str] | None = None) -> int:
    names = argv if argv else ["kube-apiserver", "etcd"]
    table = {b.name: b for b in (KUBE_APISERVER, ETCD, RECEIVE_ADAPTER)}
    for name in names:
        print(ensure_built(table[name]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
