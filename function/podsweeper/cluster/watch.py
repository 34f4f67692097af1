"""Watching a namespace's pods and training jobs, as Knative's receive adapter does.

Used by `podsweeper record` (podsweeper.tools.record). Like the adapter it lists each
collection first and watches from that version, so objects that already exist send nothing;
an expired watch restarts from a fresh list, and what changed in between is not seen.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from podsweeper import kinds
from podsweeper.errors import ApiUnavailable
from podsweeper.model import Verb

VERBS = {"ADDED": Verb.ADD, "MODIFIED": Verb.UPDATE, "DELETED": Verb.DELETE}
# A server-side watch timeout: the stream ends cleanly and is resumed from the last version.
WATCH_SECONDS = 240


@dataclass(frozen=True)
class Resource:
    """One watched collection: the core pods, or one served version of a training kind."""

    group: str  # "" for core
    version: str
    plural: str
    selector: str | None = None  # a label selector (a chain's batch Jobs: only labelled ones)

    @property
    def label(self) -> str:
        return f"{self.plural}.{self.group}/{self.version}" if self.group else f"{self.plural}/{self.version}"


def _raw(response: Any) -> Any:
    return json.loads(response.data or b"null")


class NamespaceWatch:
    """Watches pods and every served training kind in one namespace from background threads.

    `start()` lists each collection (which fixes the version the watch starts from) and
    returns once every watch is running; changes then arrive on `changes` as
    (verb, object, received-at) tuples, in arrival order.
    """

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        *,
        pod_selector: str | None = None,
        log: Callable[[str], None] | None = None,
    ):
        self.api = api
        self.namespace = namespace
        self.pod_selector = pod_selector
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.changes: queue.Queue[tuple[Verb, dict[str, Any], datetime]] = queue.Queue()
        self.resources: list[Resource] = []
        self.errors: list[str] = []
        self.failed: str | None = None  # a watch that cannot work (e.g. 403): stop recording
        self._log = log or (lambda message: None)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._responses: dict[Resource, Any] = {}

    # One call shape for core pods and custom objects; `extra` carries list/watch parameters.
    def _request(self, resource: Resource, **extra: Any) -> Any:
        if resource.group == "":
            if self.pod_selector:
                extra["label_selector"] = self.pod_selector
            return self.core.list_namespaced_pod(self.namespace, _preload_content=False, **extra)
        if resource.selector:
            extra["label_selector"] = resource.selector
        return self.custom.list_namespaced_custom_object(
            resource.group, resource.version, self.namespace, resource.plural, _preload_content=False, **extra
        )

    def _list_version(self, resource: Resource) -> str | None:
        """The collection's current resourceVersion; None if the API does not serve it."""
        try:
            body = _raw(self._request(resource, limit=1, _request_timeout=30))
        except ApiException as error:
            if error.status == 404:
                return None
            raise ApiUnavailable(
                f"list {resource.label} in {self.namespace}: API answered {error.status} {error.reason}"
            ) from None
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise ApiUnavailable(f"list {resource.label}: {type(error).__name__}: {error}") from None
        return str((body.get("metadata") or {}).get("resourceVersion") or "")

    def start(self) -> None:
        candidates: list[tuple[Resource, ...]] = [(Resource("", "v1", "pods"),)]
        candidates += [
            tuple(Resource(kind.group, version, kind.plural) for version in kind.versions)
            for kind in kinds.TRAINING_KINDS
        ]
        # A chain's JobSets, and the batch Jobs labelled as a chain's (not every batch Job).
        for kind in kinds.TRAINING_KINDS:
            if kind.chain is not None:
                top, *_, last = kind.chain.links
                candidates.append((Resource(top.group, top.version, top.plural),))
                candidates.append((Resource(last.group, last.version, last.plural, kind.chain.name_label),))
        started: list[tuple[Resource, str]] = []
        for versions in candidates:
            # The first served version of each kind: a cluster serves e.g. MPIJob v1 (training
            # operator) or v2beta1 (mpi-operator), and one watch per kind is what the shipped
            # ApiServerSource configures.
            for resource in versions:
                version = self._list_version(resource)
                if version is not None:
                    started.append((resource, version))
                    break
            else:
                self._log(f"not served, not watched: {', '.join(r.label for r in versions)}")
        for resource, version in started:
            self.resources.append(resource)
            thread = threading.Thread(
                target=self._watch, args=(resource, version), name=f"watch-{resource.plural}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def _watch(self, resource: Resource, version: str) -> None:
        failures = 0  # in a row: the wait before the next try doubles up to 5 s
        while not self._stop.is_set():
            problem = None
            try:
                response = self._request(
                    resource,
                    watch=True,
                    resource_version=version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=WATCH_SECONDS,
                    _request_timeout=(10, WATCH_SECONDS + 30),
                )
            except ApiException as error:
                if error.status in (401, 403) and not self._stop.is_set():
                    # No permission to watch: retrying cannot help.
                    self.failed = f"watch {resource.label}: API answered {error.status} {error.reason}"
                    self._note(self.failed)
                    return
                problem = f"API answered {error.status} {error.reason}"
            except (urllib3.exceptions.HTTPError, OSError) as error:
                problem = f"{type(error).__name__}: {str(error)[:200]}"
            else:
                self._responses[resource] = response
                try:
                    version = self._consume(resource, response, version)
                    failures = 0
                except (urllib3.exceptions.HTTPError, OSError, ValueError) as error:
                    problem = f"stream broke: {type(error).__name__}: {str(error)[:200]}"
                finally:
                    self._responses.pop(resource, None)
                    try:
                        response.release_conn()
                    except Exception:  # noqa: BLE001 - a stream shut down by stop()
                        pass
            if problem is None or self._stop.is_set():
                continue
            failures += 1
            if failures == 1 or failures % 20 == 0:  # say it once, then now and then
                self._note(
                    f"watch {resource.label}: {problem}; retrying"
                    + (f" ({failures} failures in a row)" if failures > 1 else "")
                )
            self._stop.wait(min(5.0, 0.1 * 2**failures))

    def _consume(self, resource: Resource, response: Any, version: str) -> str:
        """Read one watch stream to its end; returns the version to resume from."""
        for line in iter_resp_lines(response):
            if self._stop.is_set():
                return version
            received = datetime.now(UTC)
            change = json.loads(line)
            kind, obj = change.get("type"), change.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:
                    # Expired: like the adapter's relist, objects changed meanwhile send nothing.
                    fresh = self._list_version(resource) or version
                    self._note(
                        f"watch {resource.label} expired at {version}; restarted at {fresh}: "
                        "changes in between are not recorded (the adapter would not send them)"
                    )
                    return fresh
                raise ValueError(f"watch error {obj.get('code')}: {obj.get('message')}")
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if kind in VERBS:
                self.changes.put((VERBS[kind], obj, received))
        return version

    def _note(self, message: str) -> None:
        self.errors.append(message)
        self._log(message)

    def stop(self) -> None:
        self._stop.set()
        for response in list(self._responses.values()):
            try:  # interrupts a read blocked in another thread (urllib3 >= 2.3)
                getattr(response, "shutdown", response.close)()
            except Exception:  # noqa: BLE001 - best effort while stopping
                pass
        for thread in self._threads:
            thread.join(timeout=2.0)
