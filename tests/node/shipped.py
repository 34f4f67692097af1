"""podsweeper's shipped install as a pod on the real node: what test_podsweeper_pod.py and the
seed cleaned by that pod (test_seed_by_its_pod.py) apply, and the pod they make of the
Deployment's template (no Deployment controller and no scheduler run on this world)."""

from __future__ import annotations

import copy
from pathlib import Path

from tests.node import podsweeper_image

REPO = Path(__file__).resolve().parents[2]
OVERLAY = REPO / "knative" / "overlays" / "without-serving"
LIVE = REPO / "knative" / "overlays" / "live-without-serving"  # its Deployment, PODSWEEPER_DRY_RUN=false
NAMESPACE = "podsweeper"
PINGSOURCE_SENDER = "podsweeper-sweep-oidc-sources.knative.dev-pingsource"
AUDIENCE = "podsweeper.dev/function"
# Not applied: no Knative Eventing CRDs here (the sources), no Deployment controller (its pod is
# made from the template).
NOT_APPLIED = {"ApiServerSource", "PingSource", "Deployment"}
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def rendered(overlay: Path = OVERLAY) -> list[dict]:
    from tests.support.tools.kustomize import render

    return render(overlay)


def token_volume(name: str, seconds: int = 3607) -> dict:
    """The volume the ServiceAccount admission plugin adds (kube-api-access-*): the token (for
    `seconds`), the cluster's CA and the namespace, as in-cluster config reads them."""
    namespace = {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}
    return {
        "name": name,
        "projected": {
            "defaultMode": 0o644,
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": seconds}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [namespace]}},
            ],
        },
    }


def pod_from_deployment(deployment: dict, node_name: str) -> dict:
    """The Deployment's pod template as a pod on the node, plus what the ServiceAccount admission
    plugin would add (the kube-api-access volume), the image the local build."""
    template = copy.deepcopy(deployment["spec"]["template"])
    spec = template["spec"]
    (container,) = spec["containers"]
    container["image"] = podsweeper_image.IMAGE
    container["imagePullPolicy"] = "Never"
    volume = "kube-api-access-podsweeper"
    spec["volumes"].append(token_volume(volume))
    container.setdefault("volumeMounts", []).append({"name": volume, "mountPath": SA_MOUNT, "readOnly": True})
    spec["nodeName"] = node_name  # no scheduler in this world
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "podsweeper-0",
            "namespace": deployment["metadata"]["namespace"],
            "labels": template["metadata"]["labels"],
            "annotations": template["metadata"].get("annotations", {}),
        },
        "spec": spec,
    }


def apply_overlay(kube, objects: list[dict]) -> list[str]:
    applied = []
    for obj in objects:
        if obj["kind"] in NOT_APPLIED:
            continue
        obj = copy.deepcopy(obj)
        if obj["kind"] == "Namespace":
            obj["metadata"].setdefault("labels", {})["pod-security.kubernetes.io/enforce"] = "restricted"
        kube.apply(obj)
        applied.append(f"{obj['kind']}/{obj['metadata']['name']}")
    return applied


def local_image(deployment: dict) -> dict:
    """The Deployment with its image the local build (never pulled): the one change made to it."""
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    container["image"], container["imagePullPolicy"] = podsweeper_image.IMAGE, "Never"
    return deployment


def live_deployment() -> dict:
    """The live overlay's Deployment (PODSWEEPER_DRY_RUN=false), its image the local build."""
    (deployment,) = [o for o in rendered(LIVE) if o["kind"] == "Deployment"]
    return local_image(deployment)


def import_image(node) -> podsweeper_image.Archive:
    """podsweeper's image (built from the Dockerfile if its inputs changed) into the node's containerd."""
    image = podsweeper_image.archive()
    node._ctr(["images", "import", "--snapshotter", "overlayfs", str(image.path)], timeout=600)
    return image


def tick(core, pod_ip: str, timeout: float = 30):
    """A PingSource tick POSTed to a podsweeper pod, with a token of the PingSource's identity
    for the function's audience (the ServiceAccount PINGSOURCE_SENDER must exist)."""
    import uuid

    import requests

    token = core.create_namespaced_service_account_token(
        PINGSOURCE_SENDER, NAMESPACE, {"spec": {"audiences": [AUDIENCE], "expirationSeconds": 600}}
    ).status.token
    session = requests.Session()
    session.trust_env = False  # the pod's IP, over the node's veth: never a proxy
    return session.post(
        f"http://{pod_ip}:8080/",
        data=b"{}",
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "ce-specversion": "1.0",
            "ce-id": str(uuid.uuid4()),
            "ce-source": f"/apis/v1/namespaces/{NAMESPACE}/pingsources/podsweeper-sweep",
            "ce-type": "dev.knative.sources.ping",
        },
        timeout=timeout,
    )
