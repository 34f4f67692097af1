"""knative/overlays/trainjob-ttl: the one extra power rule expired-trainjob needs (`delete` on
trainjobs, nothing else) and its setting, checked as written, as rendered, and against the real
API server's authorizer as the function's own user.

The render, server-side dry-run and Knative admission of the overlay are in test_manifests.py
(KUSTOMIZATIONS); this file checks what is special to it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time

import pytest
import yaml

from tests.delivery.test_manifests import KNATIVE, REPO, env_of, ksvc_container, one, rules_table

OVERLAY = "knative/overlays/trainjob-ttl"
RBAC = KNATIVE / "overlays" / "trainjob-ttl" / "trainjobs-rbac.yaml"
SETTING = "PODSWEEPER_TRAINJOB_TTL_SECONDS"
NAME = "podsweeper-trainjob-ttl"
TRAINJOBS = ("trainer.kubeflow.org", "trainjobs")
FUNCTION_SUBJECT = {"kind": "ServiceAccount", "name": "podsweeper", "namespace": "podsweeper"}


def rbac_docs() -> list[dict]:
    return [d for d in yaml.safe_load_all(RBAC.read_text()) if d]


def test_overlay_grants_delete_on_trainjobs_and_nothing_else():
    docs = rbac_docs()
    role = one(docs, "ClusterRole")
    assert role["metadata"]["name"] == NAME
    assert rules_table(role) == {TRAINJOBS: {"delete"}}
    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [FUNCTION_SUBJECT]
    # The base never grants it: the rule is off by default, and so is its power. It reads and
    # suspends TrainJobs (get, list, patch), and deletes nothing in Trainer's group.
    base = one(
        [d for d in yaml.safe_load_all((KNATIVE / "function" / "rbac.yaml").read_text()) if d], "ClusterRole"
    )
    assert rules_table(base)[TRAINJOBS] == {"get", "list", "patch"}
    assert not [
        key for key, verbs in rules_table(base).items() if key[0] == TRAINJOBS[0] and "delete" in verbs
    ]


@pytest.fixture(scope="module")
def renders():
    from tests.support.tools.kustomize import render

    return render(REPO / "knative"), render(REPO / OVERLAY)


def test_overlay_adds_the_setting_and_changes_nothing_else(renders, monkeypatch):
    base, overlay = renders
    by_id = {(o["kind"], o["metadata"]["name"]): o for o in overlay}
    assert set(by_id) == {
        ("Service", "podsweeper"),
        ("ClusterRole", NAME),
        ("ClusterRoleBinding", NAME),
    }
    for kind in ("ClusterRole", "ClusterRoleBinding"):
        assert by_id[(kind, NAME)] == one(rbac_docs(), kind)
    service = json.loads(json.dumps(by_id[("Service", "podsweeper")]))
    env = env_of(ksvc_container([service]))
    assert env[SETTING] == "604800"  # 7 days
    service["spec"]["template"]["spec"]["containers"][0]["env"] = [
        e for e in service["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"] != SETTING
    ]
    assert service == one(base, "Service", "serving.knative.dev")
    assert env["PODSWEEPER_DRY_RUN"] == "true"  # still dry-run: overlays/live is separate

    from podsweeper.config import ENV_PREFIX, load_settings

    for name in list(os.environ):
        if name.startswith(ENV_PREFIX):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert load_settings().trainjob_ttl_seconds == 7 * 24 * 3600


# -- the real authorizer, as the function's user ------------------------------------------------


def status_of(call, *args, **kwargs) -> int:
    from kubernetes.client.rest import ApiException

    try:
        call(*args, **kwargs)
    except ApiException as error:
        return error.status
    return 200


def wait_status(call, wanted: int, timeout: float = 10.0) -> int:
    """The authorizer learns RBAC changes from its informer: allow it a moment."""
    deadline = time.monotonic() + timeout
    while (status := status_of(call)) != wanted and time.monotonic() < deadline:
        time.sleep(0.1)
    return status


def can_delete_trainjobs(probe_api, namespace: str) -> bool:
    """A SelfSubjectAccessReview as the function: asks without deleting anything."""
    from kubernetes import client

    review = client.AuthorizationV1Api(probe_api).create_self_subject_access_review(
        {
            "spec": {
                "resourceAttributes": {
                    "group": TRAINJOBS[0],
                    "resource": TRAINJOBS[1],
                    "verb": "delete",
                    "namespace": namespace,
                }
            }
        }
    )
    return bool(review.status.allowed)


def test_function_deletes_a_trainjob_only_with_the_overlay(function_api, admin_api, renders):
    """Without the overlay the function's DELETE of a TrainJob is refused; with it, the delete
    podsweeper makes (uid precondition, propagationPolicy Background) goes through, a stale uid is
    refused by the precondition, and nothing else on TrainJobs is granted beyond the base."""
    from kubernetes import client

    from tests.support.trainer_objects import TRAINJOB, trainer_namespace

    group, version, plural = TRAINJOB.group, TRAINJOB.versions[0], TRAINJOB.plural
    custom = client.CustomObjectsApi(function_api)

    def delete(ns: str, name: str, uid: str):
        options = client.V1DeleteOptions(
            preconditions=client.V1Preconditions(uid=uid), propagation_policy="Background"
        )
        return custom.delete_namespaced_custom_object(group, version, ns, plural, name, body=options)

    with trainer_namespace(admin_api) as trainer:
        ns = trainer.namespace
        job = trainer.trainjob("expired")
        uid = job["metadata"]["uid"]

        # Without the overlay: refused (the base reads and suspends TrainJobs, never deletes one).
        assert not can_delete_trainjobs(function_api, ns)
        assert status_of(delete, ns, "expired", uid) == 403
        assert status_of(custom.get_namespaced_custom_object, group, version, ns, plural, "expired") == 200

        rbac = client.RbacAuthorizationV1Api(admin_api)
        _, overlay = renders
        role, binding = one(overlay, "ClusterRole"), one(overlay, "ClusterRoleBinding")
        rbac.create_cluster_role(role)
        rbac.create_cluster_role_binding(binding)
        try:
            deadline = time.monotonic() + 10
            while not can_delete_trainjobs(function_api, ns):
                assert time.monotonic() < deadline, "the overlay's grant never showed"
                time.sleep(0.1)
            # A TrainJob re-created under the same name is not deleted: 409, the uid differs.
            stale = "00000000-0000-0000-0000-000000000000"
            assert status_of(delete, ns, "expired", stale) == 409
            assert status_of(delete, ns, "expired", uid) == 200
            assert (
                wait_status(
                    lambda: custom.get_namespaced_custom_object(group, version, ns, plural, "expired"), 404
                )
                == 404
            )

            # delete only: no deletecollection, no create or replace (the base's get, list,
            # patch are all it had before).
            other = trainer.trainjob("other")
            assert (
                status_of(custom.delete_collection_namespaced_custom_object, group, version, ns, plural)
                == 403
            )
            body = {key: other[key] for key in ("apiVersion", "kind", "spec")}
            body["metadata"] = {"name": "made-by-podsweeper"}
            assert status_of(custom.create_namespaced_custom_object, group, version, ns, plural, body) == 403
            assert (
                status_of(custom.replace_namespaced_custom_object, group, version, ns, plural, "other", other)
                == 403
            )
        finally:
            rbac.delete_cluster_role_binding(binding["metadata"]["name"])
            rbac.delete_cluster_role(role["metadata"]["name"])
        # And gone again with the overlay's objects: the base alone never deletes a TrainJob.
        deadline = time.monotonic() + 10
        while can_delete_trainjobs(function_api, ns) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not can_delete_trainjobs(function_api, ns)
        assert status_of(delete, ns, "other", other["metadata"]["uid"]) == 403


def test_documented_live_overlay_with_the_rule_renders(renders, tmp_path):
    """docs/deploy.md's own overlay for running the rule for real (not dry-run), as written
    there: the base, a copy of trainjobs-rbac.yaml, the two settings."""
    from tests.support.tools.kustomize import render

    section = (REPO / "docs" / "deploy.md").read_text().split("## expired-trainjob (opt-in)", 1)[1]
    (snippet,) = [b for b in re.findall(r"```yaml\n(.*?)```", section, re.S) if "trainjobs-rbac.yaml" in b]
    overlay = tmp_path / "my-cluster" / "podsweeper"
    overlay.mkdir(parents=True)
    shutil.copy(RBAC, overlay / "trainjobs-rbac.yaml")
    knative = os.path.relpath(KNATIVE, overlay)
    (overlay / "kustomization.yaml").write_text(snippet.replace("../../podsweeper/knative", knative))
    objects = render(overlay)
    base, _ = renders
    ids = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert ids == {(o["kind"], o["metadata"]["name"]) for o in base} | {
        ("ClusterRole", NAME),
        ("ClusterRoleBinding", NAME),
    }
    env = env_of(ksvc_container(objects))
    assert env["PODSWEEPER_DRY_RUN"] == "false" and env[SETTING] == "604800"
