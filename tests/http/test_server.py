"""The served function over real HTTP: 400 for bad input, 503 when the API is down, 2xx otherwise."""

from __future__ import annotations

import json

import pytest
import requests

from tests.fixtures.builders import at, event, job, ping, pod
from tests.http.server import UNREACHABLE_KUBECONFIG, binary_headers, free_port, serve

BODY_LIMIT = 65536


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    kubeconfig = tmp_path_factory.mktemp("kube") / "config"
    kubeconfig.write_text(UNREACHABLE_KUBECONFIG % free_port())
    env = {
        "KUBECONFIG": str(kubeconfig),
        "PODSWEEPER_MAX_BODY_BYTES": str(BODY_LIMIT),
        "PODSWEEPER_EVENT_TIMEOUT_SECONDS": "3",
    }
    with serve(env) as base:
        yield base


def post(url, raw_event, body=None, headers=None):
    body = json.dumps(raw_event["data"]) if body is None else body
    return requests.post(url, data=body, headers=headers or binary_headers(raw_event), timeout=15)


def finished_job_event():
    return event("update", job(conditions=[("Created", at(0)), ("Succeeded", at(30))]), at(30))


def irrelevant_pod_event():
    return event("update", pod(job(), "Worker", 0, phase="Running", owner=False, labels=False), at(1))


def nested(depth):
    return "[" * depth + "]" * depth


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
    ],
)
def test_bad_input_gets_400_and_the_server_keeps_serving(url, name, body, headers):
    raw = irrelevant_pod_event()
    response = post(url, raw, body=body, headers=headers)
    assert response.status_code == 400, (name, response.status_code, response.text)
    assert response.text.count("\n") == 1 and "Traceback" not in response.text
    assert requests.get(f"{url}/healthz", timeout=5).status_code == 200
    assert post(url, raw).status_code == 200


def test_irrelevant_pod_event_is_2xx_without_any_api_call(url):
    # The API is unreachable: any call would have turned into a 503.
    response = post(url, irrelevant_pod_event())
    assert response.status_code == 200 and "not a pod of a training job" in response.json()["note"]


def test_relevant_event_with_unreachable_api_is_503_so_the_source_retries(url):
    response = post(url, finished_job_event())
    assert response.status_code == 503 and "kubernetes api unavailable" in response.text


def test_sweep_with_unreachable_api_is_503(url):
    raw = ping(at(0))
    assert post(url, raw, body="{}").status_code == 503


def test_structured_mode_is_accepted(url):
    raw = irrelevant_pod_event()
    response = requests.post(
        url, data=json.dumps(raw), timeout=10, headers={"Content-Type": "application/cloudevents+json"}
    )
    assert response.status_code == 200


def test_metrics_count_events_by_outcome(url):
    post(url, irrelevant_pod_event())
    text = requests.get(f"{url}/metrics", timeout=5).text
    assert 'podsweeper_events_total{outcome="ignored",type="dev.knative.apiserver.resource.update"}' in text
    assert "podsweeper_event_handling_seconds_bucket" in text


def test_invalid_configuration_fails_the_start():
    with pytest.raises(RuntimeError, match="PODSWEEPER_CRASHLOOP_ACTION"):
        with serve({"PODSWEEPER_CRASHLOOP_ACTION": "explode"}, timeout=20):
            pass
