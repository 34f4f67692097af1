"""Making a kwok node lost, as the stuck-terminating e2e and the Kueue facts both need it.

kwok v0.8.0 keeps simulating a node it manages, so the Node is deleted (kwok forgets it and
its pods' stages) and created again without kwok's annotation, with the Ready condition and
the taints kube-controller-manager's node lifecycle controller would leave on a lost node
(tests/support/world/README.md, "Making a kwok node lost").
"""

from __future__ import annotations

from datetime import UTC, datetime

from tests.support.harness.waiting import wait_for

KWOK_ANNOTATION = ("kwok.x-k8s.io/node", "fake")  # the world's kwok manages nodes with it
UNREACHABLE = "node.kubernetes.io/unreachable"
_READY = {
    "Unknown": ("NodeStatusUnknown", "Kubelet stopped posting node status."),
    "False": ("KubeletNotReady", "container runtime network not ready"),
}


def node_body(name: str, *, kwok: bool) -> dict:
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}
    metadata: dict = {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}}
    if kwok:
        metadata["annotations"] = {KWOK_ANNOTATION[0]: KWOK_ANNOTATION[1]}
    return {"apiVersion": "v1", "kind": "Node", "metadata": metadata, "status": {"capacity": resources}}


def lose(core, name: str, *, ready: str = "Unknown", taint: str | None = UNREACHABLE) -> datetime:
    """Delete the Node and create it as node lifecycle leaves a lost one: Ready `ready`
    ("Unknown" or "False"), tainted `taint` (NoSchedule and NoExecute; None: no taint).
    Returns when it was made so, to the second."""
    from kubernetes.client.rest import ApiException

    core.delete_node(name)

    def gone() -> bool:
        try:
            core.read_node(name)
        except ApiException as error:
            return error.status == 404
        return False

    wait_for(f"node {name} deleted", gone, timeout=10)
    body = node_body(name, kwok=False)
    if taint:
        body["spec"] = {
            "taints": [{"key": taint, "effect": effect} for effect in ("NoSchedule", "NoExecute")]
        }
    core.create_node(body)
    return set_ready(core, name, ready)


def set_ready(core, name: str, status: str) -> datetime:
    """Write the Node's Ready condition as node lifecycle does; returns its transition time."""
    at = datetime.now(UTC).replace(microsecond=0)
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    reason, message = _READY[status]
    condition = {
        "type": "Ready",
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
    }
    core.patch_node_status(name, {"status": {"conditions": [condition]}})
    return at
