"""The real client's paginated listings, against a scripted API: a page's token goes on in a
later call, an expired continue token (410) is followed by the one the API server offers, and
a pod both label sets select comes once."""

from __future__ import annotations

import json

import pytest

from podsweeper.cluster.kube import KubeCluster
from podsweeper.cluster.kube.transport import Answer
from podsweeper.errors import ApiUnavailable
from tests.fixtures.builders import job, pod

JOB = job(name="big")
CURRENT = [pod(JOB, "Worker", i) for i in range(4)]
LEGACY_ONLY = pod(job(name="old"), "Worker", 0)
LEGACY_ONLY["metadata"]["labels"] = {"group-name": "kubeflow.org", "job-name": "old"}
BOTH = dict(CURRENT[0], metadata={**CURRENT[0]["metadata"]})
BOTH["metadata"]["labels"] = {
    **CURRENT[0]["metadata"]["labels"],
    "group-name": "kubeflow.org",
    "job-name": "big",
}


def page(items, token=None):
    return Answer(
        200, json.dumps({"kind": "PodList", "metadata": {"continue": token or ""}, "items": items}).encode()
    )


def expired(offered=None):
    status = {"kind": "Status", "status": "Failure", "reason": "Expired", "code": 410}
    if offered is not None:
        status["metadata"] = {"continue": offered}
    return Answer(410, json.dumps(status).encode(), reason="Gone")


class ScriptedApi:
    """Answers LISTs from a script keyed by (label selector, continue token); records asks."""

    def __init__(self, script):
        self.script, self.asked = script, []

    def request(self, method, path, query=None, body=None, content_type="", timeout=None):
        key = (query["labelSelector"], query.get("continue"))
        self.asked.append(key)
        return self.script[key]


CURRENT_SELECTOR = "training.kubeflow.org/job-name"
LEGACY_SELECTOR = "group-name=kubeflow.org,job-name"


def pods_of(pages):
    return [p.name for page_ in pages for p in page_.pods]


def test_a_page_token_goes_on_in_a_later_listing_and_each_pod_comes_once():
    api = ScriptedApi(
        {
            (CURRENT_SELECTOR, None): page([BOTH, CURRENT[1]], "c1"),
            (CURRENT_SELECTOR, "c1"): page(CURRENT[2:]),
            (LEGACY_SELECTOR, None): page([BOTH, LEGACY_ONLY]),
        }
    )
    cluster = KubeCluster(api)
    first = next(iter(cluster.training_pod_pages("default")))
    assert [p.name for p in first.pods] == ["big-worker-0", "big-worker-1"] and first.resume
    rest = list(cluster.training_pod_pages("default", resume=first.resume))
    # big-worker-0 carries both label sets: the legacy LIST finds it again, and it is left out.
    assert pods_of(rest) == ["big-worker-2", "big-worker-3", "old-worker-0"]
    assert rest[-1].resume is None
    assert api.asked == [(CURRENT_SELECTOR, None), (CURRENT_SELECTOR, "c1"), (LEGACY_SELECTOR, None)]


def test_an_expired_token_is_followed_by_the_one_the_api_server_offers():
    api = ScriptedApi(
        {
            (CURRENT_SELECTOR, "stale"): expired(offered="fresh"),
            (CURRENT_SELECTOR, "fresh"): page(CURRENT[2:]),
            (LEGACY_SELECTOR, None): page([]),
        }
    )
    pages = list(KubeCluster(api).training_pod_pages("default", resume="0 stale"))
    assert pods_of(pages) == ["big-worker-2", "big-worker-3"]
    assert api.asked[:2] == [(CURRENT_SELECTOR, "stale"), (CURRENT_SELECTOR, "fresh")]


def test_an_expired_token_without_an_offer_starts_that_listing_again():
    api = ScriptedApi(
        {
            (CURRENT_SELECTOR, "stale"): expired(),
            (CURRENT_SELECTOR, None): page(CURRENT),
            (LEGACY_SELECTOR, None): page([]),
        }
    )
    pages = list(KubeCluster(api).training_pod_pages("default", resume="0 stale"))
    assert pods_of(pages) == [f"big-worker-{i}" for i in range(4)]


def test_a_410_that_is_not_an_expired_token_is_the_api_failing():
    """Only a token the listing was given may expire: a 410 on a first page, or a second one
    in a row, answers 503 (the source retries) rather than looping."""
    api = ScriptedApi({(CURRENT_SELECTOR, None): expired()})
    with pytest.raises(ApiUnavailable, match="410"):
        list(KubeCluster(api).training_pod_pages("default"))
    twice = ScriptedApi(
        {(CURRENT_SELECTOR, "stale"): expired("again"), (CURRENT_SELECTOR, "again"): expired("x")}
    )
    with pytest.raises(ApiUnavailable, match="410"):
        list(KubeCluster(twice).training_pod_pages("default", resume="0 stale"))
