"""The HTTP edge, twice: in-process (podsweeper.web.create_app with Flask's test client) and
served exactly as production serves it (tests/support/harness/served.py, over real HTTP).

400 for bad input (and the server keeps serving), 503 when the API is down (the source
retries), 2xx otherwise; GET /healthz and /metrics; 405 for other methods.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import NamedTuple

import pytest
import requests

from podsweeper.config import load_settings
from podsweeper.errors import ConfigError
from podsweeper.service import Service
from podsweeper.web import create_app
from tests.fixtures.builders import at, event, job, ping, pod
from tests.support.harness.served import Served, ServedError, binary_headers, unreachable_kubeconfig

BODY_LIMIT = 65536
TIMEOUT_SECONDS = 3


class Answer(NamedTuple):
    status: int
    text: str
    headers: Mapping[str, str]


class InProcess:
    """The app functions-framework would serve, called through Flask's test client."""

    def __init__(self, kubeconfig):
        # As the served one runs (tests/support/harness/served.py HARNESS_ENV): no sender identity.
        settings = load_settings(
            max_body_bytes=BODY_LIMIT, event_timeout_seconds=TIMEOUT_SECONDS, auth="none"
        )
        self.client = create_app(Service(settings, kubeconfig=str(kubeconfig))).test_client()

    def request(self, method: str, path: str = "/", body=b"", headers=None) -> Answer:
        response = self.client.open(path, method=method, data=body, headers=headers or {})
        return Answer(response.status_code, response.get_data(as_text=True), response.headers)


class OverHttp:
    """The served function, through requests."""

    def __init__(self, served: Served):
        self.url = served.url

    def request(self, method: str, path: str = "/", body=b"", headers=None) -> Answer:
        response = requests.request(method, self.url + path, data=body, headers=headers or {}, timeout=15)
        return Answer(response.status_code, response.text, response.headers)


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory):
    return unreachable_kubeconfig(tmp_path_factory.mktemp("kube"))


@pytest.fixture(scope="module")
def served(kubeconfig, tmp_path_factory):
    env = {
        "KUBECONFIG": str(kubeconfig),
        "PODSWEEPER_MAX_BODY_BYTES": str(BODY_LIMIT),
        "PODSWEEPER_EVENT_TIMEOUT_SECONDS": str(TIMEOUT_SECONDS),
    }
    with Served(env, tmp_path_factory.mktemp("served") / "server.log") as instance:
        yield instance


@pytest.fixture(scope="module", params=["in-process", "served"])
def edge(request, kubeconfig):
    if request.param == "in-process":
        return InProcess(kubeconfig)
    return OverHttp(request.getfixturevalue("served"))


def post(edge, raw_event, body=None, headers=None) -> Answer:
    body = json.dumps(raw_event["data"]) if body is None else body
    return edge.request("POST", "/", body, headers or binary_headers(raw_event))


def finished_job_event():
    return event("update", job(conditions=[("Created", at(0)), ("Succeeded", at(30))]), at(30))


def irrelevant_pod_event():
    return event("update", pod(job(), "Worker", 0, phase="Running", owner=False, labels=False), at(1))


def nested(depth):
    return "[" * depth + "]" * depth


def structured(**changes) -> str:
    """A structured-mode CloudEvent with some attributes replaced (None: set to null)."""
    raw = irrelevant_pod_event()
    raw.update(changes)
    return json.dumps(raw)


STRUCTURED = {"Content-Type": "application/cloudevents+json"}


@pytest.mark.parametrize(
    "name, body, headers",
    [
        ("malformed JSON body", "{not json", None),
        ("empty body", "", None),
        ("non-object JSON", "[1, 2, 3]", None),
        ("JSON string", '"a pod"', None),
        ("deeply nested JSON", nested(20000), None),
        ("oversized body", "x" * (BODY_LIMIT + 10), None),
        ("missing CloudEvent headers", None, {"Content-Type": "application/json"}),
        ("unknown type", None, {**binary_headers(finished_job_event()), "ce-type": "com.example.unknown"}),
        ("wrong specversion", None, {**binary_headers(finished_job_event()), "ce-specversion": "9.9"}),
        (
            "pod with wrong field types",
            json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": 5}}),
            None,
        ),
        # Malformed CloudEvents that functions-framework's own CloudEvent route answered 500.
        ("structured: a list as specversion", structured(specversion=[1]), STRUCTURED),
        ("structured: a null id", structured(id=None), STRUCTURED),
        ("structured: no id", json.dumps({"specversion": "1.0", "source": "s", "type": "t"}), STRUCTURED),
        ("structured: a list as the event", json.dumps([json.loads(structured())]), STRUCTURED),
        (
            "structured: data_base64 not base64",
            structured(data=None, data_base64="!!!not base64"),
            STRUCTURED,
        ),
        ("structured: not JSON", "{not json", STRUCTURED),
    ],
)
def test_bad_input_gets_400_and_the_server_keeps_serving(edge, name, body, headers):
    raw = irrelevant_pod_event()
    response = post(edge, raw, body=body, headers=headers)
    assert response.status == 400, (name, response.status, response.text)
    assert response.text.count("\n") == 1 and "Traceback" not in response.text
    assert edge.request("GET", "/healthz").status == 200
    assert post(edge, raw).status == 200


def test_irrelevant_pod_event_is_2xx_without_any_api_call(edge):
    # The API is unreachable: any call would have turned into a 503.
    response = post(edge, irrelevant_pod_event())
    assert response.status == 200 and response.text == ""
    assert "not a pod of a training job" in response.headers["Podsweeper-Ignored"]


def test_the_reason_an_event_was_set_aside_is_a_printable_header_whatever_the_event_said(edge):
    # The reason quotes the body's own apiVersion and kind: a header must not carry a newline
    # (a response split) nor a character beyond ASCII (the server would fail to write it).
    raw = irrelevant_pod_event()
    raw["data"] = {"apiVersion": "x.example/v1", "kind": "Wid\r\nget\u00e9\u2028", "metadata": {"name": "w"}}
    del raw["apiversion"], raw["kind"]
    response = post(edge, raw)
    reason = response.headers["Podsweeper-Ignored"]
    assert response.status == 200 and response.text == "", response
    assert "x.example/v1/Wid" in reason and "neither a pod" in reason, reason
    assert all(" " <= c <= "~" for c in reason) and "\\xe9" in reason, reason


def test_relevant_event_with_unreachable_api_is_503_so_the_source_retries(edge):
    response = post(edge, finished_job_event())
    assert response.status == 503 and "kubernetes api unavailable" in response.text


def test_sweep_with_unreachable_api_is_503(edge):
    assert post(edge, ping(at(0)), body="{}").status == 503


def test_structured_mode_is_accepted(edge):
    response = edge.request("POST", "/", json.dumps(irrelevant_pod_event()), STRUCTURED)
    assert response.status == 200, response.text


def test_healthz_and_metrics(edge):
    health = edge.request("GET", "/healthz")
    assert health.status == 200 and health.text == "ok\n"
    post(edge, irrelevant_pod_event())
    metrics = edge.request("GET", "/metrics")
    assert metrics.status == 200 and metrics.headers["Content-Type"].startswith("text/plain")
    assert 'podsweeper_events_total{outcome="ignored",type="dev.knative.apiserver.resource.update"}' in (
        metrics.text
    )
    assert "podsweeper_event_handling_seconds_bucket" in metrics.text
    # Every event handled is done: none in flight (the tests' settled decisions() wait on it).
    assert "podsweeper_events_in_flight 0.0" in metrics.text


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH"])
def test_other_methods_on_the_event_path_get_405(edge, method):
    response = edge.request(method, "/")
    assert response.status == 405 and response.headers["Allow"] == "POST", (response.status, response.text)


def test_plain_client_sending_twice_the_limit_gets_the_400_not_a_reset(served):
    """urllib sends the whole body before it reads the answer: the server must drain it."""
    raw = irrelevant_pod_event()
    request = urllib.request.Request(
        served.url, data=b"x" * (2 * BODY_LIMIT), headers=binary_headers(raw), method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as answer:
        urllib.request.urlopen(request, timeout=15)
    assert answer.value.code == 400
    assert "limit" in answer.value.read().decode()
    assert served.healthy()


@pytest.mark.parametrize("where", ["in-process", "served"])
def test_invalid_configuration_fails_the_start_naming_the_variable(where, monkeypatch, tmp_path):
    if where == "in-process":
        monkeypatch.setenv("PODSWEEPER_CRASHLOOP_ACTION", "explode")
        with pytest.raises(ConfigError, match="PODSWEEPER_CRASHLOOP_ACTION"):
            Service.from_environment()
    else:
        with pytest.raises(ServedError, match="PODSWEEPER_CRASHLOOP_ACTION"):
            Served({"PODSWEEPER_CRASHLOOP_ACTION": "explode"}, tmp_path / "server.log").start(timeout=20)
