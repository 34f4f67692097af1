"""CloudEvent intake: accepted types, bad input -> BadEvent with a one-line reason."""

from __future__ import annotations

import pytest

from podsweeper.errors import BadEvent
from podsweeper.intake import parse_event
from podsweeper.model import Job, Pod
from podsweeper.triggers import Ignored, ObjectChange, ReferenceChange, SweepRequest
from tests.fixtures import trainer as v2
from tests.fixtures.builders import at, event, job, ping, pod, split
from tests.fixtures.parse import parse_job


def parse(raw):
    return parse_event(*split(raw)).trigger


@pytest.mark.parametrize("verb", ["add", "update", "delete"])
def test_resource_mode_pod_and_job(verb):
    j = job()
    assert isinstance(parse(event(verb, j, at(0))).obj, Job)
    change = parse(event(verb, pod(j, "Worker", 0), at(0)))
    assert isinstance(change, ObjectChange) and isinstance(change.obj, Pod) and change.verb == verb


def test_reference_mode():
    trigger = parse(event("update", job(), at(0), mode="ref"))
    assert isinstance(trigger, ReferenceChange) and trigger.kind.kind == "PyTorchJob"


def test_ping_is_a_sweep():
    assert isinstance(parse(ping(at(0))), SweepRequest)


def test_other_kubernetes_objects_are_irrelevant_not_errors():
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "x"}}
    raw = event("update", job(), at(0))
    raw["data"] = deployment
    assert isinstance(parse(raw), Ignored)


@pytest.mark.parametrize(
    "name, mutate, message",
    [
        ("unknown type", lambda e: e.update(type="com.example.other"), "unknown CloudEvent type"),
        (
            "unknown verb",
            lambda e: e.update(type="dev.knative.apiserver.resource.patch"),
            "unknown CloudEvent type",
        ),
        ("data a list", lambda e: e.update(data=[1, 2]), "not a Kubernetes object"),
        ("data a string", lambda e: e.update(data="hello"), "not a Kubernetes object"),
        ("data missing", lambda e: e.pop("data"), "not a Kubernetes object"),
        ("metadata not an object", lambda e: e["data"].update(metadata=[]), "not a Kubernetes object"),
        ("pod name missing", lambda e: e["data"]["metadata"].pop("name"), "metadata.name"),
        (
            "restartCount a string",
            lambda e: e["data"]["status"].update(containerStatuses=[{"name": "c", "restartCount": "many"}]),
            "restartCount",
        ),
        ("labels a list", lambda e: e["data"]["metadata"].update(labels=["a"]), "labels"),
        ("id missing", lambda e: e.pop("id"), "id"),
    ],
)
def test_bad_input_is_bad_event_with_a_one_line_reason(name, mutate, message):
    raw = event("update", pod(job(), "Worker", 0, phase="Running"), at(0))
    mutate(raw)
    with pytest.raises(BadEvent) as error:
        parse(raw)
    assert message in str(error.value) and "\n" not in str(error.value), name


def test_bad_job_spec_is_bad_event():
    raw = event("update", job(), at(0))
    raw["data"]["spec"]["runPolicy"] = {"backoffLimit": "never"}
    with pytest.raises(BadEvent, match="runPolicy"):
        parse(raw)


def test_a_failed_trainjob_says_why_it_failed():
    """Trainer's DeadlineExceeded is the one Failed reason it never erases (rule
    deadline-exceeded-jobset-running reads it); a running TrainJob says no reason."""
    failed = v2.trainjob(conditions=[("Created", at(0)), ("Failed", at(8))])
    failed["status"]["conditions"][-1]["reason"] = "DeadlineExceeded"
    assert parse_job(failed).failed_reason == "DeadlineExceeded"
    assert parse_job(failed).finished == "Failed"
    assert parse_job(v2.trainjob(conditions=[("Created", at(0))])).failed_reason == ""
