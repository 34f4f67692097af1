"""What a cluster did to TrainJob chains, from cluster-wide watches: when each object (by uid)
was added and deleted, with the resourceVersions then, its last state and every state of a
TrainJob. Shared by the real Trainer tests (test_real_trainer.py, test_expired_trainjob.py)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.support.harness.waiting import wait_for
from tests.support.world.trainjobs import JOBSET, TRAINER, controller_of

JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
CHAIN_KINDS = ("TrainJob", "JobSet", "Job", "Pod")


@dataclass
class Seen:
    kind: str
    ns: str
    name: str
    uid: str
    added: float  # time.time() the watch first showed it
    added_rv: int  # its resourceVersion then: its creation's, for one made after the watch began
    deleted: float | None = None
    deleted_rv: int | None = None
    obj: dict = field(default_factory=dict)  # the last state seen
    history: list[tuple[float, dict]] = field(default_factory=list)  # TrainJobs only


class ChainWatch:
    """`kinds` (of CHAIN_KINDS, ConfigMap, Event) in the namespaces `watched` says yes to, as
    cluster-wide watches report them; start() returns once each has been listed."""

    def __init__(self, api, watched: Callable[[str], bool], kinds: tuple[str, ...] = CHAIN_KINDS):
        from kubernetes import client

        core, batch, custom = client.CoreV1Api(api), client.BatchV1Api(api), client.CustomObjectsApi(api)
        listers = {
            "TrainJob": lambda **kw: custom.list_cluster_custom_object(*TRAINER, "trainjobs", **kw),
            "JobSet": lambda **kw: custom.list_cluster_custom_object(*JOBSET, "jobsets", **kw),
            "Job": batch.list_job_for_all_namespaces,
            "Pod": core.list_pod_for_all_namespaces,
            "ConfigMap": core.list_config_map_for_all_namespaces,
            "Event": core.list_event_for_all_namespaces,
        }
        self.listers = {kind: listers[kind] for kind in kinds}
        self.watched = watched
        self.seen: dict[str, Seen] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listed: set[str] = set()
        self._threads = [threading.Thread(target=self._run, args=(k,), daemon=True) for k in self.listers]

    def start(self):
        for thread in self._threads:
            thread.start()
        wait_for("the timeline's first lists", lambda: self._listed == set(self.listers), 30)
        return self

    def _note(self, kind: str, change: str, obj: dict, now: float) -> None:
        meta = obj.get("metadata") or {}
        if not self.watched(meta.get("namespace", "")):
            return
        rv = int(meta.get("resourceVersion") or 0)
        with self._lock:
            entry = self.seen.get(meta["uid"])
            if entry is None:
                entry = Seen(kind, meta["namespace"], meta["name"], meta["uid"], now, rv)
                self.seen[meta["uid"]] = entry
            entry.obj = obj
            if kind == "TrainJob":
                entry.history.append((now, obj))
            if change == "DELETED" and entry.deleted is None:
                entry.deleted, entry.deleted_rv = now, rv

    def _run(self, kind: str) -> None:
        from kubernetes.watch.watch import iter_resp_lines

        lister, version = self.listers[kind], None
        while not self._stop.is_set():
            try:
                if version is None:
                    body = json.loads(lister(_preload_content=False).data)
                    for obj in body.get("items") or []:
                        self._note(kind, "ADDED", obj, time.time())
                    version = body["metadata"]["resourceVersion"]
                    self._listed = self._listed | {kind}
                response = lister(
                    watch=True,
                    resource_version=version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=30,
                    _preload_content=False,
                    _request_timeout=(5, 60),
                )
                for line in iter_resp_lines(response):
                    change = json.loads(line)
                    if change["type"] == "ERROR":
                        version = None  # 410: list again
                        break
                    version = change["object"]["metadata"].get("resourceVersion") or version
                    if change["type"] != "BOOKMARK":
                        self._note(kind, change["type"], change["object"], time.time())
            except Exception:  # noqa: BLE001 - keep watching
                if self._stop.is_set():
                    return
                time.sleep(0.2)

    def stop(self) -> None:
        self._stop.set()

    def of(self, ns: str, kind: str, name: str | None = None) -> list[Seen]:
        with self._lock:
            found = [s for s in self.seen.values() if s.ns == ns and s.kind == kind]
        return sorted((s for s in found if name is None or s.name == name), key=lambda s: s.added)

    def live(self, ns: str, kind: str, name: str | None = None) -> list[Seen]:
        return [s for s in self.of(ns, kind, name) if s.deleted is None]

    def chain(self, ns: str, name: str) -> dict[str, list[Seen]]:
        """Everything of the TrainJob (or plain JobSet) `name` the watch saw: the TrainJob, every
        JobSet of that name, their Jobs and their pods."""
        jobsets = self.of(ns, "JobSet", name)
        uids = {s.uid for s in jobsets}
        return {
            "TrainJob": self.of(ns, "TrainJob", name),
            "JobSet": jobsets,
            "Job": [s for s in self.of(ns, "Job") if (controller_of(s.obj) or {}).get("uid") in uids],
            "Pod": [
                s for s in self.of(ns, "Pod") if s.obj["metadata"].get("labels", {}).get(JOBSET_NAME) == name
            ],
        }

    def trainjob_since(self, ns: str, name: str, test) -> float | None:
        """When the TrainJob's state first passed `test`."""
        for seen in self.of(ns, "TrainJob", name):
            for at, obj in list(seen.history):
                if test(obj):
                    return at
        return None
