"""Fixtures for the delivery rung: promtool and Prometheus for the monitoring rules and queries.

The deploy tests use the session's control plane (tests/conftest.py); the container and browser
tests install what they need themselves (tests/support/tools).
"""

from tests.support.monitoring.fixtures import prometheus_binary, promtool  # noqa: F401
