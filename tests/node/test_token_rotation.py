"""podsweeper honours the rotation of its ServiceAccount token, on the real node (issue 41:
"reading the API with their ServiceAccount token (in-cluster config, token rotation honoured)").

The kubelet refreshes a projected token at 80% of its lifetime (or after 24 h); the API's
shortest expirationSeconds is 600. The token volume the ServiceAccount admission plugin adds
asks for 3607 s, which kube-apiserver extends to a year by default
(`--service-account-extend-token-expiration`; it extends only a kubelet's 3607-second requests),
so in a test that token would never expire and rotation would prove nothing. Hence:

- the world: NodeWorld(service_accounts=True) with kube-apiserver's
  `--service-account-extend-token-expiration=false` (no token of this world is extended), the
  controller manager's Deployment, ReplicaSet, ServiceAccount and root-CA publisher controllers,
  the scheduler, kube-proxy routing the `kubernetes` Service;
- podsweeper's live Deployment as shipped (`knative/overlays/live-without-serving`, image the
  local build, as in test_podsweeper_deployment.py), one replica, with ONE change: the pod
  template's `automountServiceAccountToken: false` and, in its place, the very volume the
  admission plugin adds (projected: a serviceAccountToken, the `kube-root-ca.crt` ConfigMap's
  `ca.crt`, the downward API's namespace; mode 0644) mounted read-only at
  /var/run/secrets/kubernetes.io/serviceaccount, but with `expirationSeconds: 600`. That is the
  one change because the plugin's volume cannot be given a lifetime: it always asks for 3607 s,
  and without the API's extension that still outlives a test by 50 minutes.

What is asserted, each can fail:

1. the control: a token of the same ServiceAccount made by TokenRequest (600 s) when the pod
   started, and the pod's own first token (read from the kubelet's volume on the host), are
   accepted by the API at first (a SelfSubjectReview: 201) and refused (401) once expired: the
   API of this world enforces the expiry (kube-apiserver validates `exp` with go-jose's leeway
   of 60 s, so "expired" means refused from exp + 60 s on);
2. the kubelet wrote a new token into the pod's volume (its file, polled on the host) before the
   first one expired, and kube-apiserver's `apiserver_request_total` for serviceaccounts/token
   grew by more than the test's own TokenRequests;
3. the pod answered a PingSource tick 200 with a sweep run (the JSON summary, not a skipped
   sweep's note) before, and again after its first token was refused by the API: a sweep lists
   the cluster with the function's token, and an API answer 401 makes the function answer 503
   (function/podsweeper/cluster/kube/calls.py raises ApiUnavailable for any status but 2xx, 404,
   a retried 429 and the conflicts; web.py answers ApiUnavailable 503), so 200 means the function
   read the API with the new token; its log holds no "API answered 401";
4. the container never restarted (restartCount 0): the rotation was honoured by re-reading the
   file (the kubernetes client's in-cluster loader re-reads it every minute, the transport asks
   the client every TOKEN_RECHECK_SECONDS), not by a crash and restart.

12.5-13.5 minutes with the world's start and stop (the test itself 11.3-12.5): the first token's 600 s
and the API's 60 s of leeway are waited out.
"""

from __future__ import annotations

import base64
import json
import sys
import time
from pathlib import Path

import pytest
import requests
from kubernetes import client

from tests.node import shipped
from tests.support.harness.processes import wait_until

# The first token's 600 s and the API's 60 s of leeway are waited out: ~12 min, bound 20.
pytestmark = [pytest.mark.node, pytest.mark.timeout(1200)]

NS = shipped.NAMESPACE
SELECTOR = "app.kubernetes.io/name=podsweeper,app.kubernetes.io/component=function"
TOKEN_SECONDS = 600  # the API's minimum expirationSeconds
VOLUME = "kube-api-access-600s"
LEEWAY = 60.0  # go-jose's jwt.DefaultLeeway, which kube-apiserver's token validation applies to exp


def say(text: str) -> None:
    print(f"\nrotation: {text}", file=sys.stderr, flush=True)


@pytest.fixture(scope="module")
def world(pytestconfig):
    from tests.node.world import started

    with started(
        pytestconfig,
        service_accounts=True,
        apiserver_args=("--service-account-extend-token-expiration=false",),
    ) as world:
        yield world


def short_lived(deployment: dict) -> dict:
    """The one change: the admission plugin's token volume by hand, its token 600 s."""
    deployment["spec"]["replicas"] = 1
    spec = deployment["spec"]["template"]["spec"]
    spec["automountServiceAccountToken"] = False
    spec["volumes"].append(shipped.token_volume(VOLUME, TOKEN_SECONDS))
    (container,) = spec["containers"]
    container.setdefault("volumeMounts", []).append(
        {"name": VOLUME, "mountPath": shipped.SA_MOUNT, "readOnly": True}
    )
    return deployment


def claims(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def review(cp, token: str) -> tuple[int, str]:
    """A SelfSubjectReview with `token`: (status, the username the API saw or its message)."""
    answer = requests.post(
        f"{cp.url}/apis/authentication.k8s.io/v1/selfsubjectreviews",
        json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        headers={"Authorization": f"Bearer {token}"},
        verify=str(cp.ca_file),
        timeout=10,
        proxies={"http": "", "https": ""},
    )
    if answer.status_code == 201:
        return 201, answer.json()["status"]["userInfo"]["username"]
    return answer.status_code, answer.text[:200]


def token_requests(cp) -> float:
    """kube-apiserver's count of created serviceaccounts/token (TokenRequest), all codes 2xx."""
    text = requests.get(
        f"{cp.url}/metrics",
        headers={"Authorization": f"Bearer {cp.tokens['admin']}"},
        verify=str(cp.ca_file),
        timeout=10,
        proxies={"http": "", "https": ""},
    ).text
    total = 0.0
    for line in text.splitlines():
        if (
            line.startswith("apiserver_request_total{")
            and 'resource="serviceaccounts"' in line
            and 'subresource="token"' in line
            and 'verb="POST"' in line
            and 'code="2' in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_the_function_reads_the_api_across_its_token_rotation(world):
    from tests.node.proxy import KubeProxy
    from tests.support.controlplane.launcher import Kube

    cp, node = world.control_plane, world.real_node
    shipped.import_image(node)
    kube = Kube(cp.url, cp.tokens["admin"], cp.ca_file)
    try:
        shipped.apply_overlay(kube, shipped.rendered())
        kube.apply(short_lived(shipped.live_deployment()))
    finally:
        kube.close()
    proxy = KubeProxy(node).start()
    api = cp.api_client("admin")
    core = client.CoreV1Api(api)
    timeline: list[tuple[float, str]] = []

    def mark(what: str, at: float | None = None) -> None:
        timeline.append((time.time() if at is None else at, what))
        say(what)

    try:
        core.create_namespaced_service_account(NS, {"metadata": {"name": shipped.PINGSOURCE_SENDER}})

        def ready():
            for pod in core.list_namespaced_pod(NS, label_selector=SELECTOR).items:
                if any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []):
                    return pod
            return None

        pod = wait_until(
            "the replica Ready",
            ready,
            timeout=180,
            check=world.check_alive,
            tails=lambda: node.tails(),
            interval=0.5,
        )
        name = pod.metadata.name
        assert pod.spec.automount_service_account_token is False
        assert [v.name for v in pod.spec.volumes if v.name.startswith("kube-api-access-")] == [VOLUME]
        (status,) = pod.status.container_statuses
        started = status.state.running.started_at.timestamp()
        mark(f"{name}'s container started", started)
        mark(f"{name} Ready")

        # The pod's token as the kubelet wrote it into the volume (the host sees the kubelet's mounts).
        token_file = (
            Path(node.workdir)
            / "kubelet"
            / "root"
            / "pods"
            / pod.metadata.uid
            / "volumes"
            / "kubernetes.io~projected"
            / VOLUME
            / "token"
        )
        first = token_file.read_text()
        first_claims = claims(first)
        assert first_claims["exp"] - first_claims["iat"] == TOKEN_SECONDS, first_claims  # not extended
        assert first_claims["kubernetes.io"]["pod"]["name"] == name, first_claims
        mark(f"the pod's first token issued (iat), expires at iat + {TOKEN_SECONDS}s", first_claims["iat"])
        timeline.append((first_claims["exp"], "the pod's first token's exp"))
        timeline.append((first_claims["exp"] + LEEWAY, "the pod's first token's exp + the API's leeway"))
        metric_before = token_requests(cp)
        own_requests = 0

        # 1. The control, made now: accepted at first.
        control = core.create_namespaced_service_account_token(
            "podsweeper", NS, {"spec": {"expirationSeconds": TOKEN_SECONDS}}
        ).status.token
        own_requests += 1
        control_claims = claims(control)
        assert control_claims["exp"] - control_claims["iat"] == TOKEN_SECONDS, control_claims
        mark("the control token issued (TokenRequest, 600 s)", control_claims["iat"])
        timeline.append((control_claims["exp"], "the control's exp"))
        for label, token in (("control", control), ("pod's first token", first)):
            answer = review(cp, token)
            assert answer == (201, "system:serviceaccount:podsweeper:podsweeper"), (label, answer)
        mark("the control and the pod's first token accepted (SelfSubjectReview 201)")

        # 3a. A tick answered 200 by a sweep, with the first token.
        answer = shipped.tick(core, pod.status.pod_ip)
        own_requests += 1
        mark(f"tick 1: {answer.status_code} {answer.text.strip()[:200]}")
        assert answer.status_code == 200, answer.text
        assert answer.json().get("sweep") in ("done", "listing"), answer.text

        # 2. Wait out both tokens' expiry and the API's leeway, watching the volume's token file.
        expired = max(first_claims["exp"], control_claims["exp"])
        refreshed: list[tuple[float, dict]] = []
        while time.time() < expired - 5:
            current = token_file.read_text()
            if current != (first if not refreshed else refreshed[-1][1]["raw"]):
                seen = claims(current)
                seen["raw"] = current
                refreshed.append((time.time(), seen))
                mark(
                    f"the kubelet's new token seen in the volume (iat {seen['iat'] - first_claims['iat']:.0f}s "
                    f"after the first's, exp {seen['exp'] - seen['iat']}s later)"
                )
            world.check_alive()
            time.sleep(1.0)
        assert refreshed, f"no new token in {token_file} before the first's expiry"
        assert refreshed[0][0] < first_claims["exp"], "the kubelet refreshed only after the expiry"

        # 1. The control and the pod's first token refused once expired (exp + the API's leeway).
        refusals: dict[str, float] = {}

        def both_refused() -> bool:
            for label, token in (("control", control), ("pod's first token", first)):
                if label not in refusals:
                    code, text = review(cp, token)
                    if code == 401:
                        refusals[label] = time.time()
                        mark(
                            f"the {label} refused: 401 ({time.time() - claims(token)['exp']:.1f}s after its exp)"
                        )
                    else:
                        assert code == 201, (label, code, text)
            return len(refusals) == 2

        wait_until(
            "the expired tokens refused",
            both_refused,
            timeout=(expired + LEEWAY + 30) - time.time(),
            check=world.check_alive,
            tails=lambda: str(refusals),
            interval=1.0,
        )
        # Before exp + leeway the API took them: refused no earlier than their exp (to the second).
        assert refusals["control"] >= control_claims["exp"] - 1, refusals
        assert refusals["pod's first token"] >= first_claims["exp"] - 1, refusals

        # 3b. A tick after the first token is refused by the API: the function reads with the new one.
        answer = shipped.tick(core, pod.status.pod_ip)
        own_requests += 1
        mark(f"tick 2: {answer.status_code} {answer.text.strip()[:200]}")
        log = core.read_namespaced_pod_log(name, NS)
        assert answer.status_code == 200, f"{answer.status_code} {answer.text}\n--- pod log:\n{log[-4000:]}"
        assert answer.json().get("sweep") in ("done", "listing"), answer.text
        assert "API answered 401" not in log, log[-4000:]
        # The volume's token now, still accepted.
        assert review(cp, token_file.read_text())[0] == 201

        # 2. The kubelet asked the API for the new token(s): more TokenRequests than the test's own.
        grown = token_requests(cp) - metric_before
        mark(
            f"apiserver_request_total serviceaccounts/token POST 2xx grew by {grown:.0f} (the test's own: {own_requests})"
        )
        assert grown >= own_requests + len(refreshed), (grown, own_requests, len(refreshed))

        # 4. No restart: the rotation was honoured by re-reading the file.
        (status,) = core.read_namespaced_pod(name, NS).status.container_statuses
        mark(f"restartCount {status.restart_count}")
        assert status.restart_count == 0, status
    finally:
        if timeline:
            zero = min(at for at, _ in timeline)
            lines = "\n".join(
                f"  {at - zero:7.1f}s  {what}" for at, what in sorted(timeline, key=lambda t: t[0])
            )
            print(f"\nrotation: timeline (from the earliest event):\n{lines}", file=sys.stderr, flush=True)
        proxy.stop()
        api.close()
