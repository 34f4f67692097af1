"""The one player of the Kubeflow training operator, the kubelet and the user against the real
API server, with the objects tests/fixtures/builders.py makes; and the seed's experiments as
timelines of its steps.

Where no controller runs (the API server tests, the players world), each change is written
the way its real author writes it: the user creates the job; the operator creates the pods
(labels and a controller ownerReference to the job) and writes the job's conditions through
the `status` subresource; the kubelet writes pod status through the `status` subresource and
finishes graceful deletions. `node` is where the pods are bound: a node (the players world)
makes a delete graceful, for the kubelet to finish; None (the API server tests: no kubelet)
makes it immediate.

The seed experiments (docs/seed.md) are timelines of such steps at the seed's
offsets in seconds, multiplied by `scale` (1.0 = the seed's real pace).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from kubernetes import client
from kubernetes.client.rest import ApiException

from podsweeper import kinds
from tests.fixtures import builders
from tests.fixtures.builders import container_status as cs
from tests.fixtures.builders import for_create

MERGE_PATCH = "application/merge-patch+json"
KUBELET_NODE = "las1"  # the players world's node: its pods' deletes are graceful


def now() -> datetime:
    return datetime.now(UTC)


def _plural(obj: dict) -> str:
    return kinds.BY_KIND[obj["kind"]].plural


def _version(obj: dict) -> str:
    return obj["apiVersion"].rpartition("/")[2]


@dataclass
class Play:
    """One namespace's operator + kubelet + user, with a clock that runs `scale` times the seed's."""

    api: client.ApiClient
    namespace: str
    scale: float = 1.0
    node: str | None = KUBELET_NODE  # its pods' spec.nodeName (None: deletes are immediate)
    t0: float = field(default_factory=time.monotonic)
    log: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    # -- the clock -----------------------------------------------------------------------
    def at(self, seconds: float) -> None:
        """Wait until `seconds` of seed time have passed since t0."""
        delay = self.t0 + seconds * self.scale - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def _note(self, text: str) -> None:
        self.log.append(f"{time.monotonic() - self.t0:7.3f}s {text}")

    # -- the user ------------------------------------------------------------------------
    def submit(self, job: dict) -> dict:
        """Create the training job; returns it as stored (with its uid)."""
        created = json.loads(
            self.custom.create_namespaced_custom_object(
                kinds.GROUP,
                _version(job),
                self.namespace,
                _plural(job),
                for_create(job),
                _preload_content=False,
            ).data
        )
        self._note(f"user: created {job['kind']} {job['metadata']['name']}")
        return created

    def create_job(self, kind: str = "PyTorchJob", name: str = "pytest", **kw) -> dict:
        """builders.job(kind, name, **kw) in this namespace, submitted."""
        return self.submit(builders.job(kind, name, self.namespace, **kw))

    def delete_job(self, job: dict, propagation: str = "Background") -> None:
        """Delete the job. Nothing garbage-collects here, so its pods stay either way."""
        self.custom.delete_namespaced_custom_object(
            kinds.GROUP,
            _version(job),
            self.namespace,
            _plural(job),
            job["metadata"]["name"],
            body={"propagationPolicy": propagation},
            _preload_content=False,
        )
        self._note(f"user: deleted {job['kind']} {job['metadata']['name']}")

    # -- the operator --------------------------------------------------------------------
    def create_pods(self, job: dict, **pod_kwargs) -> dict[str, dict]:
        """Every replica's pod, labelled and owned by `job` (as stored), Pending."""
        key = kinds.BY_KIND[job["kind"]].replica_specs_key
        pods = {}
        for rtype, spec in job["spec"][key].items():
            for index in range(spec.get("replicas", 1)):
                pod = self.create_pod(job, rtype, index, **pod_kwargs)
                pods[pod["metadata"]["name"]] = pod
        return pods

    def create_pod(self, job: dict, replica_type: str, index: int, **kw) -> dict:
        """builders.pod(job, replica_type, index, **kw) on this player's node, created."""
        pod = builders.pod(job, replica_type, index, **{"node": self.node, **kw})
        created = json.loads(
            self.core.create_namespaced_pod(self.namespace, for_create(pod), _preload_content=False).data
        )
        self._note(f"operator: created pod {pod['metadata']['name']}")
        return created

    def set_job_conditions(self, job: dict, conditions) -> dict:
        """Write the job's conditions, (type, at) each True in order; returns the job as stored."""
        status = builders.set_conditions(job, conditions)["status"]
        written = self.custom.patch_namespaced_custom_object_status(
            kinds.GROUP,
            _version(job),
            self.namespace,
            _plural(job),
            job["metadata"]["name"],
            {"status": status},
            _content_type=MERGE_PATCH,
            _preload_content=False,
        )
        self._note(f"operator: {job['metadata']['name']} conditions {', '.join(c for c, _ in conditions)}")
        return json.loads(written.data)

    def job_conditions(self, job: dict, *types: str) -> float:
        """Write the job's conditions, each True now, in order (as the operator does).

        Returns time.monotonic() just before the write was sent.
        """
        stamped = [(ctype, now()) for ctype in types]
        sent = time.monotonic()
        self.set_job_conditions(job, stamped)
        return sent

    def delete_pods(self, names: Iterable[str]) -> None:
        """The operator's cleanPodPolicy cleanup: graceful deletes (the kubelet finishes them)."""
        for name in names:
            try:
                self.core.delete_namespaced_pod(name, self.namespace, _preload_content=False)
                self._note(f"operator: deleted pod {name}")
            except ApiException as error:
                if error.status != 404:
                    raise

    # -- the kubelet ---------------------------------------------------------------------
    def set_pod_status(self, pod: dict, phase: str, containers: list[dict] | None = None) -> dict:
        """Write a pod's phase (and containerStatuses) as a strategic merge patch; returns the
        pod as stored. An error is the test's."""
        status: dict = {"phase": phase}
        if containers is not None:
            status["containerStatuses"] = containers
        response = self.core.patch_namespaced_pod_status(
            pod["metadata"]["name"], self.namespace, {"status": status}, _preload_content=False
        )
        return json.loads(response.data)

    def pod_status(self, name: str, phase: str, *containers: dict) -> bool:
        """Write a pod's status as the kubelet does (started now, the container statuses
        replaced); False if the pod is gone (or going)."""
        status: dict = {"phase": phase, "startTime": builders.stamp(now())}
        if containers:
            status["containerStatuses"] = list(containers)
        try:
            self.core.patch_namespaced_pod_status(
                name, self.namespace, {"status": status}, _content_type=MERGE_PATCH, _preload_content=False
            )
        except ApiException as error:
            if error.status in (404, 409, 422):  # deleted meanwhile (by podsweeper, in the e2e)
                self._note(f"kubelet: pod {name} is gone, status {phase} not written")
                return False
            raise
        self._note(f"kubelet: pod {name} {phase}")
        return True

    def finish_deletion(self, name: str) -> None:
        """The kubelet, once a terminating pod's containers are dead: delete with grace 0."""
        try:
            self.core.delete_namespaced_pod(
                name,
                self.namespace,
                grace_period_seconds=0,
                body={"gracePeriodSeconds": 0},
                _preload_content=False,
            )
            self._note(f"kubelet: pod {name} removed")
        except ApiException as error:
            if error.status != 404:
                raise

    # -- what the test reads -----------------------------------------------------------------
    def pod_names(self) -> list[str]:
        return sorted(p.metadata.name for p in self.core.list_namespaced_pod(self.namespace).items)

    def events(self, reason: str | None = None) -> list:
        items = self.core.list_namespaced_event(self.namespace).items
        return [e for e in items if reason is None or e.reason == reason]


def running(**kw) -> dict:
    return cs(at=now(), **kw)


def terminated(exit_code: int, reason: str, **kw) -> dict:
    return cs(state="terminated", exit_code=exit_code, reason=reason, at=now(), **kw)


def crash_looping(restarts: int, last_exit: int = 1) -> dict:
    return cs(state="waiting", reason="CrashLoopBackOff", restarts=restarts, last_exit=last_exit, at=now())


# -- the seed's experiments ---------------------------------------------------------------------


@dataclass
class Outcome:
    """What a played timeline leaves for the assertions."""

    job: dict
    pods: dict[str, dict]
    terminal_write: float | None = None  # time.monotonic() when the job's terminal status was sent
    # The last restartCount and exit code the kubelet wrote per worker (the evidence expected).
    restarts: dict[str, int] = field(default_factory=dict)
    exit_codes: dict[str, int] = field(default_factory=dict)


def seed_job(clean_pod_policy: str | None, namespace: str, name: str = "pytest") -> dict:
    """The seed's PyTorchJob `pytest`: 1 master + 3 workers, OnFailure, no backoffLimit."""
    return builders.job("PyTorchJob", name, namespace, clean_pod_policy=clean_pod_policy)


def _workers(pods: dict[str, dict]) -> list[str]:
    return sorted(n for n in pods if "-worker-" in n)


def _master(pods: dict[str, dict]) -> str:
    return next(n for n in pods if "-master-" in n)


def experiment_1(play: Play, *, operator_cleanup: bool = True, name: str = "pytest") -> Outcome:
    """cleanPodPolicy All, the job succeeds (docs/seed.md, experiment 1).

    With `operator_cleanup` the operator deletes every pod at 34s and the kubelet reports the
    workers' SIGTERM (exit 143) and removes them at 35-36s; without it the job is Succeeded
    at 35s and the pods are left for podsweeper.
    """
    job = play.submit(seed_job("All", play.namespace, name))
    pods = play.create_pods(job)
    out = Outcome(job, pods)
    master, workers = _master(pods), _workers(pods)
    play.job_conditions(job, "Created")
    play.at(2)
    play.pod_status(master, "Running", running())
    play.at(4)
    play.job_conditions(job, "Created", "Running")
    play.at(6)
    for w in workers:
        play.pod_status(w, "Running", running())
    play.at(33)
    play.pod_status(master, "Succeeded", terminated(0, "Completed"))
    if operator_cleanup:
        play.at(34)
        play.delete_pods([master, *workers])
    play.at(35)
    out.terminal_write = play.job_conditions(job, "Created", "Running", "Succeeded")
    if operator_cleanup:
        for w in workers:
            play.pod_status(w, "Failed", terminated(143, "Error"))
        play.at(36)
        for w in workers:
            play.finish_deletion(w)
    return out


def experiment_2(play: Play, *, until: float = 165, name: str = "pytest") -> Outcome:
    """No backoffLimit, every worker fails, the master succeeds: the job is Succeeded at 34s
    while the workers crash-loop (docs/seed.md, experiment 2). Steps after `until`
    seconds are not played; a worker deleted meanwhile gets no further status."""
    job = play.submit(seed_job(None, play.namespace, name))
    pods = play.create_pods(job)
    out = Outcome(job, pods)
    master, workers = _master(pods), _workers(pods)
    alive = set(workers)

    def kubelet(seconds: float, phase: str, make, restarts: int, exit_code: int | None) -> None:
        play.at(seconds)
        for w in sorted(alive):
            if play.pod_status(w, phase, make()):
                out.restarts[w] = restarts
                if exit_code is not None:
                    out.exit_codes[w] = exit_code
            else:
                alive.discard(w)

    play.job_conditions(job, "Created")
    play.at(2)
    play.pod_status(master, "Running", running())
    play.job_conditions(job, "Created", "Running")
    kubelet(6, "Running", running, 0, None)
    kubelet(16, "Running", lambda: terminated(1, "Error"), 0, 1)
    kubelet(17, "Running", lambda: running(restarts=1, last_exit=1), 1, 1)
    kubelet(27, "Running", lambda: terminated(1, "Error", restarts=1), 1, 1)
    play.at(33)
    play.pod_status(master, "Succeeded", terminated(0, "Completed"))
    play.at(34)
    out.terminal_write = play.job_conditions(job, "Created", "Running", "Succeeded")
    for seconds, phase, make, restarts in (
        (40, "Running", lambda: crash_looping(2), 2),
        (60, "Running", lambda: running(restarts=2, last_exit=1), 2),
        (70, "Running", lambda: terminated(1, "Error", restarts=2), 2),
        (100, "Running", lambda: crash_looping(3), 3),
        (165, "Running", lambda: crash_looping(4), 4),
    ):
        if seconds > until or not alive:
            break
        kubelet(seconds, phase, make, restarts, 1)
    return out
