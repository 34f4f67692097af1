"""The bench's one door to the test harness, for what needs no control plane.

The benchmarks build their objects and serve the function exactly as the tests do; these
are the test code's documented entry points they use (docs/development.md, "Shared pieces"),
and no other bench module imports `tests`:

- `tests.fixtures.builders`: jobs, pods and CloudEvents as the tests build them.
- `tests.fixtures.parse`: a built object -> the function's plain data, by its own decoders.
- `tests.support.harness.served`: the function served by the production command (`Served`,
  `serve_argv` for a start the caller times), the binary-mode headers, a closed-port kubeconfig.
- `tests.support.harness.processes`: a process's children (gunicorn's workers, the control plane).

What needs a control plane is in bench/cluster.py, imported only by the figures that start one.
"""

from __future__ import annotations

from tests.fixtures import builders
from tests.fixtures.parse import parse_job, parse_pod
from tests.support.harness.processes import children
from tests.support.harness.served import Served, binary_headers, serve_argv, unreachable_kubeconfig

__all__ = [
    "Served",
    "binary_headers",
    "builders",
    "children",
    "parse_job",
    "parse_pod",
    "serve_argv",
    "unreachable_kubeconfig",
]
