"""Many objects at once on a test control plane: concurrent raw HTTPS requests as admin.

Far cheaper per request than the kubernetes client, so set-ups of tens of thousands of
objects are bounded by the API server, not by the test process. Used by the benchmarks
(bench/bigjobs.py) and by the tests that need a large scope (a crowd of pods).
"""

from __future__ import annotations

import http.client
import json
import secrets
import ssl
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from urllib.parse import urlparse

from tests.fixtures import builders as b
from tests.fixtures.builders import for_create


class RawApi:
    """Concurrent raw HTTPS requests to kube-apiserver as admin: one keep-alive connection per
    thread, bodies pre-encoded. Far cheaper per request than the kubernetes client, so set-ups
    of tens of thousands of objects are bounded by the API server, not by this process."""

    def __init__(self, cp, threads: int = 16):
        url = urlparse(cp.url)
        self.host, self.port = url.hostname, url.port
        self.token = cp.tokens["admin"]
        self.context = ssl.create_default_context(cafile=str(cp.ca_file))
        self.threads = threads
        self.local = threading.local()

    def _conn(self) -> http.client.HTTPSConnection:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=60)
            self.local.conn = conn
        return conn

    def request(
        self, method: str, path: str, body: bytes | None = None, content_type: str = "application/json"
    ) -> tuple[int, bytes]:
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        for attempt in (1, 2):
            conn = self._conn()
            try:
                conn.request(method, path, body=body, headers=headers)
                response = conn.getresponse()
                return response.status, response.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                self.local.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def ok(self, method: str, path: str, body: bytes | None = None, content_type: str = "application/json"):
        status, data = self.request(method, path, body, content_type)
        if status >= 300:
            raise RuntimeError(f"{method} {path}: {status} {data[:300]!r}")
        return json.loads(data) if data else None

    def many(self, fn, items) -> list:
        with ThreadPoolExecutor(self.threads) as pool:
            return list(pool.map(fn, items))

    # -- objects ---------------------------------------------------------------------------
    def namespace(self, prefix: str) -> str:
        name = f"{prefix}-{secrets.token_hex(3)}"
        self.ok("POST", "/api/v1/namespaces", json.dumps({"metadata": {"name": name}}).encode())
        return name

    def delete_namespace(self, name: str) -> None:
        self.request("DELETE", f"/api/v1/namespaces/{name}")

    def create_job(self, namespace: str, name: str, replicas: dict[str, int], policy: str = "None") -> dict:
        job = b.job(
            "PyTorchJob", name, namespace, clean_pod_policy=policy, backoff_limit=3, replicas=replicas
        )
        path = f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs"
        return self.ok("POST", path, json.dumps(for_create(job)).encode())

    def job_conditions(self, job: dict, conditions) -> dict:
        meta = job["metadata"]
        body = json.dumps({"status": b.set_conditions(job, conditions)["status"]}).encode()
        path = f"/apis/kubeflow.org/v1/namespaces/{meta['namespace']}/pytorchjobs/{meta['name']}/status"
        return self.ok("PATCH", path, body, "application/merge-patch+json")

    def create_pods(self, job: dict) -> list[str]:
        """The job's pods as the operator creates them (no node: deletes are immediate)."""
        namespace = job["metadata"]["namespace"]
        spec = job["spec"]["pytorchReplicaSpecs"]
        bodies = [
            json.dumps(for_create(b.pod(job, rtype, index, node=None))).encode()
            for rtype, replica in spec.items()
            for index in range(replica["replicas"])
        ]
        path = f"/api/v1/namespaces/{namespace}/pods"
        return [p["metadata"]["name"] for p in self.many(lambda body: self.ok("POST", path, body), bodies)]

    def pod_status(self, namespace: str, names: list[str], at: datetime) -> None:
        """The kubelet reports each pod Running (its container started at `at`)."""
        body = json.dumps(
            {"status": {"phase": "Running", "containerStatuses": [b.container_status(at=at)]}}
        ).encode()
        self.many(
            lambda name: self.ok(
                "PATCH",
                f"/api/v1/namespaces/{namespace}/pods/{name}/status",
                body,
                "application/merge-patch+json",
            ),
            names,
        )


# The value Kueue's MultiKueue writes: the training operator (v1.9+) leaves such a job to it,
# so a crowd's jobs stay as created and their pods are the test's own (no operator Services).
ELSEWHERE = "kueue.x-k8s.io/multikueue"
NO_SCHEDULER = "podsweeper-crowd"  # no scheduler by this name: the pods stay Pending, unbound


def crowd(raw: RawApi, namespace: str, jobs: int, workers: int, pods: bool = True) -> tuple[list[dict], int]:
    """`jobs` running PyTorchJobs of `workers` workers each in `namespace`, with their pods (unless
    `pods` is false) as the operator labels and owns them: nothing any rule names (running
    jobs, backoffLimit set, no crash loop), so a sweep lists them all and acts on none. The
    jobs are managed elsewhere (MultiKueue's value), so the real operator leaves them and
    their pods alone; the pods name a scheduler no one runs. Returns (the jobs as stored,
    pods created)."""
    path = f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs"

    def create(index: int) -> dict:
        job = b.job(
            "PyTorchJob", f"crowd-{index:04d}", namespace, backoff_limit=3, replicas={"Worker": workers}
        )
        job["spec"]["runPolicy"]["managedBy"] = ELSEWHERE
        return raw.ok("POST", path, json.dumps(for_create(job)).encode())

    made = raw.many(create, range(jobs))
    now = datetime.now().astimezone()
    made = raw.many(lambda job: raw.job_conditions(job, [("Created", now), ("Running", now)]), made)
    bodies = []
    for job in made if pods else ():
        for index in range(workers):
            pod = for_create(b.pod(job, "Worker", index, node=None))
            pod["spec"]["schedulerName"] = NO_SCHEDULER
            bodies.append(json.dumps(pod).encode())
    pods_path = f"/api/v1/namespaces/{namespace}/pods"
    raw.many(lambda body: raw.ok("POST", pods_path, body), bodies)
    return made, len(bodies)
