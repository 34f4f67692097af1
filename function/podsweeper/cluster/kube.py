"""The real cluster, through the official kubernetes client.

Every call is bounded by the event's deadline, reads raw JSON (`_preload_content=False`)
and goes through the same typed edge as event payloads. Failures become ApiUnavailable
(-> 503, the source retries); 404 and 409 on delete mean "already handled".
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from podsweeper import kinds
from podsweeper.cluster.ratelimit import RateLimiter
from podsweeper.config import Settings
from podsweeper.decisions import Result
from podsweeper.errors import ApiUnavailable, BadEvent
from podsweeper.evidence import decode, encode, store_name
from podsweeper.model import EventRecord, FinishMark, Job, JobRef, Node, NodeReady, Pod, Workload
from podsweeper.objects.jobs import decode_job
from podsweeper.objects.nodes import decode_node
from podsweeper.objects.pages import parse_job_page, parse_pod_page, parse_workload_page
from podsweeper.objects.pods import decode_pod
from podsweeper.objects.workloads import decode_workload
from podsweeper.ownership import CHAIN_POD_SELECTORS, TRAINING_POD_SELECTORS, job_pod_selectors

log = logging.getLogger("podsweeper.cluster")

PAGE_SIZE = 500
EVIDENCE_KEY = "evidence.json"
EVIDENCE_LABEL = "podsweeper.dev/evidence-for"
FINISH_MARK_LABEL = "podsweeper.dev/finished"
# On podsweeper's Warning Events: the restart count the last write was about.
PROGRESS_ANNOTATION = "podsweeper.dev/restarts"
T = TypeVar("T")
# Longest Retry-After we wait out inside one event (and only if the deadline allows).
MAX_RETRY_AFTER_WAIT = 2.0


def load_api_client(kubeconfig: str | None = None, connections: int = 16) -> client.ApiClient:
    """In-cluster config inside a pod, else KUBECONFIG / ~/.kube/config. Never calls the API.

    `connections`: the pool size, at least as many as requests in flight at once (concurrent
    deletes), so none is opened and thrown away per request.
    """
    configuration = client.Configuration()
    configuration.connection_pool_maxsize = max(connections, 4)
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)
    else:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    configuration.retries = 0  # one try per call: the event source does the retrying
    return client.ApiClient(configuration)


def connect(settings: Settings, kubeconfig: str | None = None) -> KubeCluster:
    """The real cluster as the settings say: pool sized for the concurrent deletes, one rate
    limiter for every request this instance makes."""
    api = load_api_client(kubeconfig, connections=settings.delete_concurrency + 4)
    return KubeCluster(api, limiter=RateLimiter(settings.kube_api_qps, settings.kube_api_burst))


# Names the API server accepts (apimachinery validation). A name outside them cannot exist:
# asking for it only earns a 400, or with "/", "..", "%2F" a request for another URL. Such
# names come only from hostile or broken payloads; they read as "not there".
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def _can_exist(namespace: str, name: str) -> bool:
    """Could a namespaced object with this namespace and name exist at all?"""
    return (
        len(namespace) <= 63
        and _DNS_LABEL.fullmatch(namespace) is not None
        and len(name) <= 253
        and _DNS_SUBDOMAIN.fullmatch(name) is not None
    )


def _can_label(namespace: str, job_name: str) -> bool:
    """Could pods in this namespace carry this job name as a label value?"""
    return (
        len(namespace) <= 63
        and _DNS_LABEL.fullmatch(namespace) is not None
        and len(job_name) <= 63
        and _LABEL_VALUE.fullmatch(job_name) is not None
    )


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


def _retry_after(error: ApiException) -> float | None:
    value = (error.headers or {}).get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


@dataclass
class KubeCluster:
    api: client.ApiClient
    deadline: float | None = None  # time.monotonic() value; None = unbounded (CLI sweep)
    limiter: RateLimiter | None = None  # shared by every view of this cluster

    def __post_init__(self) -> None:
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    def bounded(self, deadline: float) -> KubeCluster:
        """A view of this cluster whose calls all end by `deadline` (shares the connection pool)."""
        view = KubeCluster.__new__(KubeCluster)
        view.api, view.deadline, view.core, view.custom = self.api, deadline, self.core, self.custom
        view.limiter = self.limiter
        return view

    # -- plumbing ------------------------------------------------------------------
    def _timeout(self) -> float | None:
        if self.deadline is None:
            return 30.0
        remaining = self.deadline - time.monotonic()
        if remaining <= 0.05:
            raise ApiUnavailable("time bound for this event exceeded")
        return remaining

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One API call; returns the decoded JSON body. 404 -> None."""
        body = self._request(what, fn, *args, **kwargs)
        return None if body is None else json.loads(body or b"null")

    def _request(
        self,
        what: str,
        fn: Callable[..., Any],
        *args: Any,
        conflicts: tuple[int, ...] = (409,),
        **kwargs: Any,
    ) -> bytes | None:
        """One API call; returns the raw body. 404 -> None; `conflicts` raise ApiException."""
        for attempt in (1, 2):
            try:
                if self.limiter is not None:
                    self.limiter.acquire(self.deadline)
                response = fn(*args, _preload_content=False, _request_timeout=self._timeout(), **kwargs)
                return response.data or b""
            except ApiException as error:
                if error.status == 404:
                    return None
                wait = _retry_after(error)
                if (
                    error.status == 429
                    and attempt == 1
                    and wait is not None
                    and wait <= MAX_RETRY_AFTER_WAIT
                    and self._fits(wait)
                ):
                    time.sleep(wait)
                    continue
                if error.status in conflicts:
                    raise
                raise ApiUnavailable(
                    f"{what}: API answered {error.status} {error.reason}", retry_after=wait
                ) from None
            except (urllib3.exceptions.HTTPError, OSError) as error:
                raise ApiUnavailable(f"{what}: {type(error).__name__}: {error}"[:300]) from None
        raise AssertionError("unreachable")

    def _fits(self, wait: float) -> bool:
        return self.deadline is None or time.monotonic() + wait < self.deadline - 0.5

    def _paged(
        self,
        parse_page: Callable[[bytes], tuple[list[Any], list[str], str | None]],
        what: str,
        fn: Callable[..., Any],
        *args: Any,
        **kwargs: Any,
    ) -> Iterator[Any]:
        """Objects of a paginated LIST, each page validated straight from the API's bytes.

        A collection the API does not serve (a CRD not installed) answers 404: no objects.
        """
        token = None
        while True:
            body = self._request(what, fn, *args, limit=PAGE_SIZE, _continue=token, **kwargs)
            objects, unreadable, token = parse_page(body or b"{}")
            for reason in unreadable:
                log.warning("ignoring an object the API returned: %s", reason)
            yield from objects
            if not token:
                return

    @staticmethod
    def _decoded(decode: Callable[[bytes], T], body: bytes | None) -> T | None:
        """One object through the typed edge; None on 404 or when we cannot read it."""
        if body is None:
            return None
        try:
            return decode(body)
        except BadEvent as error:
            log.warning("ignoring an object the API returned: %s", error)
            return None

    # -- the Cluster protocol ------------------------------------------------------
    def get_job(self, ref: JobRef) -> Job | None:
        if not _can_exist(ref.namespace, ref.name):
            return None
        body = self._request(
            f"get {ref.kind.plural} {ref.namespace}/{ref.name}",
            self.custom.get_namespaced_custom_object,
            ref.kind.group,
            ref.version,
            ref.namespace,
            ref.kind.plural,
            ref.name,
        )
        return self._decoded(decode_job, body)

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        if not _can_exist(namespace, name):
            return None
        body = self._request(f"get pod {namespace}/{name}", self.core.read_namespaced_pod, name, namespace)
        return self._decoded(decode_pod, body)

    def list_job_pods(self, ref: JobRef, all_label_sets: bool = False) -> list[Pod]:
        """LIST by the v1.6+ label; by the pre-v1.6 labels when that finds nothing, or always
        when `all_label_sets` (the sweep saw legacy-only pods of this job).

        An operator labels all pods of a job alike, so a finished job's event costs one LIST;
        a job whose operator was upgraded mid-job is completed by the sweep.
        """
        if not _can_label(ref.namespace, ref.name):
            return []
        found: dict[str, Pod] = {}  # by uid: a pod may carry both label sets
        for selector in job_pod_selectors(ref):
            if found and not all_label_sets:
                break
            for pod in self._paged(
                parse_pod_page,
                f"list pods of {ref.namespace}/{ref.name}",
                self.core.list_namespaced_pod,
                ref.namespace,
                label_selector=selector,
            ):
                found.setdefault(pod.uid, pod)
        return list(found.values())

    def read_finish_mark(self, job: JobRef) -> FinishMark | None:
        name = finish_mark_name(job.name)
        if not _can_exist(job.namespace, name):
            return None
        body = self._call(
            f"get finish mark of {job.namespace}/{job.name}",
            self.core.read_namespaced_config_map,
            name,
            job.namespace,
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
        name = finish_mark_name(job.name)
        if not job.uid or not _can_exist(job.namespace, name):
            return  # a record nobody owns would never go: keep none
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": job.namespace,
                "labels": {FINISH_MARK_LABEL: job.name[:63]},
                "ownerReferences": [_owned_by(job)],
            },
            "data": {
                "condition": mark.condition,
                "at": mark.at.isoformat() if mark.at else "",
                "top_uid": mark.top_uid,
            },
        }
        what = f"write finish mark of {job.namespace}/{job.name}"
        try:
            self._request(what, self.core.create_namespaced_config_map, job.namespace, body)
        except ApiException:  # 409: it exists: this finish replaces the one kept
            self._request(
                what, self.core.replace_namespaced_config_map, name, job.namespace, body, conflicts=()
            )

    def get_node(self, name: str) -> Node | None:
        if not _can_exist("default", name):  # nodes are cluster-scoped: check the name only
            return None
        body = self._request(f"get node {name}", self.core.read_node, name)
        if body is None:
            return None
        try:
            return decode_node(body)
        except BadEvent as error:
            # Unreadable is not "gone": report it as Ready so the rule does nothing.
            log.warning("ignoring a node the API returned: %s", error)
            return Node(name, NodeReady.TRUE)

    def delete_pod(
        self, namespace: str, name: str, uid: str, resource_version: str = "", force: bool = False
    ) -> Result:
        body = client.V1DeleteOptions(
            preconditions=client.V1Preconditions(uid=uid, resource_version=resource_version or None),
            grace_period_seconds=0 if force else None,
        )
        try:
            found = self._request(
                f"delete pod {namespace}/{name}", self.core.delete_namespaced_pod, name, namespace, body=body
            )
        except ApiException:  # only 409 gets here: a precondition failed
            return Result.CONFLICT
        return Result.GONE if found is None else Result.DELETED

    def get_workload(self, link: kinds.Link, namespace: str, name: str) -> Workload | None:
        if not _can_exist(namespace, name):
            return None
        body = self._request(
            f"get {link.plural} {namespace}/{name}",
            self.custom.get_namespaced_custom_object,
            link.group,
            link.version,
            namespace,
            link.plural,
            name,
        )
        return self._decoded(decode_workload, body)

    def list_workloads(self, link: kinds.Link, namespace: str | None, selector: str) -> Iterator[Workload]:
        what = f"list {link.plural} {selector}"
        if namespace is None:
            yield from self._paged(
                functools.partial(parse_workload_page, listed=link),
                what,
                self.custom.list_cluster_custom_object,
                link.group,
                link.version,
                link.plural,
                label_selector=selector,
            )
        else:
            yield from self._paged(
                functools.partial(parse_workload_page, listed=link),
                what,
                self.custom.list_namespaced_custom_object,
                link.group,
                link.version,
                namespace,
                link.plural,
                label_selector=selector,
            )

    def delete_workload(self, link: kinds.Link, namespace: str, name: str, uid: str) -> Result:
        # Background: the garbage collector removes what it controls (Jobs, pods) after it.
        body = {"propagationPolicy": "Background", "preconditions": {"uid": uid}}
        try:
            found = self._request(
                f"delete {link.plural} {namespace}/{name}",
                self.custom.delete_namespaced_custom_object,
                link.group,
                link.version,
                namespace,
                link.plural,
                name,
                body=body,
            )
        except ApiException:  # only 409 gets here: the uid precondition failed
            return Result.CONFLICT
        return Result.GONE if found is None else Result.DELETED

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
                self.custom.patch_namespaced_custom_object,
                ref.kind.group,
                ref.version,
                ref.namespace,
                ref.kind.plural,
                ref.name,
                patch,
                conflicts=(409, 422),
            )
        except ApiException:
            return Result.CONFLICT
        return Result.GONE if found is None else Result.SUSPENDED

    def read_evidence(self, job: JobRef) -> tuple[list[dict[str, Any]], str] | None:
        if not _can_exist(job.namespace, store_name(job.name)):
            return None
        body = self._request(
            f"get evidence of {job.namespace}/{job.name}",
            self.core.read_namespaced_config_map,
            store_name(job.name),
            job.namespace,
        )
        if body is None:
            return None
        store = json.loads(body)
        data = store.get("data") or {}
        return decode(data.get(EVIDENCE_KEY)), str((store.get("metadata") or {}).get("resourceVersion", ""))

    def write_evidence(self, job: JobRef, records: list[dict[str, Any]], version: str | None) -> bool:
        name = store_name(job.name)
        if not job.uid or not _can_exist(job.namespace, name):
            return False  # a store nobody owns would never go: keep none
        metadata: dict[str, Any] = {
            "name": name,
            "namespace": job.namespace,
            "labels": {EVIDENCE_LABEL: job.name[:63]},
            "ownerReferences": [_owned_by(job)],
        }
        if version is not None:
            metadata["resourceVersion"] = version
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata,
            "data": {EVIDENCE_KEY: encode(records)},
        }
        what = f"write evidence of {job.namespace}/{job.name}"
        try:
            if version is None:
                self._request(what, self.core.create_namespaced_config_map, job.namespace, body)
            else:
                found = self._request(
                    what, self.core.replace_namespaced_config_map, name, job.namespace, body
                )
                return found is not None
        except ApiException:  # 409: written (or created) by someone else since it was read
            return False
        return True

    def container_log(
        self, namespace: str, pod: str, container: str, previous: bool, lines: int, limit_bytes: int
    ) -> str | None:
        try:
            body = self._request(
                f"read log of {namespace}/{pod}/{container}",
                self.core.read_namespaced_pod_log,
                pod,
                namespace,
                container=container,
                previous=previous,
                tail_lines=lines,
                limit_bytes=limit_bytes,
                conflicts=(400, 403, 409, 500, 502, 503),
            )
        except ApiException:  # no such run or log (e.g. a node that serves none): keep the rest
            return None
        return body.decode(errors="replace") if body else None

    def record_event(self, event: EventRecord) -> bool:
        ref, stamp = event.involved, event.time.isoformat().replace("+00:00", "Z")
        marks = {PROGRESS_ANNOTATION: str(event.progress)} if event.progress is not None else {}
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": event.name, "namespace": ref.namespace, "annotations": marks},
            "involvedObject": {
                "apiVersion": ref.api_version or ref.kind.api_version(ref.version),
                "kind": ref.kind.kind,
                "name": ref.name,
                "namespace": ref.namespace,
                "uid": ref.uid or "",
            },
            "type": event.type,
            "reason": event.reason,
            "message": event.message,
            "source": {"component": "podsweeper"},
            "reportingComponent": "podsweeper",
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self._call(f"create event {event.name}", self.core.create_namespaced_event, ref.namespace, body)
            return True
        except ApiException:  # 409: the same warning again -> bump its count
            pass
        current = (
            self._call(f"get event {event.name}", self.core.read_namespaced_event, event.name, ref.namespace)
            or {}
        )
        before = ((current.get("metadata") or {}).get("annotations") or {}).get(PROGRESS_ANNOTATION)
        if (
            event.progress is not None
            and before is not None
            and before.isdigit()
            and event.progress <= int(before)
        ):
            return False  # nothing new since the last one: its count must not follow our passes
        patch = {
            "metadata": {"annotations": marks},
            "count": int(current.get("count") or 1) + 1,
            "lastTimestamp": stamp,
            "message": event.message,
        }
        self._call(
            f"patch event {event.name}", self.core.patch_namespaced_event, event.name, ref.namespace, patch
        )
        return True

    def list_training_pods(self, namespace: str | None, chained: bool = False) -> Iterator[Pod]:
        seen: set[str] = set()  # a pod may carry both label sets
        for selector in TRAINING_POD_SELECTORS + (CHAIN_POD_SELECTORS if chained else ()):
            if namespace is None:
                pods = self._paged(
                    parse_pod_page,
                    "list training pods",
                    self.core.list_pod_for_all_namespaces,
                    label_selector=selector,
                )
            else:
                pods = self._paged(
                    parse_pod_page,
                    f"list training pods in {namespace}",
                    self.core.list_namespaced_pod,
                    namespace,
                    label_selector=selector,
                )
            for pod in pods:
                if pod.uid not in seen:
                    seen.add(pod.uid)
                    yield pod

    def list_jobs(self, namespace: str | None, kind: kinds.TrainingKind | None = None) -> Iterator[Job]:
        for listed in kinds.TRAINING_KINDS if kind is None else (kind,):
            for version in listed.versions:
                yield from self._list_kind(listed, version, namespace)

    def _list_kind(self, kind: kinds.TrainingKind, version: str, namespace: str | None) -> Iterator[Job]:
        what = f"list {kind.plural}.{version}"
        if namespace is None:
            yield from self._paged(
                parse_job_page,
                what,
                self.custom.list_cluster_custom_object,
                kind.group,
                version,
                kind.plural,
            )
        else:
            yield from self._paged(
                parse_job_page,
                what,
                self.custom.list_namespaced_custom_object,
                kind.group,
                version,
                namespace,
                kind.plural,
            )
