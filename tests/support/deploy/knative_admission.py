"""Knative's own admission logic (webhook SetDefaults + Validate), built from Go modules.

The test control plane has Knative's CRDs but not its webhooks, so the CRD schema is all the
API server checks. tests/support/deploy/knativevalidate/ is a small Go program that runs the
validating/defaulting code of knative.dev/serving and knative.dev/eventing (the same
versions as the CRDs) on objects, so what only the webhook would reject (a reserved PORT
variable, min-scale above max-scale, a bad cron schedule, ...) fails the tests too.

The binary is cached under ``$PODSWEEPER_CACHE`` keyed by the hash of its sources, so an edit
rebuilds it; a build failure raises with go's output.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from tests.support.controlplane.build import source_digest
from tests.support.harness import locks
from tests.support.tools.kustomize import cache_root

MODULE_DIR = Path(__file__).parent / "knativevalidate"


class AdmissionError(RuntimeError):
    """The validator could not be built or run (message = its output)."""


def binary_path() -> Path:
    return cache_root() / f"knativevalidate-{source_digest(MODULE_DIR)}" / "knativevalidate"


def ensure_built() -> Path:
    path = binary_path()
    if path.exists():
        return path
    with locks.held("go-build-knativevalidate"):
        if path.exists():  # another process built it while this one waited
            return path
        return _build(path)


def _build(path: Path) -> Path:
    go = shutil.which("go")
    if go is None:
        raise AdmissionError("go is not on PATH: needed to build tests/support/deploy/knativevalidate")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly"}
    proc = subprocess.run(
        [go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(partial), "."],
        cwd=MODULE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if proc.returncode != 0:
        raise AdmissionError(
            f"go build tests/support/deploy/knativevalidate failed:\n{proc.stdout}{proc.stderr}"
        )
    partial.rename(path)
    return path


def admit(objects: list[dict]) -> list[dict]:
    """One {"kind", "name", "checked", "error"} per object, in order."""
    proc = subprocess.run(
        [str(ensure_built())], input=json.dumps(objects), capture_output=True, text=True, timeout=120
    )
    if proc.returncode != 0:
        raise AdmissionError(f"knativevalidate exited {proc.returncode}: {proc.stderr}")
    return json.loads(proc.stdout)
