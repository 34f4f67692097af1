"""Acting on the cluster: deletes and suspends under preconditions, and Warning Events.

A delete names the uid (and, for a pod, the resourceVersion) it decided on, a suspend the
job's uid: an object re-created under the name, or changed since it was read, is refused by
the API (409), never acted on. An Event repeated bumps its count only on new progress, and
only from the version it was read at.
"""

from __future__ import annotations

from typing import Any

from podsweeper import kinds
from podsweeper.cluster.kube.calls import Calls, Refused, core_path, group_path
from podsweeper.cluster.kube.transport import MERGE_PATCH
from podsweeper.decisions import Result
from podsweeper.model import EventRecord, JobRef, Namespace

# On podsweeper's Warning Events: the restart count the last write was about.
PROGRESS_ANNOTATION = "podsweeper.dev/restarts"
# Reads and writes of one Event before giving up on it (each lost to another writer).
EVENT_ATTEMPTS = 3


def _involved(ref: JobRef | Namespace) -> dict[str, str]:
    """What an Event is about. A Namespace's Event is written in that namespace, so its team
    sees it with `kubectl get events -n <namespace>` (the API server requires the
    involvedObject's namespace to be the Event's)."""
    if isinstance(ref, Namespace):
        return {
            "apiVersion": "v1",
            "kind": "Namespace",
            "name": ref.name,
            "namespace": ref.name,
            "uid": ref.uid,
        }
    return {
        "apiVersion": ref.api_version or ref.kind.api_version(ref.version),
        "kind": ref.kind.kind,
        "name": ref.name,
        "namespace": ref.namespace,
        "uid": ref.uid or "",
    }


class Writes(Calls):
    def delete_pod(
        self, namespace: str, name: str, uid: str, resource_version: str = "", force: bool = False
    ) -> Result:
        preconditions = {"uid": uid, **({"resourceVersion": resource_version} if resource_version else {})}
        body: dict[str, Any] = {
            "preconditions": preconditions,
            **({"gracePeriodSeconds": 0} if force else {}),
        }
        try:
            found = self._request(
                f"delete pod {namespace}/{name}", "DELETE", core_path("pods", namespace, name), body=body
            )
        except Refused:  # only 409 gets here: a precondition failed
            return Result.CONFLICT
        return Result.GONE if found is None else Result.DELETED

    def delete_intermediate(
        self, link: kinds.IntermediateKind, namespace: str, name: str, uid: str
    ) -> Result:
        path = group_path(link.group, link.version, link.plural, namespace, name)
        return self._delete_with_chain(f"delete {link.plural} {namespace}/{name}", path, uid)

    def _delete_with_chain(self, what: str, path: str, uid: str, resource_version: str = "") -> Result:
        """Delete what `path` names if its uid is still `uid` (its status, so its
        resourceVersion, changes all the time); Background: the garbage collector removes what
        it controls (JobSets, Jobs, pods) after it."""
        body: dict[str, Any] = {"propagationPolicy": "Background", "preconditions": {"uid": uid}}
        if resource_version:  # a job deleted itself: as it was read (a JobSet's changes all the time)
            body["preconditions"]["resourceVersion"] = resource_version
        try:
            found = self._request(what, "DELETE", path, body=body)
        except Refused:  # only 409 gets here: the uid precondition failed
            return Result.CONFLICT
        return Result.GONE if found is None else Result.DELETED

    def delete_job(self, ref: JobRef, uid: str, resource_version: str = "") -> Result:
        path = group_path(ref.kind.group, ref.version, ref.kind.plural, ref.namespace, ref.name)
        what = f"delete {ref.kind.plural} {ref.namespace}/{ref.name}"
        return self._delete_with_chain(what, path, uid, resource_version)

    def suspend_job(self, ref: JobRef) -> Result:
        # The uid in a merge patch is a precondition: a job re-created under this name has
        # another uid, and the API refuses to change it (409 or 422).
        switch: dict[str, Any] = {"suspend": True}
        for key in reversed(ref.kind.suspend_path[:-1]):
            switch = {key: switch}
        patch = {"metadata": {"uid": ref.uid}, "spec": switch}
        try:
            found = self._request(
                f"suspend {ref.kind.plural} {ref.namespace}/{ref.name}",
                "PATCH",
                group_path(ref.kind.group, ref.version, ref.kind.plural, ref.namespace, ref.name),
                body=patch,
                content_type=MERGE_PATCH,
                conflicts=(409, 422),
            )
        except Refused:
            return Result.CONFLICT
        return Result.GONE if found is None else Result.SUSPENDED

    def record_event(self, event: EventRecord) -> bool:
        ref, stamp = event.involved, event.time.isoformat().replace("+00:00", "Z")
        marks = {PROGRESS_ANNOTATION: str(event.progress)} if event.progress is not None else {}
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": event.name, "namespace": ref.namespace, "annotations": marks},
            "involvedObject": _involved(ref),
            "type": event.type,
            "reason": event.reason,
            "message": event.message,
            "source": {"component": "podsweeper"},
            "reportingComponent": "podsweeper",
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        for _ in range(EVENT_ATTEMPTS):
            try:
                self._call(
                    f"create event {event.name}", "POST", core_path("events", ref.namespace), body=body
                )
                return True
            except Refused:  # 409: the same warning again -> bump its count
                pass
            path = core_path("events", ref.namespace, event.name)
            current = self._call(f"get event {event.name}", "GET", path)
            if current is None:
                continue  # gone since (its TTL): create it again
            meta = current.get("metadata") or {}
            before = (meta.get("annotations") or {}).get(PROGRESS_ANNOTATION)
            if (
                event.progress is not None
                and before is not None
                and before.isdigit()
                and event.progress <= int(before)
            ):
                return False  # nothing new since the last one: its count must not follow our passes
            # The version read is a precondition: another instance (or pass) that wrote this
            # Event since then makes this write 409, and the Event is read and judged again,
            # so one restart count is written once, whoever sees it first.
            patch = {
                "metadata": {"annotations": marks, "resourceVersion": meta.get("resourceVersion")},
                "count": int(current.get("count") or 1) + 1,
                "lastTimestamp": stamp,
                "message": event.message,
            }
            try:
                written = self._call(
                    f"patch event {event.name}", "PATCH", path, body=patch, content_type=MERGE_PATCH
                )
            except Refused:
                continue
            if written is not None:
                return True
        return False
