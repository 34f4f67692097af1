"""knative/overlays/stuck-terminating: the one extra power rule stuck-terminating needs (`get`
on nodes, nothing else) and its setting, checked as written, as rendered, and against the real
API server's authorizer as the function's own user.

The render, server-side dry-run and Knative admission of the overlay are in test_manifests.py
(KUSTOMIZATIONS); this file checks what is special to it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid

import pytest
import yaml

from tests.delivery.test_manifests import KNATIVE, REPO, env_of, ksvc_container, one, rules_table

OVERLAY = "knative/overlays/stuck-terminating"
RBAC = KNATIVE / "overlays" / "stuck-terminating" / "nodes-rbac.yaml"
SETTING = "PODSWEEPER_STUCK_TERMINATING_SECONDS"
FUNCTION_SUBJECT = {"kind": "ServiceAccount", "name": "podsweeper", "namespace": "podsweeper"}


def rbac_docs() -> list[dict]:
    return [d for d in yaml.safe_load_all(RBAC.read_text()) if d]


def test_overlay_grants_get_on_nodes_and_nothing_else():
    docs = rbac_docs()
    role = one(docs, "ClusterRole")
    assert rules_table(role) == {("", "nodes"): {"get"}}
    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [FUNCTION_SUBJECT]
    # The base never grants it: the rule is off by default, and so is its power.
    base = one(
        [d for d in yaml.safe_load_all((KNATIVE / "function" / "rbac.yaml").read_text()) if d], "ClusterRole"
    )
    assert not any(resource == "nodes" for _, resource in rules_table(base))


@pytest.fixture(scope="module")
def renders():
    from tests.support.tools.kustomize import render

    return render(REPO / "knative"), render(REPO / OVERLAY)


def test_overlay_adds_the_setting_and_changes_nothing_else(renders, monkeypatch):
    base, overlay = renders
    by_id = {(o["kind"], o["metadata"]["name"]): o for o in overlay}
    assert set(by_id) == {
        ("Service", "podsweeper"),
        ("ClusterRole", "podsweeper-stuck-terminating"),
        ("ClusterRoleBinding", "podsweeper-stuck-terminating"),
    }
    for kind in ("ClusterRole", "ClusterRoleBinding"):
        assert by_id[(kind, "podsweeper-stuck-terminating")] == one(rbac_docs(), kind)
    service = json.loads(json.dumps(by_id[("Service", "podsweeper")]))
    env = env_of(ksvc_container([service]))
    assert env[SETTING] == "300"
    service["spec"]["template"]["spec"]["containers"][0]["env"] = [
        e for e in service["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"] != SETTING
    ]
    assert service == one(base, "Service", "serving.knative.dev")
    assert env["PODSWEEPER_DRY_RUN"] == "true"  # still dry-run: overlays/live is separate

    from podsweeper.config import ENV_PREFIX, load_settings

    for name in list(os.environ):
        if name.startswith(ENV_PREFIX):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert load_settings().stuck_terminating_seconds == 300


# -- the real authorizer, as the function's user ------------------------------------------------


def status_of(call, *args, **kwargs) -> int:
    from kubernetes.client.rest import ApiException

    try:
        call(*args, **kwargs)
    except ApiException as error:
        return error.status
    return 200


@pytest.fixture
def node(admin_api):
    """A Node object on the session's control plane (no kubelet: nothing ever runs there)."""
    from kubernetes import client

    core = client.CoreV1Api(admin_api)
    name = f"stuck-rbac-{uuid.uuid4().hex[:8]}"
    core.create_node({"metadata": {"name": name}})
    yield name
    core.delete_node(name)


def wait_status(call, wanted: int, timeout: float = 10.0) -> int:
    """The authorizer learns RBAC changes from its informer: allow it a moment."""
    deadline = time.monotonic() + timeout
    while (status := status_of(call)) != wanted and time.monotonic() < deadline:
        time.sleep(0.1)
    return status


def test_function_reads_a_node_only_with_the_overlay(control_plane, function_api, admin_api, node, renders):
    from kubernetes import client

    from podsweeper.cluster.kube import KubeCluster, load_api
    from podsweeper.errors import ApiUnavailable
    from podsweeper.model import NodeReady

    core = client.CoreV1Api(function_api)
    cluster = KubeCluster(load_api(str(control_plane.function_kubeconfig)))

    # Without the overlay: refused, and get_node says so (the sweep then answers 503).
    assert status_of(core.read_node, node) == 403
    with pytest.raises(ApiUnavailable, match="403"):
        cluster.get_node(node)

    rbac = client.RbacAuthorizationV1Api(admin_api)
    _, overlay = renders
    role, binding = one(overlay, "ClusterRole"), one(overlay, "ClusterRoleBinding")
    rbac.create_cluster_role(role)
    rbac.create_cluster_role_binding(binding)
    try:
        assert wait_status(lambda: core.read_node(node), 200) == 200
        found = cluster.get_node(node)
        assert found is not None and (found.name, found.ready) == (node, NodeReady.UNKNOWN)  # no kubelet
        assert cluster.get_node(f"{node}-gone") is None  # 404: the node is gone

        # get only: no list or watch, nothing that changes a node.
        assert status_of(core.list_node) == 403
        assert status_of(core.list_node, watch=True, timeout_seconds=1) == 403
        label = {"metadata": {"labels": {"touched": "yes"}}}
        assert status_of(core.patch_node, node, label) == 403
        assert status_of(core.patch_node_status, node, {"status": {"conditions": []}}) == 403
        assert status_of(core.delete_node, node) == 403
        assert status_of(core.create_node, {"metadata": {"name": f"{node}-new"}}) == 403
    finally:
        rbac.delete_cluster_role_binding(binding["metadata"]["name"])
        rbac.delete_cluster_role(role["metadata"]["name"])
    # And gone again with the overlay's objects: the base alone never reads nodes.
    assert wait_status(lambda: core.read_node(node), 403) == 403


def test_documented_live_overlay_with_the_rule_renders(renders, tmp_path):
    """docs/deploy.md's own overlay for running the rule for real (not dry-run), as written
    there: the base, a copy of nodes-rbac.yaml, the two settings."""
    from tests.support.tools.kustomize import render

    section = (REPO / "docs" / "deploy.md").read_text().split("## stuck-terminating (opt-in)", 1)[1]
    (snippet,) = [b for b in re.findall(r"```yaml\n(.*?)```", section, re.S) if "nodes-rbac.yaml" in b]
    overlay = tmp_path / "my-cluster" / "podsweeper"
    overlay.mkdir(parents=True)
    shutil.copy(RBAC, overlay / "nodes-rbac.yaml")
    knative = os.path.relpath(KNATIVE, overlay)
    (overlay / "kustomization.yaml").write_text(snippet.replace("../../podsweeper/knative", knative))
    objects = render(overlay)
    base, _ = renders
    ids = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert ids == {(o["kind"], o["metadata"]["name"]) for o in base} | {
        ("ClusterRole", "podsweeper-stuck-terminating"),
        ("ClusterRoleBinding", "podsweeper-stuck-terminating"),
    }
    env = env_of(ksvc_container(objects))
    assert env["PODSWEEPER_DRY_RUN"] == "false" and env[SETTING] == "300"
