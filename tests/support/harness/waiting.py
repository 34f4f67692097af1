"""Polling for a condition in tests against live components."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest


def wait_for(what: str, fn: Callable[[], Any], timeout: float = 60.0, interval: float = 0.1) -> Any:
    """Poll fn until it returns something truthy (and return that); fail with `what` after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
