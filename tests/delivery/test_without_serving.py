"""The install without Knative Serving (knative/overlays/without-serving) runs the same function.

The plain Deployment's container is the Knative Service's, field for field, apart from what
Knative itself would add (the probes' port); the sources sink to the v1 Service in front of
it; the Service and the PodDisruptionBudget select exactly the Deployment's pods; and the
rest of the install is the base's, object for object. The real Eventing controller reconciling
it is tests/controllers/test_knative_eventing.py.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installs() -> dict[str, list[dict]]:
    from tests.support.tools.kustomize import render

    return {
        name: render(REPO / path)
        for name, path in {
            "knative": "knative",
            "without": "knative/overlays/without-serving",
            "live": "knative/overlays/live-without-serving",
        }.items()
    }


def by_key(objects: list[dict]) -> dict[tuple[str, str, str], dict]:
    return {(o["apiVersion"], o["kind"], o["metadata"]["name"]): o for o in objects}


def ksvc_template(objects: list[dict]) -> dict:
    return by_key(objects)[("serving.knative.dev/v1", "Service", "podsweeper")]["spec"]["template"]


def deployment(objects: list[dict]) -> dict:
    return by_key(objects)[("apps/v1", "Deployment", "podsweeper")]


def test_the_container_is_the_knative_services_with_the_probe_port_knative_would_fill_in(installs):
    ksvc = copy.deepcopy(ksvc_template(installs["knative"])["spec"]["containers"][0])
    plain = copy.deepcopy(deployment(installs["without"])["spec"]["template"]["spec"]["containers"][0])
    for probe in ("readinessProbe", "livenessProbe"):
        assert plain[probe]["httpGet"].pop("port") == ksvc["ports"][0]["containerPort"] == 8080
    assert plain == ksvc
    pod = deployment(installs["without"])["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == ksvc_template(installs["knative"])["spec"]["serviceAccountName"]
    assert pod["volumes"] == ksvc_template(installs["knative"])["spec"]["volumes"]
    # The scrape annotations, not Knative's autoscaling ones (no autoscaler here).
    annotations = deployment(installs["without"])["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {
        k: v
        for k, v in ksvc_template(installs["knative"])["metadata"]["annotations"].items()
        if "prometheus" in k
    }


def test_two_replicas_a_disruption_budget_and_a_service_that_select_them(installs):
    objects = by_key(installs["without"])
    dep = deployment(installs["without"])
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"] == pod_labels
    svc = objects[("v1", "Service", "podsweeper")]
    assert svc["spec"]["selector"] == pod_labels
    (port,) = svc["spec"]["ports"]
    assert (
        port["port"] == 80
        and port["targetPort"] == dep["spec"]["template"]["spec"]["containers"][0]["ports"][0]["name"]
    )
    pdb = objects[("policy/v1", "PodDisruptionBudget", "podsweeper")]
    assert pdb["spec"]["selector"]["matchLabels"] == pod_labels
    assert pdb["spec"]["minAvailable"] == 1 < dep["spec"]["replicas"]  # a drain never blocks


def test_the_sources_sink_to_the_v1_service_and_the_rest_is_the_base(installs):
    base, without = by_key(installs["knative"]), by_key(installs["without"])
    for kind, name in (("ApiServerSource", "podsweeper"), ("PingSource", "podsweeper-sweep")):
        source = without[("sources.knative.dev/v1", kind, name)]
        assert source["spec"]["sink"] == {
            "ref": {"apiVersion": "v1", "kind": "Service", "name": "podsweeper"},
            "audience": "podsweeper.dev/function",  # the sender identity's, as with Serving
        }
        expected = copy.deepcopy(base[("sources.knative.dev/v1", kind, name)])
        expected["spec"]["sink"] = source["spec"]["sink"]
        assert source == expected, kind
    assert ("serving.knative.dev/v1", "Service", "podsweeper") not in without
    # With Serving the pods are reached through the activator; without, nothing comes that way.
    serving_only = ("networking.k8s.io/v1", "NetworkPolicy", "podsweeper-knative-serving")
    assert serving_only in base and serving_only not in without
    shared = {
        k for k in base if k[1] not in ("ApiServerSource", "PingSource", "Service") and k != serving_only
    }
    assert {k: without[k] for k in shared} == {k: base[k] for k in shared}
    assert set(without) - set(base) == {
        ("apps/v1", "Deployment", "podsweeper"),
        ("v1", "Service", "podsweeper"),
        ("policy/v1", "PodDisruptionBudget", "podsweeper"),
    }


def test_live_without_serving_changes_only_the_dry_run_switch(installs):
    live, without = by_key(installs["live"]), by_key(installs["without"])
    assert {k[1] for k in live} == {"Deployment", "Service", "PodDisruptionBudget"}
    for key in live:
        if key[1] != "Deployment":
            assert live[key] == without[key], key
    live_dep, dry_dep = deployment(installs["live"]), deployment(installs["without"])
    env = live_dep["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env[0] == {"name": "PODSWEEPER_DRY_RUN", "value": "false"}
    expected = copy.deepcopy(dry_dep)
    expected["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] = "false"
    assert live_dep == expected
