"""The real kustomize, built from its Go module and cached by version outside the clone.

kubectl may be missing on a fresh machine and no release binary can be downloaded, but the Go
module proxy is reachable: `go install sigs.k8s.io/kustomize/kustomize/v5@VERSION` takes
~20 s cold. The binary lands in ``$PODSWEEPER_CACHE/kustomize-VERSION/`` (default
``~/.cache/podsweeper``). A failed build raises with go's output: tests fail, never skip.

    python -m tests.support.tools.kustomize build knative/      # print the rendered manifests
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from tests.support.harness import locks

# kubectl 1.27 embeds kustomize v5.0.1; knative/ uses only fields v5.0 has (resources,
# namespace, patches with a target, components), so `kubectl apply -k` renders the same.
KUSTOMIZE_VERSION = "v5.8.1"
KUSTOMIZE_PACKAGE = "sigs.k8s.io/kustomize/kustomize/v5"


class KustomizeError(RuntimeError):
    """kustomize could not be built, or `kustomize build` failed (message = its output)."""


def cache_root() -> Path:
    return Path(os.environ.get("PODSWEEPER_CACHE", Path.home() / ".cache" / "podsweeper"))


def kustomize_path(version: str = KUSTOMIZE_VERSION) -> Path:
    return cache_root() / f"kustomize-{version}" / "kustomize"


def go_install(
    package: str, version: str, path: Path, error: type[RuntimeError], timeout: float = 1800
) -> Path:
    """`go install PACKAGE@VERSION` into `path` (the cached binary), unless it is there already.
    The one home of how the tools here are built from their Go modules (kustomize, helm)."""
    if path.exists():
        return path
    with locks.held(f"go-install-{path.name}"):
        if path.exists():  # another process built it while this one waited
            return path
        return _go_install(package, version, path, error, timeout)


def _go_install(package: str, version: str, path: Path, error: type[RuntimeError], timeout: float) -> Path:
    go = shutil.which("go")
    if go is None:
        raise error(f"go is not on PATH: needed to build {package}@{version}")
    path.parent.mkdir(parents=True, exist_ok=True)
    # Install into a temporary GOBIN next to the cache and rename: an interrupted build
    # never leaves a half-written binary under the cached name.
    with tempfile.TemporaryDirectory(dir=path.parent) as gobin:
        # Outside any module and without the caller's GOFLAGS (e.g. -mod=mod, which
        # `go install pkg@version` rejects).
        env = {**os.environ, "GOBIN": gobin, "CGO_ENABLED": "0", "GOFLAGS": "", "GO111MODULE": "on"}
        proc = subprocess.run(
            [go, "install", "-trimpath", "-ldflags=-s -w", f"{package}@{version}"],
            cwd=tempfile.gettempdir(),
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        built = Path(gobin) / path.name
        if proc.returncode != 0 or not built.exists():
            raise error(f"go install {package}@{version} failed:\n{proc.stdout}{proc.stderr}")
        built.rename(path)
    return path


def ensure_kustomize(version: str = KUSTOMIZE_VERSION) -> Path:
    """Return the cached kustomize binary, building it with `go install` first if needed."""
    return go_install(KUSTOMIZE_PACKAGE, version, kustomize_path(version), KustomizeError, timeout=900)


def build(directory: Path | str) -> str:
    """`kustomize build DIRECTORY`: the rendered YAML stream."""
    proc = subprocess.run(
        [str(ensure_kustomize()), "build", str(directory)], capture_output=True, text=True, timeout=120
    )
    if proc.returncode != 0:
        raise KustomizeError(f"kustomize build {directory} failed:\n{proc.stderr}")
    return proc.stdout


def render(directory: Path | str) -> list[dict]:
    """`kustomize build DIRECTORY` parsed into objects, in kustomize's order."""
    return [doc for doc in yaml.safe_load_all(build(directory)) if doc]


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "build":
        sys.exit("usage: python -m tests.support.tools.kustomize build DIRECTORY")
    sys.stdout.write(build(sys.argv[2]))
