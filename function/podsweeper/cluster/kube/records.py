"""podsweeper's own records in the cluster: a job's finish mark and its evidence store.

Each is a ConfigMap the job owns (not controlled, not blocking its deletion), so it goes
with the job; one nobody would own is never written. A record of an earlier job of the same
name (not yet collected) is not this job's.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from podsweeper.cluster.kube.calls import Calls, Refused, can_exist, core_path
from podsweeper.evidence import decode, encode, store_name
from podsweeper.model import FinishMark, JobRef

EVIDENCE_KEY = "evidence.json"
EVIDENCE_LABEL = "podsweeper.dev/evidence-for"
FINISH_MARK_LABEL = "podsweeper.dev/finished"


def _owned_by(job: JobRef) -> dict[str, Any]:
    """podsweeper's ConfigMaps go with the job (not blocking its deletion, not controlled)."""
    return {
        "apiVersion": job.api_version or job.kind.api_version(job.version),
        "kind": job.kind.kind,
        "name": job.name,
        "uid": job.uid,
        "controller": False,
        "blockOwnerDeletion": False,
    }


def finish_mark_name(job_name: str) -> str:
    return f"podsweeper-finished-{job_name}"[:253]


class Records(Calls):
    def read_finish_mark(self, job: JobRef) -> FinishMark | None:
        name = finish_mark_name(job.name)
        if not can_exist(job.namespace, name):
            return None
        body = self._call(
            f"get finish mark of {job.namespace}/{job.name}",
            "GET",
            core_path("configmaps", job.namespace, name),
        )
        data = (body or {}).get("data") or {}
        owners = ((body or {}).get("metadata") or {}).get("ownerReferences") or []
        if not data.get("condition") or not any(o.get("uid") == job.uid for o in owners):
            return None  # none, or an earlier job's of the same name (not yet collected)
        try:
            at = datetime.fromisoformat(data["at"]) if data.get("at") else None
        except ValueError:
            at = None
        return FinishMark(data["condition"], at, data.get("top_uid", ""))

    def write_finish_mark(self, job: JobRef, mark: FinishMark) -> None:
        data = {
            "condition": mark.condition,
            "at": mark.at.isoformat() if mark.at else "",
            "top_uid": mark.top_uid,
        }
        what = f"write finish mark of {job.namespace}/{job.name}"
        # This finish replaces the one kept, whoever wrote that.
        self._write_owned(job, finish_mark_name(job.name), FINISH_MARK_LABEL, data, what, overwrite=True)

    def read_evidence(self, job: JobRef) -> tuple[list[dict[str, Any]], str] | None:
        if not can_exist(job.namespace, store_name(job.name)):
            return None
        body = self._request(
            f"get evidence of {job.namespace}/{job.name}",
            "GET",
            core_path("configmaps", job.namespace, store_name(job.name)),
        )
        if body is None:
            return None
        store = json.loads(body)
        data = store.get("data") or {}
        return decode(data.get(EVIDENCE_KEY)), str((store.get("metadata") or {}).get("resourceVersion", ""))

    def write_evidence(self, job: JobRef, records: list[dict[str, Any]], version: str | None) -> bool:
        what = f"write evidence of {job.namespace}/{job.name}"
        data = {EVIDENCE_KEY: encode(records)}
        return self._write_owned(job, store_name(job.name), EVIDENCE_LABEL, data, what, version=version)

    def _write_owned(
        self,
        job: JobRef,
        name: str,
        label: str,
        data: dict[str, str],
        what: str,
        version: str | None = None,
        overwrite: bool = False,
    ) -> bool:
        """Create a ConfigMap the job owns, or (at `version`, read before) replace it; False
        when someone else wrote it first (409), or it is gone since. `overwrite`: one that
        exists already at create is replaced, whatever its version."""
        if not job.uid or not can_exist(job.namespace, name):
            return False  # a record nobody owns would never go: keep none
        metadata: dict[str, Any] = {
            "name": name,
            "namespace": job.namespace,
            "labels": {label: job.name[:63]},
            "ownerReferences": [_owned_by(job)],
        }
        if version is not None:
            metadata["resourceVersion"] = version
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}
        one = core_path("configmaps", job.namespace, name)
        try:
            if version is None:
                self._request(what, "POST", core_path("configmaps", job.namespace), body=body)
                return True
            found = self._request(what, "PUT", one, body=body)
            return found is not None
        except Refused:  # 409: written (or created) by someone else since it was read
            if not overwrite:
                return False
        self._request(what, "PUT", one, body=body, conflicts=())
        return True
