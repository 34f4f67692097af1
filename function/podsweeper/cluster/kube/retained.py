"""Copies of a job's evidence kept apart from it, before podsweeper deletes the job itself
(rule expired-trainjob): the job's own store is owned by it and goes with it.

A copy is owned by nothing and named by the job's uid (a later job of the same name has its
own). It is a record for people (`podsweeper evidence` reads it once the job is gone): the
function never reads one to decide anything, so a ConfigMap made to look like one misleads no
act. Copies stay until a person deletes them (docs/rules.md says how).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from podsweeper.cluster.base import Retained
from podsweeper.cluster.kube.calls import Calls, Refused, can_exist, core_path
from podsweeper.cluster.kube.records import EVIDENCE_KEY, EVIDENCE_LABEL, REFUSED_FOR_GOOD, label_value
from podsweeper.evidence import Dropped, NotKept, decode, encode
from podsweeper.model import JobRef

RETAINED_LABEL = "podsweeper.dev/retained-evidence"
RETAINED_JOB = "podsweeper.dev/job"  # Kind/name
RETAINED_UID = "podsweeper.dev/job-uid"
RETAINED_AT = "podsweeper.dev/retained-at"


def retained_name(job: JobRef) -> str:
    """A retained copy's name: the job's uid (a later job of the same name has its own)."""
    return f"podsweeper-retained-{job.uid}"


def is_retained_copy(body: dict[str, Any], job: JobRef) -> bool:
    """Whether a ConfigMap, as read, is podsweeper's copy of this job's evidence."""
    metadata = body.get("metadata") or {}
    notes = metadata.get("annotations") or {}
    return (
        (metadata.get("labels") or {}).get(RETAINED_LABEL) == "true"
        and not metadata.get("ownerReferences")
        and notes.get(RETAINED_UID) == job.uid
        and notes.get(RETAINED_JOB) == f"{job.kind.kind}/{job.name}"
    )


class Retaining(Calls):
    def retain_evidence(self, job: JobRef, records: list[dict[str, Any]], at: datetime) -> bool:
        """Write (or bring up to date) the copy of the job's records kept apart from it; False
        when a ConfigMap at its name is not this job's copy. NotKept when refused for good."""
        name = retained_name(job)
        if not job.uid or not can_exist(job.namespace, name):
            return False
        what = f"keep the evidence of {job.namespace}/{job.name} apart from it"
        path = core_path("configmaps", job.namespace, name)
        found = self._call(what, "GET", path)
        if found is not None and not is_retained_copy(found, job):
            raise NotKept(
                Dropped.FOREIGN, f"ConfigMap {job.namespace}/{name} is not podsweeper's copy: left as it is"
            )
        metadata: dict[str, Any] = {
            "name": name,
            "namespace": job.namespace,
            "labels": {RETAINED_LABEL: "true", EVIDENCE_LABEL: label_value(job.name)},
            "annotations": {
                RETAINED_JOB: f"{job.kind.kind}/{job.name}",
                RETAINED_UID: job.uid,
                RETAINED_AT: at.isoformat().replace("+00:00", "Z"),
            },
        }
        if found is not None:
            metadata["resourceVersion"] = str((found.get("metadata") or {}).get("resourceVersion", ""))
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata,
            "data": {EVIDENCE_KEY: encode(records)},
        }
        try:
            if found is None:
                self._request(
                    what,
                    "POST",
                    core_path("configmaps", job.namespace),
                    body=body,
                    conflicts=(409, *REFUSED_FOR_GOOD),
                )
                return True
            return self._request(what, "PUT", path, body=body, conflicts=(409, *REFUSED_FOR_GOOD)) is not None
        except Refused as refused:
            if refused.status == 409:
                return False  # written by someone else since it was read: the next pass again
            detail = f"{what}: API answered {refused.status}: {refused.body[:200].decode(errors='replace')}"
            raise NotKept(Dropped.REFUSED, detail) from None

    def read_retained_evidence(self, namespace: str, name: str) -> list[Retained]:
        """The copies kept apart from deleted jobs of this name, oldest first."""
        if not can_exist(namespace, name):
            return []
        selector = f"{RETAINED_LABEL}=true,{EVIDENCE_LABEL}={label_value(name)}"
        listed = self._call(
            f"list retained evidence of {namespace}/{name}",
            "GET",
            core_path("configmaps", namespace),
            query={"labelSelector": selector},
        )
        copies = []
        for item in (listed or {}).get("items") or []:
            notes = (item.get("metadata") or {}).get("annotations") or {}
            if str(notes.get(RETAINED_JOB, "")).partition("/")[2] != name:
                continue
            records = decode((item.get("data") or {}).get(EVIDENCE_KEY))
            copies.append(
                Retained(str(notes.get(RETAINED_UID, "")), str(notes.get(RETAINED_AT, "")), records)
            )
        return sorted(copies, key=lambda c: c.at)
