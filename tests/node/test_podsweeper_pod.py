"""podsweeper as a pod, from what ships (issue 41, first step): the image built from the
repository's Dockerfile (tests/node/podsweeper_image.py), imported into the real node's containerd,
runs under the container and pod spec of the Deployment in knative/overlays/without-serving as
kustomize renders it (securityContext, readOnlyRootFilesystem, probes, resources, env, its
ServiceAccount, the /tmp emptyDir), in the overlay's namespace labelled
`pod-security.kubernetes.io/enforce: restricted`, so the API server's Pod Security admission checks
the shipped spec. It goes Ready through its own probes (GET /healthz on 8080, the kubelet's), and
reads the API server in-cluster: KUBERNETES_SERVICE_HOST/PORT as the kubelet sets them (the
`kubernetes` Service, 10.0.0.1:443), the ServiceAccount's projected token and kube-root-ca.crt.

The `kubernetes` Service is reached through the real kube-proxy (tests/node/proxy.py: built
from the same k8s.io/kubernetes module as the kubelet, iptables mode, in the node's network
namespace); its endpoint is the node's own address, forwarded to kube-apiserver on the host's
loopback (the test control plane publishes no endpoints: `--endpoint-reconciler-type=none`).
No other Service has a backend; there is no cluster DNS.

Stand-ins, each for what a cluster runs and this world does not (yet):

- the ServiceAccount admission plugin: the test control plane runs without it (no
  kube-controller-manager makes `default` ServiceAccounts there), so the pod is given here the
  `kube-api-access-*` projected volume that plugin adds (token, kube-root-ca.crt, namespace),
  and the namespace the `kube-root-ca.crt` ConfigMap kube-controller-manager's publisher makes.
- the Deployment controller and the scheduler: the pod is made from the Deployment's template
  with spec.nodeName set; the image is the local build (imagePullPolicy Never).
- Knative Eventing's PingSource: the test asks the API server for a token of the PingSource's
  OIDC ServiceAccount (audience podsweeper.dev/function) and POSTs the tick itself, from the host
  to the pod's IP (the host routes the pods' subnet over the node's veth).

The in-cluster proof: the POSTed sweep is answered 200. To answer it podsweeper verifies the
sender's token against the API server's OIDC discovery and JWKS and lists the cluster's pods,
all with its own ServiceAccount's token, through 10.0.0.1:443 (kube-proxy's rule for the
Service counts the connections). (The pod's log was empty in every run so far: the 200 is the
proof, not a log line.)
"""

from __future__ import annotations

import copy
import json
import subprocess
import time
from pathlib import Path

import pytest
from kubernetes import client

from tests.node import podsweeper_image, shipped
from tests.node.shipped import NAMESPACE, OVERLAY, PINGSOURCE_SENDER, REPO, SA_MOUNT
from tests.support.harness.processes import wait_until

pytestmark = pytest.mark.node


def test_podsweeper_runs_from_its_image_ready_and_reads_the_api_in_cluster(real_node, admin_api, request):
    from tests.node.proxy import KubeProxy
    from tests.support.controlplane.launcher import Kube

    timings: dict[str, float] = {}
    cp = real_node.control_plane
    core = client.CoreV1Api(admin_api)

    # 1. The image, from the Dockerfile (cached by its inputs), into the node's containerd.
    started = time.monotonic()
    image = shipped.import_image(real_node)
    timings["image build" if image.built else "image (cached archive)"] = image.seconds
    timings["import"] = time.monotonic() - started - image.seconds
    listed = real_node._ctr(["images", "ls", "-q"]).stdout.split()
    assert any(ref.endswith(podsweeper_image.IMAGE) for ref in listed), listed
    print(
        f"image {image.path} ({image.size_mb:.0f} MB), imported: {[r for r in listed if 'podsweeper:' in r]}"
    )

    # 2. The shipped objects (minus the sources and the Deployment), the namespace restricted.
    objects = shipped.rendered()
    kube = Kube(cp.url, cp.tokens["admin"], cp.ca_file)
    try:
        applied = shipped.apply_overlay(kube, objects)
    finally:
        kube.close()
    print(f"applied from {OVERLAY.relative_to(REPO)}: {applied}")
    ns = core.read_namespace(NAMESPACE)
    assert ns.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
    core.create_namespaced_config_map(
        NAMESPACE,
        {"metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": Path(str(cp.ca_file)).read_text()}},
    )
    core.create_namespaced_service_account(NAMESPACE, {"metadata": {"name": PINGSOURCE_SENDER}})

    # 3. The `kubernetes` Service reachable from pods: kube-proxy (tests/node/proxy.py).
    service = core.read_namespaced_service("kubernetes", "default")
    cluster_ip, port = service.spec.cluster_ip, service.spec.ports[0].port
    proxy = KubeProxy(real_node).start()
    request.addfinalizer(proxy.stop)
    timings.update({f"kube-proxy {k}": v for k, v in proxy.timings.items()})

    # Pod Security admission refuses a pod the restricted level forbids (the check is live).
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    pod = shipped.pod_from_deployment(deployment, real_node.name)
    bad = copy.deepcopy(pod)
    bad["metadata"]["name"] = "podsweeper-privileged"
    bad["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod(NAMESPACE, bad)
    assert refused.value.status == 403 and "violates PodSecurity" in refused.value.body, refused.value.body
    print(f"restricted refuses allowPrivilegeEscalation: {json.loads(refused.value.body)['message']}")

    # 4. The shipped pod, Ready through its probes.
    started = time.monotonic()
    core.create_namespaced_pod(NAMESPACE, pod)

    def ready() -> bool:
        found = core.read_namespaced_pod(pod["metadata"]["name"], NAMESPACE)
        statuses = found.status.container_statuses or []
        for status in statuses:
            if status.state.terminated or status.restart_count:
                raise AssertionError(f"the container exited: {status}\n{_log(core, previous=True)}")
        return any(c.type == "Ready" and c.status == "True" for c in found.status.conditions or [])

    wait_until(
        "podsweeper's pod Ready",
        ready,
        timeout=120,
        check=real_node.check_alive,
        tails=lambda: (
            f"{real_node.tails()}\n--- pod:\n{core.read_namespaced_pod(pod['metadata']['name'], NAMESPACE).status}"
        ),
        interval=0.2,
    )
    timings["pod Ready"] = time.monotonic() - started
    found = core.read_namespaced_pod(pod["metadata"]["name"], NAMESPACE)
    (status,) = found.status.container_statuses
    assert status.image.endswith(podsweeper_image.IMAGE), status.image
    assert found.spec.containers[0].security_context.read_only_root_filesystem is True
    assert found.spec.service_account_name == "podsweeper"
    pod_ip = found.status.pod_ip
    print(f"pod {found.metadata.name} Ready at {pod_ip}; image {status.image_id}")
    # What runc was given (containerd's record of the container): the kubelet's env for the
    # `kubernetes` Service, the image's user, a read-only root, the token mounted.
    info = json.loads(real_node._ctr(["containers", "info", status.container_id.split("://", 1)[1]]).stdout)
    env = dict(e.split("=", 1) for e in info["Spec"]["process"]["env"])
    assert (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]) == (cluster_ip, str(port)), env
    assert info["Spec"]["root"]["readonly"] is True
    assert info["Spec"]["process"]["user"]["uid"] == 65532, info["Spec"]["process"]["user"]
    assert SA_MOUNT in [m["destination"] for m in info["Spec"]["mounts"]]

    # 5. In-cluster: a sweep, from the PingSource's identity, answered 200 after podsweeper read
    #    the issuer's keys and the cluster's pods with its own ServiceAccount token.
    started = time.monotonic()
    answer = shipped.tick(core, pod_ip)
    timings["sweep"] = time.monotonic() - started
    log = _log(core)
    print(f"sweep: HTTP {answer.status_code} {answer.text[:500]!r}\n--- pod log:\n{log[-3000:]}")
    assert answer.status_code == 200, f"{answer.status_code} {answer.text}\n{log}"
    # Its API requests went through the `kubernetes` Service's address: kube-proxy's rule for
    # it counted them (a connection's first packet is NATed).
    rules = subprocess.run(
        real_node._inside(["iptables", "-t", "nat", "-L", "KUBE-SERVICES", "-n", "-v", "-x"]),
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    (rule,) = [
        line for line in rules.splitlines() if f"{cluster_ip} " in line and "default/kubernetes:https" in line
    ]
    assert int(rule.split()[0]) > 0, rules
    print(f"kube-proxy's rule after the sweep: {' '.join(rule.split())}")
    assert proxy.process is not None
    proxy.process.check()  # still running
    noted = [line for line in proxy.process.text().splitlines() if line[:1] in "WE" or "sysctl" in line]
    print("kube-proxy's warnings, errors and sysctls:\n" + "\n".join(noted))
    print("timings: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()))


def _log(core, previous: bool = False) -> str:
    try:
        return core.read_namespaced_pod_log("podsweeper-0", NAMESPACE, previous=previous)
    except client.ApiException as e:
        return f"(no log: {e.status} {e.reason})"


@pytest.fixture(autouse=True)
def _cleanup(real_node, admin_api):
    yield
    core = client.CoreV1Api(admin_api)
    try:
        core.delete_collection_namespaced_pod(NAMESPACE, grace_period_seconds=1)
    except client.ApiException:
        return
    wait_until(
        f"the kubelet to stop the pods of {NAMESPACE}",
        lambda: not core.list_namespaced_pod(NAMESPACE).items,
        timeout=60,
        check=lambda: None,
        tails=lambda: "",
        interval=0.5,
    )
    core.delete_namespace(NAMESPACE)
