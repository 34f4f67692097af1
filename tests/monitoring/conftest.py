"""Fixtures for the monitoring tests: promtool and Prometheus built from Prometheus's Go module
(tests/monitoring/build.py), and, for the live test, the e2e tests' own stack fixtures.

A missing binary is built on first use with its progress shown; a failed build errors the
tests that need it, it never skips them.
"""

from __future__ import annotations

import contextlib
import sys

import pytest

# The e2e tests' stack: make_stack starts the function and Knative's receive adapter for the
# test's namespace and stops them afterwards (tests/e2e/conftest.py); `core` is a CoreV1Api.
from tests.e2e.conftest import core, make_stack, receive_adapter  # noqa: F401
from tests.monitoring.build import PROMETHEUS, PROMTOOL


def _built(pytestconfig, binary):
    from tests.controlplane.build import ensure_built

    if not binary.path.exists():
        capman = pytestconfig.pluginmanager.getplugin("capturemanager")
        with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
            ensure_built(binary, log=sys.stderr)
    return binary.path


@pytest.fixture(scope="session")
def promtool(pytestconfig):
    return _built(pytestconfig, PROMTOOL)


@pytest.fixture(scope="session")
def prometheus_binary(pytestconfig):
    return _built(pytestconfig, PROMETHEUS)
