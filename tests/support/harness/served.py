"""The one launcher of the served function: the production serve command on a free port.

SERVE_COMMAND is the command README.md documents and the Dockerfile's CMD runs (from the
repository root, or WORKDIR /app in the image); tests/delivery/test_image.py checks that
all three agree. Tests and the bench add only `--host 127.0.0.1 --port N`, so gunicorn runs
with functions-framework's own settings, as in production.

Output goes to a log file, never to an unread pipe (a full pipe would stall a server that
logs its decisions); the log also yields the decision lines and is checked for secrets.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import requests

from tests.support.harness.ports import free_port
from tests.support.harness.processes import Process, answers_ok, children, memory_kb

ROOT = Path(__file__).resolve().parents[3]

SERVE_COMMAND = (
    "functions-framework",
    "--source",
    "function/main.py",
    "--target",
    "handle",
    "--signature-type",
    "http",
)

# A kubeconfig whose API server is never there (fill in a closed port): any API call fails (503).
UNREACHABLE_KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:%d", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""

# What the Dockerfile's final stage sets that changes how the served process runs (unbuffered
# logs; two malloc arenas, which bound the worker's memory under threads reading large bodies);
# tests/delivery/test_image.py holds the image to it.
IMAGE_ENV = {"PYTHONUNBUFFERED": "1", "MALLOC_ARENA_MAX": "2"}

# What a served test function runs with unless its test says otherwise: live, as overlays/live
# runs it (the code's default is a dry run; a test of the dry run sets PODSWEEPER_DRY_RUN=true),
# no sender identity (the hand-started sources send no token;
# tests/controllers/test_sender_identity.py runs it on) and no minimum interval between sweeps
# (tests tick every 2 s). Knative's kubelet (tests/support/knative) runs the function as shipped
# instead (`as_shipped`): the manifests' own PODSWEEPER_DRY_RUN.
HARNESS_ENV = {
    "PODSWEEPER_DRY_RUN": "false",
    "PODSWEEPER_AUTH": "none",
    "PODSWEEPER_SWEEP_MIN_INTERVAL_SECONDS": "0",
}

# Inherited variables that would change what is served: the function's own configuration,
# in-cluster and caller credentials, functions-framework's gunicorn knobs (production keeps
# their defaults).
_NOT_INHERITED = (
    "KUBECONFIG",
    "KUBERNETES_SERVICE_HOST",
    "WORKERS",
    "THREADS",
    "CLOUD_RUN_TIMEOUT_SECONDS",
    "GUNICORN_LOG_LEVEL",
)

# Every log a served function of this test run wrote: checked for secrets once the run ends (tests/support/leaks.py).
ALL_LOGS: list[Path] = []


def retire_log(path: Path) -> None:
    """A served function's log about to be removed (a stack cleaning up after a passing test):
    check it now as the end of the run would (tests/support/leaks.py), then stop tracking it."""
    from tests.support import leaks

    if path.exists():
        problems = leaks.check([path], required=False).problems
        assert not problems, problems
    if path in ALL_LOGS:
        ALL_LOGS.remove(path)


def decision_lines(text: str) -> list[dict]:
    """The decision lines (one JSON object each) in a podsweeper log, wherever it was read."""
    found = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if isinstance(item, dict) and item.get("msg") == "decision":
                found.append(item)
    return found


class ServedError(RuntimeError):
    """The served function exited or never became healthy; the message carries its log tail."""


def unreachable_kubeconfig(directory: Path) -> Path:
    """Write a kubeconfig pointing at a closed port: an accidental API call answers 503."""
    path = directory / "unreachable.kubeconfig"
    path.write_text(UNREACHABLE_KUBECONFIG % free_port())
    return path


def binary_headers(raw_event: dict) -> dict[str, str]:
    """Binary content mode, as ApiServerSource sends it: ce-* headers, the data as the body."""
    headers = {"Content-Type": "application/json"}
    for key, value in raw_event.items():
        if key not in ("data", "datacontenttype"):
            headers[f"ce-{key}"] = str(value)
    headers["Kn-Namespace"] = "podsweeper"
    return headers


def functions_framework() -> str:
    """The functions-framework script of this interpreter's environment (else PATH)."""
    beside = Path(sys.executable).parent / "functions-framework"
    found = str(beside) if beside.exists() else shutil.which("functions-framework")
    if not found:
        raise ServedError("functions-framework is not installed: pip install -e '.[test]'")
    return found


def serve_argv(port: int, source: Path | None = None) -> list[str]:
    """SERVE_COMMAND on 127.0.0.1:port (run from ROOT); `source` swaps the served file (the
    bench's no-op baseline)."""
    argv = [functions_framework(), *SERVE_COMMAND[1:], "--host", "127.0.0.1", "--port", str(port)]
    if source is not None:
        argv[argv.index("--source") + 1] = str(source)
    return argv


class Served(Process):
    """One served instance: `url`, `port`, `proc`, its log, worker pids and memory.

    `start()` returns once GET /healthz answers 200; use it as a context manager. The process
    is a harness Process: its own session, dies with the test run, its log tail in errors.
    """

    def __init__(
        self,
        env: dict[str, str],
        log_path: Path | None = None,
        *,
        source: Path | None = None,
        name: str = "function",
        as_shipped: bool = False,
    ):
        log_path = log_path or Path(tempfile.mkdtemp(prefix="podsweeper-served-")) / f"{name}.log"
        super().__init__(name, log_path, error=ServedError)
        self.as_shipped = as_shipped  # True: the code's defaults, not HARNESS_ENV
        self.env = dict(env)
        self.source = source
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.started_at = 0.0  # time.perf_counter() just before the process was started

    def environment(self) -> dict[str, str]:
        env = {
            k: v for k, v in os.environ.items() if not k.startswith("PODSWEEPER_") and k not in _NOT_INHERITED
        }
        return {**env, **IMAGE_ENV, **({} if self.as_shipped else HARNESS_ENV), **self.env}

    def _serve(self) -> None:
        if self.log_path not in ALL_LOGS:  # a restart goes on in the same log
            ALL_LOGS.append(self.log_path)
        self.started_at = time.perf_counter()
        self.launch(serve_argv(self.port, self.source), env=self.environment(), cwd=ROOT)

    def start(self, timeout: float = 30.0) -> Served:
        """Start and wait until healthy; a process that exits or stays unhealthy raises ServedError."""
        self._serve()
        try:
            self.wait("answer /healthz", lambda: self.healthy(request_timeout=1), timeout, interval=0.05)
        except BaseException:
            self.stop()
            raise
        return self

    def restart(self, timeout: float = 30.0) -> float:
        """A new instance on the same port, as the Deployment or Knative would start one for the
        same Service; returns the seconds until it answered /healthz. From the main thread:
        the child dies with the thread that started it (processes.die_with_parent)."""
        started = time.monotonic()
        self.stop()
        self._serve()
        self.wait("answer /healthz", lambda: self.healthy(request_timeout=1), timeout, interval=0.05)
        return time.monotonic() - started

    def __enter__(self) -> Served:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- observing it ------------------------------------------------------------------

    def healthy(self, request_timeout: float = 5.0) -> bool:
        return answers_ok(f"{self.url}/healthz", request_timeout)

    def post(self, raw_event: dict, timeout: float = 30.0) -> requests.Response:
        """POST a CloudEvent (structured dict) in binary content mode, as Knative sends it."""
        body = json.dumps(raw_event.get("data"))
        return requests.post(self.url, data=body, headers=binary_headers(raw_event), timeout=timeout)

    @property
    def worker_pids(self) -> list[int]:
        """gunicorn's worker(s) below the functions-framework process (the master)."""
        return children(self.proc.pid) if self.proc is not None else []

    def rss(self) -> int:
        """Resident bytes of the gunicorn worker(s) that handle the requests."""
        return sum(memory_kb(pid).get("VmRSS", 0) * 1024 for pid in self.worker_pids)

    def peak_memory_mb(self) -> dict[str, float]:
        """Peak RSS (VmHWM) in MB of the master and the worker(s)."""
        assert self.proc is not None
        workers = [memory_kb(pid) for pid in self.worker_pids]
        return {
            "master_peak": memory_kb(self.proc.pid).get("VmHWM", 0) / 1024,
            "worker_peak": sum(w.get("VmHWM", 0) for w in workers) / 1024,
            "workers": len(workers),
        }

    def log(self) -> str:
        return self.text()

    def in_flight(self) -> float | None:
        """Events it is handling right now (podsweeper_events_in_flight); None if it does not
        answer (stopped, killed, or busy past a second)."""
        try:
            text = requests.get(f"{self.url}/metrics", timeout=1).text
        except requests.RequestException:
            return None
        found = re.search(r"^podsweeper_events_in_flight (\S+)$", text, re.M)
        return float(found[1]) if found else None

    def wait_settled(self, timeout: float = 15.0) -> None:
        """Return once no event is in flight: the condition, not a quiet spell. Exact once the
        senders are stopped (the adapter, mtping): nothing more can arrive, and every event
        they sent is then handled, its lines logged and its counters counted."""
        count = self._settled(timeout, gone_is_settled=False)
        if count != 0.0:
            raise ServedError(f"{count} event(s) still in flight after {timeout:.0f}s\n{self.tail()}")

    def _settled(self, timeout: float, *, gone_is_settled: bool) -> float | None:
        """Poll podsweeper_events_in_flight until it reads 0 (or None, a function that does not
        answer, when `gone_is_settled`) or `timeout` passes; the last reading."""
        deadline = time.monotonic() + timeout
        while True:
            count = self.in_flight()
            if count == 0.0 or (count is None and gone_is_settled) or time.monotonic() > deadline:
                return count
            time.sleep(0.02)

    def decisions(self, settle: float = 10.0) -> list[dict]:
        """The decision lines logged so far (one JSON object each), once no event is in flight
        (up to `settle` seconds): the function logs a decision after its DELETE has answered,
        so an effect a test has just seen (a pod gone) has its line only once the event that
        made it is done. A function that does not answer is read as its log stands."""
        self._settled(settle, gone_is_settled=True)
        return decision_lines(self.log())
