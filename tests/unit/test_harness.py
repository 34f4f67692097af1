"""The pure parts of the e2e harness and of `podsweeper record` (no control plane needed)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from podsweeper import kinds
from podsweeper.tools.record import guess_plural, make_event, reference, rfc3339, subject_for
from tests.fixtures import builders
from tests.support.adapter.launcher import selector_string, source_config


@pytest.mark.parametrize(
    "kind, plural",
    [
        ("Pod", "pods"),
        ("PyTorchJob", "pytorchjobs"),
        ("XGBoostJob", "xgboostjobs"),
        ("Endpoints", "endpoints"),
        ("NetworkPolicy", "networkpolicies"),
        ("IngressClass", "ingressclasses"),
    ],
)
def test_plural_is_guessed_like_apimachinery(kind, plural):
    assert guess_plural(kind) == plural


def test_every_training_kind_gets_its_real_plural_in_the_subject():
    for kind in kinds.TRAINING_KINDS:
        assert guess_plural(kind.kind) == kind.plural


def test_subject_is_the_adapters_self_link():
    assert subject_for("v1", "Pod", "ns", "p") == "/apis/v1/namespaces/ns/pods/p"
    assert (
        subject_for("kubeflow.org/v1", "TFJob", "ns", "j") == "/apis/kubeflow.org/v1/namespaces/ns/tfjobs/j"
    )


def test_time_is_rfc3339_utc_without_trailing_zeros():
    assert rfc3339(datetime(2026, 1, 2, 3, 4, 5, 120000, tzinfo=UTC)) == "2026-01-02T03:04:05.12Z"
    assert rfc3339(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02T03:04:05Z"


def test_reference_mode_data_is_an_object_reference():
    pod = builders.pod(builders.job(), "Worker", 0)
    assert list(reference(pod).items()) == [
        ("kind", "Pod"),
        ("namespace", "default"),
        ("name", "pytest-worker-0"),
        ("apiVersion", "v1"),
    ]
    event = make_event("delete", pod, "https://127.0.0.1:6443", "Reference")
    assert event["type"] == "dev.knative.apiserver.ref.delete" and event["data"] == reference(pod)


def test_resource_mode_event_matches_the_fixture_builders_format():
    job = builders.job()
    recorded = make_event("update", job, builders.SOURCE)
    built = builders.event("update", job, builders.at(0))
    assert list(recorded) == list(built)
    for key in (
        "type",
        "subject",
        "source",
        "datacontenttype",
        "kind",
        "apiversion",
        "name",
        "namespace",
        "data",
    ):
        assert recorded[key] == built[key], key


def test_label_selectors_become_what_the_controller_hands_the_adapter():
    assert selector_string(None) == ""
    assert selector_string({"matchExpressions": [{"key": "a", "operator": "Exists"}]}) == "a"
    assert (
        selector_string(
            {
                "matchLabels": {"b": "1"},
                "matchExpressions": [
                    {"key": "a", "operator": "In", "values": ["y", "x"]},
                    {"key": "c", "operator": "DoesNotExist"},
                ],
            }
        )
        == "a in (x,y),b=1,!c"
    )


def test_source_config_follows_the_shipped_apiserversource():
    config = source_config(["ns1"], "Reference")
    assert config["namespaces"] == ["ns1"] and config["allNamespaces"] is False
    assert config["mode"] == "Reference"
    gvrs = {(r["gvr"]["Group"], r["gvr"]["Resource"]) for r in config["resources"]}
    pod_selectors = {r.get("selector") for r in config["resources"] if r["gvr"]["Resource"] == "pods"}
    assert pod_selectors == {"training.kubeflow.org/job-name", "jobset.sigs.k8s.io/jobset-name"}
    assert {(k.group, k.plural) for k in kinds.TRAINING_KINDS} <= gvrs
    assert source_config(["ns1"])["mode"] == "Resource"


class _FakeStack:
    """What finish_stacks touches of a Stack, with a part that may have died."""

    def __init__(self, name: str, dead: str = ""):
        self.namespace, self.dead = name, dead
        self.world_kind, self.function, self.adapter = "players", None, None
        self.stopped = self.cleaned = False

    def check_alive(self) -> None:
        if self.dead:
            raise RuntimeError(self.dead)

    def stop(self) -> None:
        self.stopped = True

    def cleanup(self) -> None:
        self.cleaned = True


def test_teardown_fails_when_a_part_died_during_the_test_and_still_stops_every_stack():
    """make_stack's teardown: a function that crashed after the test's last assertion fails
    the test (it was once suppressed); every stack is stopped all the same."""
    import io

    from tests.support.stack.finish import finish_stacks

    stacks = [_FakeStack("a", dead="the function exited: Traceback ..."), _FakeStack("b")]
    with pytest.raises(pytest.fail.Exception, match="the function exited"):
        finish_stacks(stacks, failed=False, log=io.StringIO())
    assert all(s.stopped for s in stacks)
    assert not stacks[0].cleaned, "the dead part's logs are kept"
    healthy = [_FakeStack("c")]
    finish_stacks(healthy, failed=False, log=io.StringIO())
    assert healthy[0].stopped and healthy[0].cleaned
