"""The real Helm, built from its Go module and cached by version outside the clone.

Like kustomize (tests/support/tools/kustomize.py): no release binary can be downloaded, but the
Go module proxy is reachable, so `go install helm.sh/helm/v3/cmd/helm@VERSION` builds it. The
binary lands in ``$PODSWEEPER_CACHE/helm-VERSION/`` (default ``~/.cache/podsweeper``). A failed
build raises with go's output: tests fail, never skip.

Build time of v3.22.0 with Go 1.26.8 on this 2-core machine, shared with other work: ~390 s
cold (an empty GOCACHE and none of its modules downloaded yet), 102 s cold on the idle machine
with its modules downloaded, ~9 s with the build cache warm (the link alone). Once built, the cached binary is reused.

    python -m tests.delivery.helm template charts/podsweeper [VALUES.yaml]   # print the render
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from tests.support.tools.kustomize import cache_root, go_install

HELM_VERSION = "v3.22.0"
HELM_PACKAGE = "helm.sh/helm/v3/cmd/helm"


class HelmError(RuntimeError):
    """helm could not be built, or `helm template` / `helm lint` failed (message = its output)."""


def helm_path(version: str = HELM_VERSION) -> Path:
    return cache_root() / f"helm-{version}" / "helm"


def ensure_helm(version: str = HELM_VERSION) -> Path:
    """Return the cached helm binary, building it with `go install` first if needed."""
    return go_install(HELM_PACKAGE, version, helm_path(version), HelmError)


def _run(args: list[str], values: dict | None, what: str) -> str:
    """Run helm with VALUES (if any) written to a file and passed with -f; stdout on success."""
    with tempfile.TemporaryDirectory() as home:
        # Its own empty config, cache and data dirs: no repositories, plugins or settings of the
        # machine's user take part, and nothing is written outside the temp dir.
        env = {
            **os.environ,
            "HELM_CONFIG_HOME": f"{home}/config",
            "HELM_CACHE_HOME": f"{home}/cache",
            "HELM_DATA_HOME": f"{home}/data",
        }
        command = [str(ensure_helm()), *args]
        if values is not None:
            values_file = Path(home) / "values.yaml"
            values_file.write_text(yaml.safe_dump(values))
            command += ["--values", str(values_file)]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    if proc.returncode != 0:
        raise HelmError(f"{what} failed:\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def template_text(
    chart: Path | str, values: dict | None = None, release: str = "podsweeper", namespace: str = "podsweeper"
) -> str:
    """`helm template RELEASE CHART -n NAMESPACE -f VALUES`: the rendered YAML stream."""
    return _run(
        ["template", release, str(chart), "--namespace", namespace],
        values or {},
        f"helm template {chart} with values {values or {}}",
    )


def template(
    chart: Path | str, values: dict | None = None, release: str = "podsweeper", namespace: str = "podsweeper"
) -> list[dict]:
    """`helm template` parsed into objects, in helm's order."""
    return [doc for doc in yaml.safe_load_all(template_text(chart, values, release, namespace)) if doc]


def lint(chart: Path | str, values: dict | None = None, namespace: str = "podsweeper") -> str:
    """`helm lint --strict CHART -f VALUES`: its output; raises HelmError on any warning or error."""
    return _run(
        ["lint", "--strict", str(chart), "--namespace", namespace],
        values or {},
        f"helm lint --strict {chart} with values {values or {}}",
    )


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4) or sys.argv[1] != "template":
        sys.exit("usage: python -m tests.delivery.helm template CHART [VALUES.yaml]")
    given = yaml.safe_load(Path(sys.argv[3]).read_text()) if len(sys.argv) == 4 else {}
    sys.stdout.write(template_text(sys.argv[2], given))
