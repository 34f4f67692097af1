"""Serve the function exactly as production does (functions-framework CLI) on a free port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import requests

from tests.controlplane.launcher import _die_with_parent

ROOT = Path(__file__).resolve().parents[2]

# A kubeconfig whose API server is never there: any API call the function makes fails (503).
UNREACHABLE_KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:%d", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(port: int) -> list[str]:
    binary = Path(sys.executable).parent / "functions-framework"
    return [
        str(binary),
        "--source",
        str(ROOT / "function" / "main.py"),
        "--target",
        "handle",
        "--signature-type",
        "cloudevent",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]


@contextmanager
def serve(env: dict[str, str], timeout: float = 30.0):
    """Yield the base URL of a running function server; stop it afterwards."""
    port = free_port()
    proc = subprocess.Popen(
        server_command(port),
        cwd=ROOT,
        env={**os.environ, **env},
        preexec_fn=_die_with_parent(os.getpid()),  # no orphan if the test run is killed
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"function server exited {proc.returncode}:\n{proc.stdout.read()}")
            try:
                if requests.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("function server did not become healthy")
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def binary_headers(raw_event: dict) -> dict[str, str]:
    """Binary content mode, as ApiServerSource sends: ce-* headers, the data as the body."""
    headers = {"Content-Type": "application/json"}
    for key, value in raw_event.items():
        if key not in ("data", "datacontenttype"):
            headers[f"ce-{key}"] = str(value)
    headers["Kn-Namespace"] = "podsweeper"
    return headers
