"""Fixtures for tests that need the real control plane (tests/support/controlplane), and the
reliability figures summary.

Only control-plane fixtures live here. Everything is imported lazily and the control
plane starts only when a test requests `control_plane` (directly or through another
fixture), so unit tests pay nothing for it.

Every test lives in the folder of its rung and carries that rung's marker (pyproject.toml),
given here from the folder: `-m unit`, `-m "not controllers"`, ... select by rung.

The figures the property, fault, fuzz and security tests fill in (tests/support/figures.py)
are printed and written once at the end of any run that filled some, whichever rungs it ran.
`make test` spreads the test files over workers (pytest-xdist): each worker hands its figures
and its served functions' logs and kept outputs (Events, evidence stores, CloudEvents) to the
run's controller when it ends, and the controller checks all of them for a pod's env value and a
container's log text once the last test has run (tests/support/leaks.py).

A missing binary is built on first use; a failed build raises, so the tests that need
it ERROR with the compiler output. They are never skipped: a silently skipped
integration suite would hide exactly the failures it exists to catch.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
from pathlib import Path

import pytest

from tests.fixtures import facts

TESTS = Path(__file__).resolve().parent


def _load_local_modules() -> None:
    """Import every module of podsweeper and bench before any test runs.

    Hypothesis (6.170) also draws, now and then, a constant taken from the source of the local
    modules loaded in the process (not site-packages, not test files): which of podsweeper's
    modules an earlier test happened to import changed the derandomized property examples (a
    case the generator reached 19 times in 1,000 scenarios alone, 0 times after the unit tests
    in one CI worker). Loaded up front, the pool is the same in every process and every order.
    """
    import importlib
    import pkgutil

    import bench
    import podsweeper

    for package in (podsweeper, bench):
        for found in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if not found.name.endswith("__main__"):
                importlib.import_module(found.name)


_load_local_modules()
# The rungs, cheapest first: each a folder of tests/ and a marker of the same name.
# `node` (a real kubelet, containerd and runc: `make node`) is not in the default run (pyproject.toml).
RUNGS = ("unit", "replay", "apiserver", "controllers", "delivery", "node")

# (group, version, plural) of every training kind, to clean a test namespace of its jobs.
TRAINING_JOB_PLURALS = tuple((k.group, k.versions[0], k.plural) for k in facts.TRAINING_KINDS)


# Each rung's bound on one test's own run (pytest-timeout; fixtures are not counted, see
# pyproject.toml): a test that hangs fails after it instead of spending the rest of the CI
# run's 90 minutes. Sized from the slowest test of each rung in a warm CI run (out/durations.json,
# written by every run: unit 4 s, replay 49 s, apiserver 40 s, controllers 226 s, delivery 43 s)
# with a margin of at least 4x for a busy 2-core machine.
TEST_TIMEOUT = {"unit": 60, "replay": 300, "apiserver": 240, "controllers": 900, "delivery": 300, "node": 300}
# A partial run (make fresh) writes elsewhere, so the main run's times stay what the file shows.
DURATIONS = Path(
    os.environ.get("PODSWEEPER_DURATIONS_FILE")
    or Path(__file__).resolve().parents[1] / "out" / "durations.json"
)
_durations: dict[str, dict[str, float]] = {rung: {} for rung in RUNGS}


def _rung(item_path: Path) -> str:
    return item_path.resolve().relative_to(TESTS).parts[0]


# The longest test files, with their seconds in a warm CI run (out/durations.json, three
# workers). When the run is spread over workers (make test) they are handed out first, longest
# first, so no worker starts a seven-minute file while the others run out of work: the run
# ends near its total over the workers instead of a long file's time after the rest.
LONGEST_FIRST = {
    "tests/controllers/test_disruption.py": 421,
    "tests/replay/test_properties.py": 300,
    "tests/node/test_seed_by_its_pod.py": 240,  # estimated: its first CI run measures it
    "tests/controllers/test_disruption_source.py": 283,
    "tests/controllers/test_real_trainer.py": 184,
    "tests/delivery/test_image.py": 153,
    "tests/controllers/test_real_operator.py": 146,
    "tests/controllers/test_scenarios.py": 128,
    "tests/apiserver/test_faults.py": 117,
}


def pytest_collection_modifyitems(config, items):
    """Mark every test with its rung, from the folder it lives in (and that rung's timeout,
    unless the test names its own); a test outside a rung folder is refused, so the tree keeps
    saying what each test needs. Spread over workers, the longest files go first (a stable
    sort: every file's tests keep their order)."""
    if getattr(config.option, "dist", "no") != "no":
        items.sort(key=lambda item: -LONGEST_FIRST.get(item.nodeid.split("::", 1)[0], 0))
    for item in items:
        rung = _rung(item.path)
        if rung not in RUNGS:
            raise pytest.UsageError(
                f"{item.nodeid}: a test lives in a rung folder, tests/{{{','.join(RUNGS)}}}"
            )
        item.add_marker(getattr(pytest.mark, rung))
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(TEST_TIMEOUT[rung]))


def pytest_runtest_logreport(report):
    """Each test's time (setup, call and teardown: a world's start counts where it happens)."""
    rung = report.nodeid.split("/", 2)[1] if report.nodeid.startswith("tests/") else ""
    if rung in _durations:
        times = _durations[rung]
        times[report.nodeid] = times.get(report.nodeid, 0.0) + report.duration


def durations_summary(terminalreporter) -> None:
    """Each rung's time, printed and kept (out/durations.json, with every test's), so the
    next split of the CI budget is measured, not guessed."""
    import json

    ran = {rung: times for rung, times in _durations.items() if times}
    if not ran:
        return
    terminalreporter.section("time per rung")
    for rung, times in ran.items():
        slowest = max(times, key=times.__getitem__)
        terminalreporter.write_line(
            f"{rung}: {sum(times.values()):.0f} s in {len(times)} tests "
            f"(slowest {times[slowest]:.0f} s, bound {TEST_TIMEOUT[rung]} s: {slowest})"
        )
    DURATIONS.parent.mkdir(exist_ok=True)
    totals = {rung: round(sum(times.values()), 1) for rung, times in ran.items()}
    tests = {rung: {k: round(v, 2) for k, v in times.items()} for rung, times in ran.items()}
    DURATIONS.write_text(json.dumps({"rungs": totals, "tests": tests}, indent=1) + "\n")
    terminalreporter.write_line(f"(written to {DURATIONS})")


@pytest.fixture(autouse=True)
def decision_log_as_it_was():
    """A test that builds a Service (or the sweep command) sets up the decision log's handler,
    once per process as in production; the next test must not inherit it (its lines would
    join, say, the replay's own JSON output)."""
    from podsweeper.report import decision_log

    kept = (list(decision_log.handlers), decision_log.level, decision_log.propagate)
    yield
    decision_log.handlers[:], decision_log.level, decision_log.propagate = kept[0], kept[1], kept[2]


# Read once and taken out of the environment: a pytest a test starts (a collect-only run, a
# seeded bug's run) is not the whole run, and must not inherit the demand.
_LEAKS_REQUIRED = os.environ.pop("PODSWEEPER_LEAKS_REQUIRED", "") == "1"
_worker_logs: list[Path] = []  # the served functions' logs of the run's other workers
_worker_outputs: list[Path] = []  # their kept Events, evidence stores, CloudEvents (leaks.keep)
_leaks_checked: list = []  # what the end-of-run check found (tests.support.leaks.Checked)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """A test worker ended (pytest-xdist, on the controller): take its figures and logs."""
    from tests.support import figures

    out = getattr(node, "workeroutput", {})
    if "figures" in out:
        figures.merge(out["figures"])
    _worker_logs.extend(Path(path) for path in out.get("served_logs", []))
    _worker_outputs.extend(Path(path) for path in out.get("outputs", []))


def pytest_sessionfinish(session, exitstatus):
    """A worker hands its figures, logs and kept outputs on; the run itself (the controller, or
    a run without workers) checks them all once the last test has run (tests/support/leaks.py)
    and fails on any problem found; under PODSWEEPER_LEAKS_REQUIRED=1 (`make test`) also when
    there was nothing of a kind to check."""
    from tests.support import figures, leaks
    from tests.support.harness.served import ALL_LOGS

    config = session.config
    if hasattr(config, "workerinput"):
        config.workeroutput["figures"] = figures.raw()
        config.workeroutput["served_logs"] = [str(path) for path in ALL_LOGS]
        config.workeroutput["outputs"] = [str(path) for path in leaks.OUTPUTS]
        return
    if config.option.collectonly:
        return
    logs = [*ALL_LOGS, *_worker_logs]
    outputs = [*leaks.OUTPUTS, *_worker_outputs]
    required = _LEAKS_REQUIRED
    if not logs and not outputs and not required:
        return
    checked = leaks.check(logs, required=required, outputs=outputs)
    _leaks_checked.append(checked)
    figures.add("security: server logs checked for env values", checked.logs)
    figures.add("security: server log lines checked for env values", checked.lines)
    figures.add("security: decision lines checked for env values", checked.decisions)
    for kind, count in checked.outputs.items():
        figures.add(f"security: {kind}s checked for env values and log text", count)
    if checked.problems:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    from tests.support import figures

    durations_summary(terminalreporter)
    for checked in _leaks_checked:
        terminalreporter.section("secrets: the served functions' logs, checked at the end of the run")
        terminalreporter.write_line(
            f"{checked.logs} logs, {checked.lines} lines, {checked.decisions} decision lines; outputs "
            + ", ".join(f"{count} {kind}" for kind, count in checked.outputs.items())
            + f" ({checked.evidence_with_log_text} evidence stores holding log text where allowed)"
        )
        for problem in checked.problems:
            terminalreporter.write_line(f"FAILED: {problem}", red=True)

    if figures.FIGURES or figures.MEASURED:
        terminalreporter.section("podsweeper reliability figures")
        for name, value in figures.snapshot().items():
            terminalreporter.write_line(f"{name}: {value}")
        figures.write()
        terminalreporter.write_line(f"(written to {figures.OUT})")


@pytest.fixture(scope="session")
def control_plane(pytestconfig):
    """A running ControlPlane (tests/support/controlplane/launcher.py) with CRDs and function RBAC.

    Useful members: ``admin_kubeconfig``, ``function_kubeconfig``, ``kubeconfig(user)``,
    ``write_kubeconfig(path, user)``, ``api_client(user)``, ``url``, ``ca_file``;
    users are "admin", "function" and "source".
    """
    from tests.support.controlplane.build import ETCD, KUBE_APISERVER, ensure_built
    from tests.support.controlplane.launcher import ControlPlane

    if not (ETCD.path.exists() and KUBE_APISERVER.path.exists()):
        # A cold build takes minutes: show its progress instead of a silent pause.
        capman = pytestconfig.pluginmanager.getplugin("capturemanager")
        with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
            ensure_built(ETCD, log=sys.stderr)
            ensure_built(KUBE_APISERVER, log=sys.stderr)
    cp = ControlPlane(log=sys.stderr).start()
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def admin_api(control_plane):
    """A kubernetes.client.ApiClient for the admin user (group system:masters)."""
    api = control_plane.api_client("admin")
    yield api
    api.close()


@pytest.fixture(scope="session")
def function_api(control_plane):
    """A kubernetes.client.ApiClient authenticated as the function's ServiceAccount user."""
    api = control_plane.api_client("function")
    yield api
    api.close()


@pytest.fixture
def namespace(admin_api):
    """A fresh namespace `t-<random>` for one test, deleted after it: the one per-test
    namespace fixture. It is made through `admin_api`: the session's control plane's (above),
    or the one of a module that overrides `admin_api` (the world tests: their own world's).

    Without kube-controller-manager nothing empties a deleted namespace, so teardown
    deletes the pods and training jobs itself; later tests that list cluster-wide then
    do not see earlier tests' leftovers. (On a real world the namespace controller would
    do it anyway.) A kind the API server does not serve (404: MPIJob v1 where the
    mpi-operator's v2beta1 CRD is served instead) has nothing to delete.
    """
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    name = f"t-{secrets.token_hex(4)}"
    core = client.CoreV1Api(admin_api)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    custom = client.CustomObjectsApi(admin_api)
    for group, version, plural in TRAINING_JOB_PLURALS:
        try:
            custom.delete_collection_namespaced_custom_object(group, version, name, plural)
        except ApiException as error:
            if error.status != 404:
                raise
    core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    core.delete_namespace(name)
