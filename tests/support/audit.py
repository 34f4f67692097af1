"""What the function asked the API server to change, from kube-apiserver's own audit log.

The disruption tests judge every delete from the server's side: a killed function cannot
forget to log a delete it made, and a request that reached the server is in this log even if
its client died before the answer. `ControlPlane(audit=True)` logs, at level Request (the
request's body: a DELETE's preconditions, a PATCH's patch), every write the function's user
makes, and at level Metadata its reads (how many requests an event cost); nothing else.
`--audit-log-mode=blocking` writes each event before the answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

WRITES = ("create", "update", "patch", "delete", "deletecollection")
READS = ("get", "list", "watch")


def write_policy(path: Path, username: str) -> Path:
    """The audit policy: the writes of `username` with their bodies, its reads without, once
    each (at the end)."""
    policy = {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived", "ResponseStarted", "Panic"],
        "rules": [
            {"level": "Request", "users": [username], "verbs": list(WRITES)},
            {"level": "Metadata", "users": [username], "verbs": list(READS)},
            {"level": "None"},
        ],
    }
    path.write_text(yaml.safe_dump(policy, sort_keys=False))
    return path


@dataclass(frozen=True)
class Call:
    """One request of the function's as the API server saw it and answered it."""

    verb: str
    resource: str  # "pods", "configmaps", "pytorchjobs", ...
    namespace: str
    name: str
    code: int  # the answer: 200 deleted, 404 already gone, 409 precondition failed, ...
    at: str  # stageTimestamp (RFC 3339, microseconds)
    uid_precondition: str | None  # DELETE only: preconditions.uid of its DeleteOptions
    body: dict | None  # the request object (DeleteOptions, the patch, the ConfigMap)


def writes(log: Path, *, namespace: str | None = None) -> list[Call]:
    """Every completed write in the log, in the order the server finished them."""
    return [r for r in requests(log, namespace=namespace) if r.verb in WRITES]


def requests(log: Path, *, namespace: str | None = None) -> list[Call]:
    """Every completed request of the function's user, reads too (with no body), in the order
    the server finished them; `namespace` keeps those in it (a cluster-wide LIST has none)."""
    found = []
    if not log.exists():
        return found
    for line in log.read_text().splitlines():
        event = json.loads(line)
        if event.get("stage") != "ResponseComplete":
            continue
        ref = event.get("objectRef") or {}
        if namespace is not None and ref.get("namespace") != namespace:
            continue
        body = event.get("requestObject")
        preconditions = ((body or {}).get("preconditions") or {}) if event["verb"] == "delete" else {}
        found.append(
            Call(
                verb=event["verb"],
                resource=ref.get("resource", "")
                + (f"/{ref['subresource']}" if ref.get("subresource") else ""),
                namespace=ref.get("namespace", ""),
                name=ref.get("name", ""),
                code=int((event.get("responseStatus") or {}).get("code") or 0),
                at=event.get("stageTimestamp", ""),
                uid_precondition=preconditions.get("uid"),
                body=body,
            )
        )
    return found


def wrong_deletes(log: Path, namespace: str, named: dict[str, str]) -> list[str]:
    """The function's deletes in `namespace` that the rules did not name, one line each.

    `named` maps the uids the rules name to their names. Wrong: a delete without a uid
    precondition (it could take a pod re-created under the name), or one that removed
    (200) an object whose uid is not named, or the same uid twice."""
    wrong, removed = [], set()
    for write in writes(log, namespace=namespace):
        if write.verb not in ("delete", "deletecollection"):
            continue
        what = f"{write.verb} {write.resource} {write.name} -> {write.code} at {write.at}"
        if write.uid_precondition is None:
            wrong.append(f"{what}: no uid precondition")
        elif write.code == 200 and write.uid_precondition not in named:
            wrong.append(f"{what}: uid {write.uid_precondition} not named by the rules")
        elif write.code == 200 and write.uid_precondition in removed:
            wrong.append(f"{what}: uid {write.uid_precondition} removed twice")
        if write.code == 200:
            removed.add(write.uid_precondition)
    return wrong
