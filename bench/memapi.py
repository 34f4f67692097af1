"""An in-memory Kubernetes API behind the function's real KubeCluster.

The in-process figures run the live function's whole path — intake, triage, KubeCluster
(json.loads of each answer, the typed edge, uid preconditions), engine, actions, report —
with the HTTP round trips to the API server replaced by dict lookups. Answers are the raw
JSON bytes the stream carried, so parsing API answers costs what it costs live.

Lookups are indexed (pods by namespace + job-name label), as the real API server's are,
so the API side adds no per-event cost that grows with the number of jobs.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from typing import Any

from bench.harness import builders
from podsweeper.cluster.kube import KubeCluster
from podsweeper.cluster.kube.transport import Answer
from podsweeper.kinds import GROUP
from podsweeper.ownership import JOB_NAME_LABEL, LEGACY_GROUP_LABEL, LEGACY_JOB_NAME_LABEL

PLURAL_KINDS = set(builders.PLURALS.values())


class MemoryApi:
    """State the stream has shown, answering the function's requests as transport.Api would."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], tuple[str, bytes]] = {}  # (ns, name) -> (uid, body)
        self.by_job: dict[tuple[str, str], dict[str, bytes]] = defaultdict(dict)  # (ns, job) -> name -> body
        self.by_legacy: dict[tuple[str, str], dict[str, bytes]] = defaultdict(dict)  # pre-v1.6 labels
        self.pod_job: dict[tuple[str, str], tuple[str, str]] = {}
        self.jobs: dict[tuple[str, str, str], bytes] = {}  # (ns, plural, name) -> body
        self.events: dict[tuple[str, str], dict] = {}
        self.config_maps: dict[tuple[str, str], dict] = {}  # the evidence stores
        self.calls: Counter = Counter()  # (verb, resource) -> count
        self.deleted = 0

    # -- feeding: what the operator and kubelet wrote before the event was sent ------------
    def apply(self, kind: str, verb: str, obj: dict, body: bytes) -> None:
        meta = obj["metadata"]
        ns, name = meta["namespace"], meta["name"]
        if kind == "job":
            key = (ns, builders.PLURALS[obj["kind"]], name)
            if verb == "delete":
                self.jobs.pop(key, None)
            else:
                self.jobs[key] = body
            return
        if verb == "delete":
            self._drop_pod(ns, name)
            return
        labels = meta.get("labels") or {}
        legacy = labels.get(LEGACY_JOB_NAME_LABEL, "") if labels.get(LEGACY_GROUP_LABEL) == GROUP else ""
        self.put_pod(ns, name, meta.get("uid", ""), labels.get(JOB_NAME_LABEL, ""), body, legacy)

    def put_pod(self, ns: str, name: str, uid: str, job: str, body: bytes, legacy: str = "") -> None:
        self._drop_pod(ns, name)
        self.pods[(ns, name)] = (uid, body)
        self.pod_job[(ns, name)] = (job, legacy)
        if job:
            self.by_job[(ns, job)][name] = body
        if legacy:
            self.by_legacy[(ns, legacy)][name] = body

    def _drop_pod(self, ns: str, name: str) -> bytes | None:
        found = self.pods.pop((ns, name), None)
        if found is None:
            return None
        job, legacy = self.pod_job.pop((ns, name))
        for index, key in ((self.by_job, job), (self.by_legacy, legacy)):
            members = index.get((ns, key)) if key else None
            if members is not None:
                members.pop(name, None)
                if not members:
                    del index[(ns, key)]
        return found[1]

    def cluster(self) -> KubeCluster:
        """The function's own KubeCluster, talking to this in-memory API."""
        return KubeCluster(self)  # type: ignore[arg-type]  # answers as transport.Api does

    # -- the transport: what transport.Api.request does over HTTP, as dict lookups ------------
    def request(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "",
        timeout: float | None = None,
    ) -> Answer:
        parts = path.strip("/").split("/")
        query = query or {}
        if parts[:2] == ["api", "v1"] and len(parts) >= 5 and parts[2] == "namespaces":
            namespace, resource, rest = parts[3], parts[4], parts[5:]
            handler = {
                "pods": self._pods,
                "configmaps": self._config_maps,
                "events": self._events,
            }.get(resource)
            if handler is not None:
                return handler(method, namespace, rest, query, _body(body))
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 4 and method == "GET":
            # A Namespace's policy read (cached by the function): no podsweeper.dev/ annotations,
            # so every namespace runs on the global settings, as the figures assume.
            self.calls["GET", "namespaces"] += 1
            return Answer(200, _namespace(parts[3]))
        if parts[0] == "apis" and len(parts) == 7 and parts[3] == "namespaces" and method == "GET":
            _, _group, _version, _, namespace, plural, name = parts
            self.calls["GET", plural] += 1
            found = self.jobs.get((namespace, plural, name))
            return Answer(200, found) if found is not None else NOT_FOUND
        raise NotImplementedError(f"{method} {path} (the benchmark stream has no sweeps)")

    def _pods(self, method: str, namespace: str, rest: list[str], query: dict, body: Any) -> Answer:
        if not rest and method == "GET":
            self.calls["LIST", "pods"] += 1
            selector = query.get("labelSelector", "")
            terms = dict(term.partition("=")[::2] for term in selector.split(","))
            if set(terms) == {JOB_NAME_LABEL}:
                items = self.by_job.get((namespace, terms[JOB_NAME_LABEL]), {}).values()
            elif (
                set(terms) == {LEGACY_GROUP_LABEL, LEGACY_JOB_NAME_LABEL}
                and terms[LEGACY_GROUP_LABEL] == GROUP
            ):
                items = self.by_legacy.get((namespace, terms[LEGACY_JOB_NAME_LABEL]), {}).values()
            else:
                raise NotImplementedError(f"selector {selector!r} (the benchmark stream has no sweeps)")
            return Answer(
                200,
                b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":['
                + b",".join(items)
                + b"]}",
            )
        name = rest[0]
        found = self.pods.get((namespace, name))
        if rest[1:] == ["log"]:
            # A failed run's last lines (the evidence keeper reads them before a pod goes).
            self.calls["GET", "pods/log"] += 1
            if found is None:
                return NOT_FOUND
            return Answer(
                200, b"Traceback (most recent call last):\nRuntimeError: CUDA error: out of memory\n"
            )
        if method == "GET":
            self.calls["GET", "pods"] += 1
            return Answer(200, found[1]) if found is not None else NOT_FOUND
        if method == "DELETE":
            self.calls["DELETE", "pods"] += 1
            if found is None:
                return NOT_FOUND
            wanted = ((body or {}).get("preconditions") or {}).get("uid")
            if wanted is not None and wanted != found[0]:
                return CONFLICT
            self.deleted += 1
            return Answer(200, self._drop_pod(namespace, name) or b"{}")
        raise NotImplementedError(f"{method} pods/{'/'.join(rest)}")

    def _config_maps(self, method: str, namespace: str, rest: list[str], query: dict, body: Any) -> Answer:
        verb = {"GET": "GET", "POST": "POST", "PUT": "PUT"}[method]
        self.calls[verb, "configmaps"] += 1
        if method == "POST":
            key = (namespace, body["metadata"]["name"])
            if key in self.config_maps:
                return CONFLICT
            return Answer(201, self._store(key, body))
        key = (namespace, rest[0])
        found = self.config_maps.get(key)
        if found is None:
            return NOT_FOUND
        if method == "GET":
            return Answer(200, json.dumps(found).encode())
        if body["metadata"].get("resourceVersion") != found["metadata"]["resourceVersion"]:
            return CONFLICT
        return Answer(200, self._store(key, body))

    def _store(self, key, body) -> bytes:
        stored = json.loads(json.dumps(body))
        stored["metadata"]["resourceVersion"] = str(len(self.config_maps) + sum(self.calls.values()))
        self.config_maps[key] = stored
        return json.dumps(stored).encode()

    def _events(self, method: str, namespace: str, rest: list[str], query: dict, body: Any) -> Answer:
        self.calls[method, "events"] += 1
        if method == "POST":
            key = (namespace, body["metadata"]["name"])
            if key in self.events:
                return CONFLICT
            self.events[key] = body
            return Answer(201, json.dumps(body).encode())
        found = self.events.get((namespace, rest[0]))
        if found is None:
            return NOT_FOUND
        if method == "PATCH":
            found.update(body)
        return Answer(200, json.dumps(found).encode())


def _body(body: Any) -> Any:
    """The request body as the API server reads it: JSON, sent as bytes or a dict."""
    return json.loads(body) if isinstance(body, (bytes, str)) else body


NOT_FOUND = Answer(404, b'{"kind":"Status","code":404}', reason="Not Found")
CONFLICT = Answer(409, b'{"kind":"Status","code":409}', reason="Conflict")


def _namespace(name: str) -> bytes:
    return json.dumps(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "uid": f"ns-{name}"}}
    ).encode()
