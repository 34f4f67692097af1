"""Only the sources may speak: Knative Eventing's sender identity, end to end.

One world (real kube-apiserver with its audit log, controller manager, kwok) with Eventing's
real controller and `authentication-oidc: enabled` in config-features (tests/support/knative),
podsweeper installed as docs/deploy.md says (overlays/without-serving: two function replicas
run with the shipped env, so PODSWEEPER_AUTH is the code's default, oidc). In order:

a. the sources get their OIDC ServiceAccounts, the generated adapter its audience; requests
   with no token, a malformed one, a real token of the API server for another audience, or
   for another ServiceAccount, are answered 401 by both replicas, and the function makes no
   API request at all (kube-apiserver's audit log);
b. the real receive adapter's event, with the token it asked for, is accepted: the function
   handles it, having read the issuer's keys from the API server (the audit log shows it);
c. the real PingSource dispatcher's tick, with its token, is accepted too.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
import requests

from podsweeper.config import SHIPPED_AUDIENCE, SHIPPED_SENDERS
from tests.fixtures.builders import at, ping
from tests.support.harness.served import binary_headers
from tests.support.harness.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
INSTALL = "knative/overlays/without-serving"
NS = "podsweeper"
READY = {"SinkProvided": "True", "Deployed": "True", "OIDCIdentityCreated": "True", "Ready": "True"}
ADAPTER_SA = SHIPPED_SENDERS[0].rsplit(":", 1)[1]
PING_SA = SHIPPED_SENDERS[1].rsplit(":", 1)[1]


def say(text: str) -> None:
    print(f"sender identity: {text}", file=sys.stderr, flush=True)


def render() -> list[dict]:
    from tests.support.tools.kustomize import render as kustomize

    return kustomize(ROOT / INSTALL)


@pytest.fixture(scope="module")
def eventing(receive_adapter):
    from tests.support.controlplane.launcher import ControlPlane
    from tests.support.knative.eventing import Eventing
    from tests.support.world.launcher import World

    with ControlPlane(log=sys.stderr, audit=True) as cp, World(cp, log=sys.stderr), Eventing(cp) as ev:
        yield ev


def function_requests(eventing) -> list:
    from tests.support.audit import requests as audited

    return audited(eventing.cp.audit_log)


def replicas(eventing) -> list:
    from tests.support.knative.eventing import function_image

    return eventing.kubelet.running(function_image())


def metric(eventing, name: str, *labels: str) -> float:
    """A counter summed over the running replicas (lines naming every one of `labels`)."""
    total = 0.0
    for c in replicas(eventing):
        for line in requests.get(f"{c.process.url}/metrics", timeout=5).text.splitlines():
            if line.startswith(name + "{") and all(label in line for label in labels):
                total += float(line.rsplit(" ", 1)[1])
    return total


def token(eventing, account: str, audience: str) -> str:
    """A real token of the API server (TokenRequest), as a source would get one."""
    from kubernetes import client

    core = client.CoreV1Api(eventing.admin)
    answer = core.create_namespaced_service_account_token(
        account, NS, {"spec": {"audiences": [audience], "expirationSeconds": 600}}
    )
    return answer.status.token


def test_a_no_token_or_another_audience_or_sender_is_401_and_no_api_request(eventing):
    from kubernetes import client

    from tests.support.knative.eventing import RECEIVE_ADAPTER_IMAGE, function_image

    started = time.monotonic()
    eventing.install([o for o in render() if o["kind"] != "PingSource"])
    source = eventing.wait_conditions("ApiServerSource", "podsweeper", READY, timeout=120)
    assert source["status"]["auth"]["serviceAccountName"] == ADAPTER_SA
    (adapter,) = eventing.kubelet.wait_running(RECEIVE_ADAPTER_IMAGE)
    assert adapter.env["K_AUDIENCE"] == SHIPPED_AUDIENCE
    assert adapter.env["K_OIDC_SERVICE_ACCOUNT"] == ADAPTER_SA
    functions = eventing.kubelet.wait_running(function_image(), count=2)
    assert all("PODSWEEPER_AUTH" not in f.env for f in functions)  # the code's default: oidc
    say(f"source Ready with its OIDC identity {time.monotonic() - started:.1f}s after the apply")

    client.CoreV1Api(eventing.admin).create_namespaced_service_account(NS, {"metadata": {"name": "intruder"}})
    wrong_audience = token(eventing, ADAPTER_SA, "https://kubernetes.default.svc.cluster.local")
    wrong_sender = token(eventing, "intruder", SHIPPED_AUDIENCE)
    before = function_requests(eventing)
    raw = ping(at(0))
    cases = {
        "none": None,
        "malformed": "Bearer not.a.jwt",
        "another audience": f"Bearer {wrong_audience}",
        "another sender": f"Bearer {wrong_sender}",
    }
    for f in functions:
        for case, authorization in cases.items():
            headers = binary_headers(raw)
            if authorization:
                headers["Authorization"] = authorization
            answer = requests.post(f.process.url, data=json.dumps(raw["data"]), headers=headers, timeout=10)
            assert answer.status_code == 401, (case, answer.status_code, answer.text)
    time.sleep(1.0)  # the audit log is written before an answer goes out; a margin all the same
    after = function_requests(eventing)
    assert after == before, [f"{c.verb} {c.resource} {c.name}" for c in after[len(before) :]]
    assert metric(eventing, "podsweeper_auth_refusals_total") == len(cases) * len(functions)
    assert metric(eventing, "podsweeper_events_total") == 0
    say(f"{len(cases) * len(functions)} requests refused; the function's API requests: {len(after)}")


def test_b_the_receive_adapters_event_is_accepted(eventing):
    from kubernetes import client

    refused = metric(eventing, "podsweeper_auth_refusals_total")
    before = len(function_requests(eventing))
    core = client.CoreV1Api(eventing.admin)
    core.create_namespace({"metadata": {"name": "team-oidc"}})
    core.create_namespaced_pod(
        "team-oidc",
        {
            "metadata": {"name": "orphan-worker-0", "labels": {"training.kubeflow.org/job-name": "gone"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        },
    )
    wait_for(
        "a replica handled the adapter's event for the pod",
        lambda: metric(eventing, "podsweeper_events_total", "dev.knative.apiserver.resource.add") >= 1,
        timeout=60,
    )
    assert metric(eventing, "podsweeper_auth_refusals_total") == refused
    read = [c for c in function_requests(eventing)[before:] if c.resource == "" and c.verb == "get"]
    say(f"the function read the issuer's keys: {[(c.verb, c.code) for c in read]}")
    assert read and all(c.code == 200 for c in read), read


def test_c_the_pingsource_dispatchers_tick_is_accepted(eventing):
    from tests.support.knative.eventing import MTPING_IMAGE

    refused = metric(eventing, "podsweeper_auth_refusals_total")
    (ping_source,) = [o for o in render() if o["kind"] == "PingSource"]
    ping_source["spec"]["schedule"] = "*/2 * * * * *"
    started = time.time()
    eventing.install([ping_source])
    source = eventing.wait_conditions("PingSource", "podsweeper-sweep", {"Ready": "True"}, timeout=60)
    assert source["status"]["auth"]["serviceAccountName"] == PING_SA
    assert source["status"]["sinkAudience"] == SHIPPED_AUDIENCE
    (dispatcher,) = eventing.kubelet.wait_running(MTPING_IMAGE)
    dispatcher.process.wait_delivered(after=started, timeout=30)  # acknowledged: 2xx
    assert metric(eventing, "podsweeper_events_total", "dev.knative.sources.ping") >= 1
    assert metric(eventing, "podsweeper_auth_refusals_total") == refused
