"""What the API server's authorizer answers for the function's ServiceAccount: a
SubjectAccessReview asked as admin, so nothing is tried for real."""

from __future__ import annotations

FUNCTION_USER = "system:serviceaccount:podsweeper:podsweeper"
FUNCTION_GROUPS = ["system:serviceaccounts", "system:serviceaccounts:podsweeper", "system:authenticated"]


def function_may(api, verb: str, group: str, resource: str, namespace: str = "") -> bool:
    """Whether the function's ServiceAccount may `verb` `resource` of `group` in `namespace`
    ("": cluster-wide, or a cluster-scoped resource); `api` an admin client."""
    from kubernetes import client

    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": FUNCTION_USER,
            "groups": FUNCTION_GROUPS,
            "resourceAttributes": {
                "namespace": namespace,
                "verb": verb,
                "group": group,
                "resource": resource,
            },
        },
    }
    return bool(client.AuthorizationV1Api(api).create_subject_access_review(review).status.allowed)
