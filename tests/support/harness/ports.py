"""The one free-port helper of the tests and the bench."""

from __future__ import annotations

import socket

# Knative's receive adapter always binds its health probes there (tests/support/adapter/launcher.py).
RESERVED = frozenset({8080})


def free_port() -> int:
    """A loopback port that was free a moment ago (the kernel picks it for port 0), never 8080."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in RESERVED:
            return port
