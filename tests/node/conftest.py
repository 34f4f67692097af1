"""Fixtures of the node rung (tests/node, `make node`, marker `node`): a fresh control plane that
trusts a real node's CA, the node joined to it (tests/node/node.py), and namespaces whose pods
are stopped by the kubelet before the namespace goes."""

from __future__ import annotations

import contextlib
import secrets
import sys

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """`item.rep_call` etc.: a fixture's teardown knows whether its test failed."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture(scope="module")
def real_node(pytestconfig):
    """A RealNode, Ready, joined to a control plane of its own (started with its apiserver_args).
    Everything missing is installed or built first, with its progress on stderr."""
    from tests.node import build
    from tests.node.node import RealNode
    from tests.support.controlplane.build import ETCD, KUBE_APISERVER, ensure_built
    from tests.support.controlplane.launcher import ControlPlane

    capman = pytestconfig.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
        ensure_built(ETCD, log=sys.stderr)
        ensure_built(KUBE_APISERVER, log=sys.stderr)
        build.ensure_all(log=sys.stderr)
    node = RealNode("podsweeper-node", log=sys.stderr)
    cp = ControlPlane(apiserver_args=node.apiserver_args, log=sys.stderr)
    try:
        cp.start()
        node.start(cp)
        yield node
    finally:
        node.stop()  # idempotent: the last test stops it and checks what was left
        cp.stop()


@pytest.fixture(scope="module")
def admin_api(real_node):
    """The admin client of the node's control plane (tests/conftest.py's `namespace` uses it too)."""
    api = real_node.control_plane.api_client("admin")
    yield api
    api.close()


@pytest.fixture
def node_namespace(admin_api):
    """A fresh namespace; at the end its pods are deleted with a grace of 1 s and the test waits
    until the kubelet has stopped them and deleted them for good (up to 60 s), then it goes."""
    from kubernetes import client

    from tests.support.harness.processes import wait_until

    core = client.CoreV1Api(admin_api)
    name = f"n-{secrets.token_hex(4)}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_collection_namespaced_pod(name, grace_period_seconds=1)
    wait_until(
        f"the kubelet to stop the pods of {name}",
        lambda: not core.list_namespaced_pod(name).items,
        timeout=60,
        check=lambda: None,
        tails=lambda: str([p.metadata.name for p in core.list_namespaced_pod(name).items]),
        interval=0.5,
    )
    core.delete_namespace(name)
