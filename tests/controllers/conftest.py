"""Fixtures for the controllers rung: the stack (tests/support/stack) on the session's control plane
or on a real world of its own.

`make_stack(world=..., mode=..., env=...)` starts the function and Knative's receive adapter
for one namespace of the test's own; the test must say which world (tests/support/stack):

- "real": the real training operator, garbage collector, scheduler and kwok (tests/support/world), one
  world per module on a control plane of its own (`real_world`); the namespace is
  `stack.namespace`, reached through `stack.admin_api`;
- "players": the session's control plane with no controller; the test plays them (the
  `namespace` fixture of tests/conftest.py). Only for a state no real controller produces.

Everything is stopped at the end of the test, and on failure the tails of their logs are
printed. A function, adapter or world part that died during the test fails its teardown.

Each scenario reports the time from the job's terminal status write to the last pod gone;
the table is printed at the end of the run (it is measured, never asserted).

The world tests (test_world.py, test_trainer_world.py, test_mpi_world.py, test_volcano_world.py,
test_knative_serving.py) start their own World per module and use none of these; the live dashboard test
(test_monitoring_live.py) uses `make_stack` and the Prometheus built for it (`prometheus_binary`).
"""

from __future__ import annotations

import contextlib
import secrets
import sys

import pytest

from tests.support.monitoring.fixtures import prometheus_binary  # noqa: F401
from tests.support.stack.finish import finish_stacks

# Short enough for a test, long enough that a pod created just before its job is deleted is
# still "too young" when the delete event's pass runs and when the test checks it is kept:
# creationTimestamp has whole seconds (a pod can read up to 1 s older than it is), which leaves
# a 7 s window for a 2-core machine shared with the rest of the run (3 s, a 2 s window, flaked
# twice in CI).
ORPHAN_GRACE_SECONDS = 8
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
    from tests.support.controlplane.build import RECEIVE_ADAPTER, ensure_built

    if not RECEIVE_ADAPTER.path.exists():
        capman = pytestconfig.pluginmanager.getplugin("capturemanager")
        with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
            ensure_built(RECEIVE_ADAPTER, log=sys.stderr)
    return RECEIVE_ADAPTER.path


@pytest.fixture(scope="module")
def real_world(receive_adapter):
    """The real world (tests/support/world) on a control plane of its own, shared by a module's tests
    that choose world="real": starting one costs ~20 s. Not on the session's control plane:
    its operator and garbage collector would act on the players' jobs and pods."""
    from tests.support.controlplane.launcher import ControlPlane
    from tests.support.world.launcher import World

    with ControlPlane(log=sys.stderr) as cp, World(cp, log=sys.stderr) as world:
        yield world


@pytest.fixture(scope="module")
def audited_world(request, receive_adapter):
    """A real world per module on a control plane that audits the function's requests
    (tests/support/audit.py: the judge of what it deleted), on the module's NODES kwok nodes
    (default 3). For the tests where the function, the adapter or the control plane fail."""
    from tests.support.controlplane.launcher import ControlPlane
    from tests.support.world.launcher import World

    nodes = getattr(request.module, "NODES", 3)
    with ControlPlane(audit=True, log=sys.stderr) as cp, World(cp, nodes=nodes, log=sys.stderr) as w:
        yield w


@pytest.fixture
def audited_stack(request, audited_world):
    """`make(**Stack kwargs)`: a stack on the module's audited world in a namespace of its own
    (the first of `namespace=` when given: e.g. [own, a shared one])."""
    from tests.support.stack import Stack

    stacks: list[Stack] = []

    def make(**kwargs) -> Stack:
        env = {"PODSWEEPER_ORPHAN_GRACE_SECONDS": str(ORPHAN_GRACE_SECONDS), **kwargs.pop("function_env", {})}
        own = f"d-{secrets.token_hex(4)}"
        namespaces = [own, *kwargs.pop("also", [])]
        stack = Stack(
            audited_world.control_plane, namespaces, world=audited_world, function_env=env, **kwargs
        )
        stacks.append(stack)
        return stack.start()

    yield make
    failed = any(getattr(getattr(request.node, f"rep_{w}", None), "failed", False) for w in ("setup", "call"))
    finish_stacks(stacks, failed)


@pytest.fixture
def make_stack(request, receive_adapter, control_plane, namespace):
    """`make(world=..., mode=..., env=...)` starts a stack (see the module docstring). A "players"
    stack acts in the shared `namespace` fixture's namespace. A "real" one does not, on purpose:
    its namespace is on the module's world (`real_world`, another API server than `admin_api`'s),
    a test may start several of them, and each is made by its Stack and deleted with it
    (finish_stacks) while the world's namespace controller empties it."""
    from tests.support.stack import Stack

    stacks: list[Stack] = []

    def make(*, world: str, mode: str = "Resource", env: dict | None = None) -> Stack:
        function_env = {"PODSWEEPER_ORPHAN_GRACE_SECONDS": str(ORPHAN_GRACE_SECONDS), **(env or {})}
        if world == "real":
            running = request.getfixturevalue("real_world")
            stack = Stack(
                running.control_plane,
                f"r-{secrets.token_hex(4)}",
                world=running,
                mode=mode,
                function_env=function_env,
            )
        elif world == "players":
            stack = Stack(control_plane, namespace, world="players", mode=mode, function_env=function_env)
        else:
            raise ValueError(f"make_stack(world=...) is 'real' or 'players', not {world!r}")
        stacks.append(stack)
        return stack.start()

    yield make
    failed = any(
        getattr(getattr(request.node, f"rep_{when}", None), "failed", False) for when in ("setup", "call")
    )
    finish_stacks(stacks, failed)
