"""knative/overlays/trainjob-ttl: the one extra power rule expired-trainjob needs (`delete` on
trainjobs, nothing else), against the real API server's authorizer as the function's own user.

The render, server-side dry-run and Knative admission of the overlay are in test_manifests.py
(KUSTOMIZATIONS), what every opt-in overlay shares in test_opt_in_overlays.py; this file checks
what its power does on a real API server.
"""

from __future__ import annotations

import time

from tests.delivery.test_manifests import one
from tests.delivery.test_opt_in_overlays import OPT_INS, status_of, wait_status

TRAINJOBS = ("trainer.kubeflow.org", "trainjobs")
POLICY_SYNC_SECONDS = 30  # the admission policy's informer, as tests/apiserver/test_security.py waits


# -- the real authorizer, as the function's user ------------------------------------------------


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


def test_function_deletes_a_trainjob_only_with_the_overlay(function_api, admin_api):
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
        # Finished, as Trainer writes it: the shipped admission policy lets the function delete
        # only a finished TrainJob (not suspended, owned by nothing).
        job["status"] = {
            "conditions": [
                {
                    "type": "Complete",
                    "status": "True",
                    "reason": "JobsCompleted",
                    "message": "done",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ]
        }
        client.CustomObjectsApi(admin_api).replace_namespaced_custom_object_status(
            group, version, ns, plural, "expired", job
        )

        # Without the overlay: refused (the base reads and suspends TrainJobs, never deletes one).
        assert not can_delete_trainjobs(function_api, ns)
        assert status_of(delete, ns, "expired", uid) == 403
        assert status_of(custom.get_namespaced_custom_object, group, version, ns, plural, "expired") == 200

        rbac = client.RbacAuthorizationV1Api(admin_api)
        docs = OPT_INS["trainjob-ttl"].rbac_docs()
        role, binding = one(docs, "ClusterRole"), one(docs, "ClusterRoleBinding")
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

            # A running one: RBAC now allows the verb, the admission policy refuses it (asked as
            # a dry run until the policy, applied at the control plane's start, is in force).
            def refused_dry() -> bool:
                options = client.V1DeleteOptions(dry_run=["All"])
                return (
                    status_of(
                        custom.delete_namespaced_custom_object,
                        group,
                        version,
                        ns,
                        plural,
                        "other",
                        body=options,
                    )
                    == 403
                )

            deadline = time.monotonic() + POLICY_SYNC_SECONDS
            while not refused_dry():
                assert time.monotonic() < deadline, (
                    "the admission policy never refused a running TrainJob's delete"
                )
                time.sleep(0.2)
            assert status_of(delete, ns, "other", other["metadata"]["uid"]) == 403
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
