"""Prometheus and promtool, built from Prometheus's own Go module and cached by version.

tests/support/monitoring/gomod is a small module that requires github.com/prometheus/prometheus
v0.316.0 (no replace directives in its go.mod) and names cmd/prometheus and cmd/promtool as
tools. The build is tests/support/controlplane/build.py's `ensure_built`. Build tags: without
`builtinassets` the web UI's assets are not embedded (web/ui/ui.go serves them from the working
directory), which the HTTP API, the only part the tests use, does not need; `remove_all_sd`
leaves out every service discovery plugin (the cloud providers', Kubernetes', ...: plugins/),
a third of the packages to compile, since the tests scrape static targets only.

`python -m tests.support.monitoring.build [prometheus|promtool ...]` builds (or finds) them and prints
their paths and how long that took.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tests.support.controlplane.build import GoBinary, ensure_built

HERE = Path(__file__).parent
PROMETHEUS_MODULE = "github.com/prometheus/prometheus"
PROMETHEUS_VERSION = "v0.316.0"

NO_DISCOVERY = ("remove_all_sd",)
PROMETHEUS = GoBinary(
    "prometheus", PROMETHEUS_VERSION, f"{PROMETHEUS_MODULE}/cmd/prometheus", HERE / "gomod", tags=NO_DISCOVERY
)
PROMTOOL = GoBinary(
    "promtool", PROMETHEUS_VERSION, f"{PROMETHEUS_MODULE}/cmd/promtool", HERE / "gomod", tags=NO_DISCOVERY
)

ALL = {b.name: b for b in (PROMETHEUS, PROMTOOL)}


def main(argv: list[str] | None = None) -> int:
    for name in argv or list(ALL):
        started = time.monotonic()
        print(ensure_built(ALL[name]), f"({time.monotonic() - started:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
