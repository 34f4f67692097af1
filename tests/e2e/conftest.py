"""Fixtures for the e2e tests: the stack (tests/stack) on the session's control plane.

`make_stack(mode=..., env=...)` starts the function and Knative's receive adapter for the
test's own namespace (the `namespace` fixture of tests/conftest.py); everything is stopped
at the end of the test, and on failure the tails of their logs are printed.

Each scenario reports the time from the job's terminal status write to the last pod gone;
the table is printed at the end of the run (it is measured, never asserted).
"""

from __future__ import annotations

import contextlib
import sys

import pytest

# Short enough for a test, long enough that a pod created just before its job is deleted
# is still "too young" when the delete event arrives (creationTimestamp has 1 s resolution).
ORPHAN_GRACE_SECONDS = 3
TIMINGS: list[tuple[str, str]] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


def pytest_terminal_summary(terminalreporter):
    if not TIMINGS:
        return
    terminalreporter.section("podsweeper e2e: job's terminal status write -> last pod gone")
    width = max(len(name) for name, _ in TIMINGS)
    for name, text in TIMINGS:
        terminalreporter.write_line(f"{name:<{width}}  {text}")


@pytest.fixture
def timings(request):
    """`timings(label, removal, note="")` records and prints one scenario's measurement."""

    def add(label: str, removal, note: str = "") -> None:
        if removal.last_gone is None:
            text = f"NOT all gone after {removal.polls} polls: {removal.remaining()}"
        else:
            text = (
                f"first delete seen {removal.first_terminating * 1000:7.1f} ms, "
                f"last pod gone {removal.last_gone * 1000:7.1f} ms "
                f"({len(removal.names)} pods, {removal.polls} polls)"
            )
        if note:
            text += f"  [{note}]"
        TIMINGS.append((label, text))
        print(f"\ntiming {label}: {text}", file=sys.stderr, flush=True)

    return add


@pytest.fixture
def core(admin_api):
    from kubernetes import client

    return client.CoreV1Api(admin_api)


@pytest.fixture(scope="session")
def receive_adapter(pytestconfig):
    """The adapter binary, built on first use with its progress shown (a cold build takes
    minutes); a failed build errors the tests that need it, it never skips them."""
    from tests.controlplane.build import RECEIVE_ADAPTER, ensure_built

    if not RECEIVE_ADAPTER.path.exists():
        capman = pytestconfig.pluginmanager.getplugin("capturemanager")
        with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
            ensure_built(RECEIVE_ADAPTER, log=sys.stderr)
    return RECEIVE_ADAPTER.path


@pytest.fixture
def make_stack(request, receive_adapter, control_plane, namespace):
    from tests.stack import Stack

    stacks: list[Stack] = []

    def make(mode: str = "Resource", env: dict | None = None) -> Stack:
        function_env = {"PODSWEEPER_ORPHAN_GRACE_SECONDS": str(ORPHAN_GRACE_SECONDS), **(env or {})}
        stack = Stack(control_plane, namespace, world="players", mode=mode, function_env=function_env)
        stacks.append(stack)
        return stack.start()

    yield make
    failed = any(
        getattr(getattr(request.node, f"rep_{when}", None), "failed", False) for when in ("setup", "call")
    )
    for stack in stacks:
        with contextlib.suppress(Exception):
            stack.check_alive()
        stack.stop()
        if failed:
            print(
                f"\n--- function log ({stack.function.log_path if stack.function else '-'}):", file=sys.stderr
            )
            if stack.function is not None:
                print(
                    "\n".join(stack.function.log_path.read_text(errors="replace").splitlines()[-60:]),
                    file=sys.stderr,
                )
            if stack.adapter is not None:
                print(
                    f"--- adapter log ({stack.adapter.log_path}):\n{stack.adapter.tail(40)}", file=sys.stderr
                )
        else:
            stack.cleanup()
