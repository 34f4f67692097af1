"""Fixtures for the monitoring tests: promtool and Prometheus built from Prometheus's Go module
(tests/support/monitoring/build.py). Imported by the conftest.py of the rungs that use them:
tests/delivery (the rules and queries) and tests/controllers (the live dashboard, on the stack).

A missing binary is built on first use with its progress shown; a failed build errors the
tests that need it, it never skips them.
"""

from __future__ import annotations

import contextlib
import sys

import pytest

from tests.support.monitoring.build import PROMETHEUS, PROMTOOL


def _built(pytestconfig, binary):
    from tests.support.controlplane.build import ensure_built

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
