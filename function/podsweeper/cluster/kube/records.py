"""podsweeper's own records in the cluster: a job's finish mark and its evidence store.

Each is a ConfigMap the job owns (not controlled, not blocking its deletion), so it goes
with the job; one nobody would own is never written. A record of an earlier job of the same
name (not yet collected) is not this job's.

podsweeper's own are told by its label (the job's name) and an ownerReference to the job; a
ConfigMap of the same name without them is someone else's: never read as a record, never
replaced (logged and counted: podsweeper_records_dropped_total). A finish mark counts only
if it is podsweeper's, this job's, and not older than the job.

A label and an ownerReference can be written by anyone who may create a ConfigMap in the
namespace, and a finish mark can make podsweeper suspend a TrainJob: so each mark is signed
(HMAC-SHA256 over the job's namespace, name and uid and what the mark says) with a key kept in
a Secret of podsweeper's own namespace (`PODSWEEPER_RECORD_KEY_SECRET`), made on first use. A
mark whose signature does not hold is not podsweeper's. Without the key (its Secret cannot be
read or made) no mark is written or believed: the restarts it would show go unseen.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from datetime import datetime
from enum import Enum
from typing import Any

from podsweeper import metrics
from podsweeper.cluster.kube.calls import Calls, Refused, can_exist, core_path
from podsweeper.errors import ApiUnavailable
from podsweeper.evidence import Dropped, NotKept, decode, encode, store_name
from podsweeper.model import FinishMark, JobRef

EVIDENCE_KEY = "evidence.json"
EVIDENCE_LABEL = "podsweeper.dev/evidence-for"
FINISH_MARK_LABEL = "podsweeper.dev/finished"
# The API refuses these for good (413: too large; 422: invalid, a ConfigMap over 1 MiB):
# retrying the same store would only be refused again.
REFUSED_FOR_GOOD = (413, 422)


class Whose(Enum):
    """Whose a ConfigMap at a record's name is, for one job."""

    THIS_JOB = "this job's"  # podsweeper's label for the job, owned by the job's uid
    EARLIER_JOB = "an earlier job's"  # podsweeper's label, owned only by another job of that name
    FOREIGN = "not podsweeper's"  # anything else: someone else's


def whose(body: dict[str, Any], job: JobRef, label: str) -> Whose:
    """Whose the ConfigMap (an API object, as read) is: podsweeper's record for this job, for
    an earlier job of the same name, or someone else's."""
    metadata = body.get("metadata") or {}
    owners = [o for o in metadata.get("ownerReferences") or [] if isinstance(o, dict)]
    if (metadata.get("labels") or {}).get(label) != label_value(job.name):
        return Whose.FOREIGN
    if not job.uid:  # a person's read by name (`podsweeper evidence`): whichever job of the name owns it
        return Whose.THIS_JOB if any(o.get("name") == job.name for o in owners) else Whose.FOREIGN
    if any(o.get("uid") == job.uid for o in owners):
        return Whose.THIS_JOB
    if owners and all((o.get("kind"), o.get("name")) == (job.kind.kind, job.name) for o in owners):
        return Whose.EARLIER_JOB
    return Whose.FOREIGN


def predates(body: dict[str, Any], created: datetime | None) -> bool:
    """Whether the ConfigMap was made before the job was: then it is not the job's record,
    whatever it says (a mark cannot predate its job). Unknown times: not known to."""
    made = (body.get("metadata") or {}).get("creationTimestamp")
    if created is None or not isinstance(made, str):
        return False
    try:
        return datetime.fromisoformat(made) < created
    except (ValueError, TypeError):  # unreadable, or naive against aware: not podsweeper's
        return True


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


def label_value(name: str) -> str:
    """A job's name as a label value: at most 63 characters, ending in an alphanumeric (a name
    cut at 63 may end in '-' or '.', which the API server refuses in a label)."""
    return name[:63].rstrip("-._")


def finish_mark_name(job_name: str) -> str:
    return f"podsweeper-finished-{job_name}"[:253]


SIGNATURE_KEY = "signature"
KEY_FIELD = "key"
KEY_RETRY_SECONDS = 60.0  # a key that could not be had is asked for again after this


def _signed_text(job: JobRef, data: dict[str, str]) -> bytes:
    """What a finish mark's signature covers: whose it is (the job's uid too) and all it says."""
    parts = (job.namespace, job.name, job.uid or "", data["condition"], data["at"], data["top_uid"])
    return "\n".join(parts).encode()


def sign(key: bytes, job: JobRef, data: dict[str, str]) -> str:
    return hmac.new(key, _signed_text(job, data), hashlib.sha256).hexdigest()


class Records(Calls):
    def _record_key(self) -> bytes | None:
        """The key finish marks are signed with: read from its Secret, made there (random) on
        first use; None when neither can be done (asked again after KEY_RETRY_SECONDS)."""
        ring = self.keyring
        with ring.lock:
            if ring.key is not None or time.monotonic() < ring.retry_at:
                return ring.key
            namespace, name = ring.secret.split("/", 1)
            path = core_path("secrets", namespace, name)
            what = f"read the record key {ring.secret}"
            try:
                found = self._call(what, "GET", path, conflicts=(401, 403))
                if found is None and ring.make:
                    key = base64.b64encode(secrets.token_bytes(32)).decode()
                    secret = {
                        "apiVersion": "v1",
                        "kind": "Secret",
                        "metadata": {"name": name, "namespace": namespace},
                        "type": "Opaque",
                        "data": {KEY_FIELD: base64.b64encode(key.encode()).decode()},
                    }
                    try:
                        self._request(
                            what,
                            "POST",
                            core_path("secrets", namespace),
                            body=secret,
                            conflicts=(401, 403, 404, 409),
                        )
                    except Refused as refused:
                        if refused.status != 409:  # made by another instance meanwhile: read it
                            raise
                    found = self._call(what, "GET", path, conflicts=(401, 403))
                encoded = ((found or {}).get("data") or {}).get(KEY_FIELD)
                ring.key = base64.b64decode(encoded) if encoded else None
            except (Refused, ValueError):
                ring.key = None
            if ring.key is None:
                ring.retry_at = time.monotonic() + KEY_RETRY_SECONDS
                metrics.record_dropped(
                    "record-key", Dropped.UNSIGNED, namespace, name, f"{what}: not to be had"
                )
            return ring.key

    def read_finish_mark(self, job: JobRef, created: datetime | None = None) -> FinishMark | None:
        name = finish_mark_name(job.name)
        if not can_exist(job.namespace, name):
            return None
        body = self._call(
            f"get finish mark of {job.namespace}/{job.name}",
            "GET",
            core_path("configmaps", job.namespace, name),
        )
        if not isinstance(body, dict):
            return None
        data = body.get("data") or {}
        if not data.get("condition") or whose(body, job, FINISH_MARK_LABEL) is not Whose.THIS_JOB:
            return None  # none, an earlier job's of the same name (not yet collected), or not podsweeper's
        if predates(body, created):
            return None  # made before the job: planted, whatever its label and owner say
        key = self._record_key()
        fields = {k: str(data.get(k, "")) for k in ("condition", "at", "top_uid")}
        signature = str(data.get(SIGNATURE_KEY, ""))
        if key is None or not hmac.compare_digest(signature, sign(key, job, fields)):
            return None  # not signed with podsweeper's key: planted, whatever else it says
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
        name = finish_mark_name(job.name)
        key = self._record_key()
        if key is None:
            return  # said and counted by _record_key: a mark nobody can check is not written
        data[SIGNATURE_KEY] = sign(key, job, data)
        if self._write_owned(job, name, FINISH_MARK_LABEL, data, what):
            return
        # One is there already: this finish replaces podsweeper's mark of this job (at the
        # version read: a 409 then is retried with the event), never someone else's, nor an
        # earlier job's (replaced, it would keep that job's creationTimestamp and never count;
        # it goes with that job soon).
        found = self._call(what, "GET", core_path("configmaps", job.namespace, name))
        if not isinstance(found, dict):
            raise ApiUnavailable(f"{what}: it existed, then was gone; the next event writes it")
        owner = whose(found, job, FINISH_MARK_LABEL)
        if owner is not Whose.THIS_JOB:
            reason = Dropped.FOREIGN if owner is Whose.FOREIGN else Dropped.EARLIER
            detail = f"ConfigMap {job.namespace}/{name} is {owner.value}: left as it is"
            metrics.record_dropped("finish-mark", reason, job.namespace, job.name, detail)
            return
        version = str((found.get("metadata") or {}).get("resourceVersion", ""))
        self._write_owned(job, name, FINISH_MARK_LABEL, data, what, version=version, conflicts=())

    def read_evidence(self, job: JobRef) -> tuple[list[dict[str, Any]], str] | None:
        """The job's records and the store's version; an earlier job's store (not collected
        yet): no records, its version (this job's replaces it). NotKept: not podsweeper's."""
        name = store_name(job.name)
        if not can_exist(job.namespace, name):
            return None
        body = self._request(
            f"get evidence of {job.namespace}/{job.name}", "GET", core_path("configmaps", job.namespace, name)
        )
        if body is None:
            return None
        store = json.loads(body)
        version = str((store.get("metadata") or {}).get("resourceVersion", ""))
        owner = whose(store, job, EVIDENCE_LABEL)
        if owner is Whose.FOREIGN:
            raise NotKept(
                Dropped.FOREIGN, f"ConfigMap {job.namespace}/{name} is {owner.value}: left as it is"
            )
        if owner is Whose.EARLIER_JOB:
            return [], version
        return decode((store.get("data") or {}).get(EVIDENCE_KEY)), version

    def write_evidence(self, job: JobRef, records: list[dict[str, Any]], version: str | None) -> bool:
        """NotKept when the API refuses the store for good (too large, invalid)."""
        what = f"write evidence of {job.namespace}/{job.name}"
        data = {EVIDENCE_KEY: encode(records)}
        try:
            return self._write_owned(
                job, store_name(job.name), EVIDENCE_LABEL, data, what, version, (409, *REFUSED_FOR_GOOD)
            )
        except Refused as refused:
            detail = f"{what}: API answered {refused.status}: {refused.body[:200].decode(errors='replace')}"
            raise NotKept(Dropped.REFUSED, detail) from None

    def _write_owned(
        self,
        job: JobRef,
        name: str,
        label: str,
        data: dict[str, str],
        what: str,
        version: str | None = None,
        conflicts: tuple[int, ...] = (409,),
    ) -> bool:
        """Create a ConfigMap the job owns, or (at `version`, read before) replace it; False
        when someone else wrote it first (409), or it is gone since. Any other status in
        `conflicts` is the caller's (Refused)."""
        if not job.uid or not can_exist(job.namespace, name):
            return False  # a record nobody owns would never go: keep none
        metadata: dict[str, Any] = {
            "name": name,
            "namespace": job.namespace,
            "labels": {label: label_value(job.name)},
            "ownerReferences": [_owned_by(job)],
        }
        if version is not None:
            metadata["resourceVersion"] = version
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}
        try:
            if version is None:
                self._request(
                    what, "POST", core_path("configmaps", job.namespace), body=body, conflicts=conflicts
                )
                return True
            found = self._request(
                what, "PUT", core_path("configmaps", job.namespace, name), body=body, conflicts=conflicts
            )
            return found is not None
        except Refused as refused:  # 409: written (or created) by someone else since it was read
            if refused.status != 409:
                raise
            return False
