"""knative/overlays/stuck-terminating: the one extra power rule stuck-terminating needs (`get`
on nodes, nothing else), against the real API server's authorizer as the function's own user.

The render, server-side dry-run and Knative admission of the overlay are in test_manifests.py
(KUSTOMIZATIONS), what every opt-in overlay shares in test_opt_in_overlays.py; this file checks
what its power does on a real API server.
"""

from __future__ import annotations

import uuid

import pytest

from tests.delivery.test_manifests import one
from tests.delivery.test_opt_in_overlays import OPT_INS, status_of, wait_status

# -- the real authorizer, as the function's user ------------------------------------------------


@pytest.fixture
def node(admin_api):
    """A Node object on the session's control plane (no kubelet: nothing ever runs there)."""
    from kubernetes import client

    core = client.CoreV1Api(admin_api)
    name = f"stuck-rbac-{uuid.uuid4().hex[:8]}"
    core.create_node({"metadata": {"name": name}})
    yield name
    core.delete_node(name)


def test_function_reads_a_node_only_with_the_overlay(control_plane, function_api, admin_api, node):
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
    docs = OPT_INS["stuck-terminating"].rbac_docs()
    role, binding = one(docs, "ClusterRole"), one(docs, "ClusterRoleBinding")
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
