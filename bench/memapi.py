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
from dataclasses import dataclass

from kubernetes.client.exceptions import ApiException

from podsweeper.cluster.kube import KubeCluster
from podsweeper.kinds import GROUP
from podsweeper.ownership import JOB_NAME_LABEL, LEGACY_GROUP_LABEL, LEGACY_JOB_NAME_LABEL
from tests.fixtures.builders import PLURALS

PLURAL_KINDS = set(PLURALS.values())


@dataclass
class Response:
    data: bytes


def _not_found() -> ApiException:
    return ApiException(status=404, reason="Not Found")


class MemoryApi:
    """State the stream has shown, answering like CoreV1Api / CustomObjectsApi."""

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
            key = (ns, PLURALS[obj["kind"]], name)
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
        cluster = KubeCluster.__new__(KubeCluster)
        cluster.api, cluster.deadline = None, None
        cluster.core, cluster.custom = _Core(self), _Custom(self)
        return cluster


class _Core:
    def __init__(self, api: MemoryApi):
        self.api = api

    def read_namespaced_pod(self, name, namespace, **_):
        self.api.calls["GET", "pods"] += 1
        found = self.api.pods.get((namespace, name))
        if found is None:
            raise _not_found()
        return Response(found[1])

    def list_namespaced_pod(self, namespace, label_selector="", limit=None, _continue=None, **_):
        self.api.calls["LIST", "pods"] += 1
        terms = dict(term.partition("=")[::2] for term in label_selector.split(","))
        if set(terms) == {JOB_NAME_LABEL}:
            items = self.api.by_job.get((namespace, terms[JOB_NAME_LABEL]), {}).values()
        elif set(terms) == {LEGACY_GROUP_LABEL, LEGACY_JOB_NAME_LABEL} and terms[LEGACY_GROUP_LABEL] == GROUP:
            items = self.api.by_legacy.get((namespace, terms[LEGACY_JOB_NAME_LABEL]), {}).values()
        else:
            raise NotImplementedError(f"selector {label_selector!r} (the benchmark stream has no sweeps)")
        return Response(
            b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":['
            + b",".join(items)
            + b"]}"
        )

    def delete_namespaced_pod(self, name, namespace, body=None, **_):
        self.api.calls["DELETE", "pods"] += 1
        found = self.api.pods.get((namespace, name))
        if found is None:
            raise _not_found()
        wanted = body.preconditions.uid if body is not None and body.preconditions else None
        if wanted is not None and wanted != found[0]:
            raise ApiException(status=409, reason="Conflict")
        self.api.deleted += 1
        return Response(self.api._drop_pod(namespace, name))

    def read_namespaced_pod_log(self, name, namespace, **_):
        """A failed run's last lines (the evidence keeper reads them before a pod goes)."""
        self.api.calls["GET", "pods/log"] += 1
        if (namespace, name) not in self.api.pods:
            raise _not_found()
        return Response(b"Traceback (most recent call last):\nRuntimeError: CUDA error: out of memory\n")

    def read_namespaced_config_map(self, name, namespace, **_):
        self.api.calls["GET", "configmaps"] += 1
        found = self.api.config_maps.get((namespace, name))
        if found is None:
            raise _not_found()
        return Response(json.dumps(found).encode())

    def create_namespaced_config_map(self, namespace, body, **_):
        self.api.calls["POST", "configmaps"] += 1
        key = (namespace, body["metadata"]["name"])
        if key in self.api.config_maps:
            raise ApiException(status=409, reason="AlreadyExists")
        return Response(self._store(key, body))

    def replace_namespaced_config_map(self, name, namespace, body, **_):
        self.api.calls["PUT", "configmaps"] += 1
        key = (namespace, name)
        found = self.api.config_maps.get(key)
        if found is None:
            raise _not_found()
        if body["metadata"].get("resourceVersion") != found["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict")
        return Response(self._store(key, body))

    def _store(self, key, body) -> bytes:
        stored = json.loads(json.dumps(body))
        stored["metadata"]["resourceVersion"] = str(len(self.api.config_maps) + sum(self.api.calls.values()))
        self.api.config_maps[key] = stored
        return json.dumps(stored).encode()

    def create_namespaced_event(self, namespace, body, **_):
        self.api.calls["POST", "events"] += 1
        key = (namespace, body["metadata"]["name"])
        if key in self.api.events:
            raise ApiException(status=409, reason="AlreadyExists")
        self.api.events[key] = body
        return Response(json.dumps(body).encode())

    def read_namespaced_event(self, name, namespace, **_):
        self.api.calls["GET", "events"] += 1
        found = self.api.events.get((namespace, name))
        if found is None:
            raise _not_found()
        return Response(json.dumps(found).encode())

    def patch_namespaced_event(self, name, namespace, body, **_):
        self.api.calls["PATCH", "events"] += 1
        found = self.api.events[(namespace, name)]
        found.update(body)
        return Response(json.dumps(found).encode())


class _Custom:
    def __init__(self, api: MemoryApi):
        self.api = api

    def get_namespaced_custom_object(self, group, version, namespace, plural, name, **_):
        self.api.calls["GET", plural] += 1
        found = self.api.jobs.get((namespace, plural, name))
        if found is None:
            raise _not_found()
        return Response(found)
