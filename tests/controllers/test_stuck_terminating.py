"""Rule stuck-terminating on the real world (tests/support/world: kwok nodes, kube-controller-manager,
the training operator v1.9.4), as the served function (tests/support/stack FunctionServer) decides it
in the backstop sweep.

The scene, on the module's own control plane:
- node LOST, managed by kwok at first, runs the two workers of PyTorchJob `lost`; then the
  node is lost: its kubelet (kwok) stops and the Node reads `Ready: Unknown`;
- PyTorchJob `held` runs its worker on a Ready kwok node, with a finalizer the test holds;
- both jobs have `cleanPodPolicy: Running`: when the masters succeed the operator deletes the
  running workers (grace period 1 s). No kubelet finishes the delete on LOST, and the
  finalizer keeps `held`'s worker: three workers terminating, two of them on a lost node.

How a node is lost here. kwok v0.8.0 (`--manage-nodes-with-annotation-selector`) filters its
node events on the annotation but never forgets a node that stops matching: with the
annotation removed it still finalised the pods' deletes on that node, and its heartbeat put
`Ready: True` back 15-20 s after the test wrote `Unknown`. It lets go of a node only on a
Deleted event. So the Node is deleted (kwok drops it and its pods' stages) and created again
without the annotation, in the state the node-lifecycle controller writes for a node whose
kubelet stopped posting (`Ready: Unknown`, reason NodeStatusUnknown, the unreachable taints):
that controller is not run in the world (see tests/support/world/README.md), nor is the pod garbage
collector, which would force-delete pods of a Node that stays deleted.

Then, one hand-POSTed sweep each (the sweep is synchronous: it is done when it answers):
rule on without the overlay's RBAC (503, nothing deleted); the overlay's RBAC applied; rule
off (nothing); dry-run (decided, nothing deleted); on (only the two workers on LOST go, by a
force delete; the Event names the node and how long it has been Unknown).
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from tests.controllers import lost_node
from tests.fixtures.builders import secret_env
from tests.support.harness.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
NODES_RBAC = ROOT / "knative" / "overlays" / "stuck-terminating" / "nodes-rbac.yaml"
NS = "stuck"
LOST = "stuck-lost-node"
HOLD = "podsweeper.dev/test-hold"  # the test's finalizer on `held`'s worker
LIMIT = 3  # PODSWEEPER_STUCK_TERMINATING_SECONDS in the tests that turn the rule on
# Kueue's annotation: `unsafe`'s worker says "false" (never), `safe`'s "true" (not before Kueue's
# 60 s and the operator grace, long after this test's sweeps).
KUEUE_SAFE = "kueue.x-k8s.io/safe-to-forcefully-delete"
GRACE = 1  # the workers' terminationGracePeriodSeconds
# The masters succeed after this; the node must be lost before (the race is asserted).
MASTER_RUN = 8
FINISHED = {"Succeeded", "Failed"}


def say(text: str) -> None:
    print(f"\nstuck-terminating: {text}", file=sys.stderr, flush=True)


def job(name: str, worker_node: str, master_node: str, workers: int, kueue_safe: str | None = None) -> dict:
    """`kueue_safe`: the workers' kueue.x-k8s.io/safe-to-forcefully-delete."""

    def replica(count: int, node: str, sim: dict, more: dict | None = None) -> dict:
        annotations = {f"sim.podsweeper.dev/{k}": v for k, v in sim.items()} | (more or {})
        return {
            "replicas": count,
            "restartPolicy": "OnFailure",
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "terminationGracePeriodSeconds": GRACE,
                    "containers": [
                        {
                            "name": "pytorch",
                            "image": "sim",
                            "env": secret_env(),
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                },
            },
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "Running"},
            "pytorchReplicaSpecs": {
                "Master": replica(1, master_node, {"exit-code": "0", "run-for": f"{MASTER_RUN}s"}),
                "Worker": replica(
                    workers,
                    worker_node,
                    {"exit-code": "0", "run-for": "1h"},
                    {KUEUE_SAFE: kueue_safe} if kueue_safe is not None else None,
                ),
            },
        },
    }


def ping_event() -> dict:
    return {
        "specversion": "1.0",
        "id": str(uuid.uuid4()),
        "source": "tests.controllers.test_stuck_terminating",
        "type": "dev.knative.sources.ping",
        "data": {},
    }


class Scene:
    """The module's world, the two jobs, and the admin calls the test makes."""

    def __init__(self, cp, world):
        from kubernetes import client

        self.cp, self.world = cp, world
        self.api = cp.api_client("admin")
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.rbac = client.RbacAuthorizationV1Api(self.api)
        self.lost_at: datetime | None = None
        self.swept_at: datetime | None = None
        # Not under the world's workdir, which World.stop removes: the security suite reads
        # every served function's log at the end of the run.
        self.workdir = Path(tempfile.mkdtemp(prefix="podsweeper-stuck-"))

    def pods(self) -> dict[str, dict]:
        body = json.loads(self.core.list_namespaced_pod(NS, _preload_content=False).data)
        return {p["metadata"]["name"]: p for p in body.get("items") or []}

    def job(self, name: str) -> dict:
        return self.custom.get_namespaced_custom_object("kubeflow.org", "v1", NS, "pytorchjobs", name)

    def finished(self, name: str) -> bool:
        conditions = (self.job(name).get("status") or {}).get("conditions") or []
        return any(c["type"] in FINISHED and c["status"] == "True" for c in conditions)

    def ready(self, node: str) -> str:
        conditions = self.core.read_node(node).status.conditions or []
        return next((c.status for c in conditions if c.type == "Ready"), "")

    def workers(self, job_name: str) -> dict[str, dict]:
        return {n: p for n, p in self.pods().items() if n.startswith(f"{job_name}-worker-")}

    def lose_node(self) -> None:
        """The kubelet of LOST stops for good; the Node says so as node-lifecycle would."""
        self.lost_at = lost_node.lose(self.core, LOST)

    def sweep(self, env: dict[str, str], label: str):
        """Serve the function with `env`, POST one sweep, stop it; (status, summary, decisions).
        `self.swept_at` is when the sweep was sent (the function's "now", to the second)."""
        from tests.support.stack import FunctionServer

        function = FunctionServer(
            self.cp.function_kubeconfig, [NS], env=env, workdir=self.workdir / label, log=sys.stderr
        ).start()
        try:
            started = time.monotonic()
            self.swept_at = datetime.now(UTC)
            response = function.post(ping_event())
            say(
                f"{label}: sweep answered {response.status_code} in {time.monotonic() - started:.2f}s: "
                f"{response.text.strip()}"
            )
            if response.status_code != 200:
                say(f"{label}: function log tail:\n{function.tail(15)}")
            decisions = [d for d in function.decisions() if d.get("rule") == "stuck-terminating"]
            summary = json.loads(response.text) if response.status_code == 200 else {}
            return response.status_code, summary, decisions
        finally:
            function.stop()


@pytest.fixture(scope="module")
def scene():
    from tests.support.controlplane.launcher import ControlPlane
    from tests.support.world.launcher import World

    started = time.monotonic()
    with ControlPlane(log=sys.stderr) as cp, World(cp, log=sys.stderr) as world:
        say(f"world ready in {time.monotonic() - started:.1f}s")
        s = Scene(cp, world)
        try:
            yield s
        finally:
            s.api.close()


def test_stuck_terminating_force_deletes_only_on_the_lost_node(scene, record_property):
    s = scene
    t0 = time.monotonic()
    s.core.create_namespace({"metadata": {"name": NS}})
    s.core.create_node(lost_node.node_body(LOST, kwok=True))
    wait_for("kwok makes the new node Ready", lambda: s.ready(LOST) == "True", timeout=30)
    # The API server's admission taints a new node not-ready; only node-lifecycle lifts it.
    s.core.patch_node(LOST, {"spec": {"taints": None}})

    ready_node, master_node = s.world.nodes[1], s.world.nodes[0]
    jobs = (
        ("lost", LOST, 2, None),
        ("held", ready_node, 1, None),
        ("unsafe", LOST, 1, "false"),
        ("safe", LOST, 1, "true"),
    )
    for name, node, workers, kueue_safe in jobs:
        s.custom.create_namespaced_custom_object(
            "kubeflow.org", "v1", NS, "pytorchjobs", job(name, node, master_node, workers, kueue_safe)
        )

    def all_running() -> bool:
        pods = s.pods()
        return len(pods) == 9 and all(p["status"].get("phase") == "Running" for p in pods.values())

    wait_for("the 9 pods Running on their nodes", all_running, timeout=30)
    (held,) = s.workers("held")
    s.core.patch_namespaced_pod(held, NS, {"metadata": {"finalizers": [HOLD]}})
    lost_workers = s.workers("lost")
    assert {p["spec"]["nodeName"] for p in lost_workers.values()} == {LOST}

    s.lose_node()
    assert not s.finished("lost"), (
        f"the master finished before the node was lost: raise MASTER_RUN ({MASTER_RUN})"
    )
    say(f"node {LOST} lost {time.monotonic() - t0:.1f}s into the test; workers {sorted(lost_workers)}")

    # The masters succeed, the operator deletes the running workers: none of the deletes ends.
    def terminating() -> dict[str, dict]:
        pods = s.workers("lost") | s.workers("held") | s.workers("unsafe") | s.workers("safe")
        deleting = {n: p for n, p in pods.items() if p["metadata"].get("deletionTimestamp")}
        return deleting if len(deleting) == 5 else {}

    deleting = wait_for("the operator deletes the 5 workers", terminating, timeout=MASTER_RUN + 30)
    assert all(s.finished(name) for name, *_ in jobs)
    kept_by_kueue_annotation = {**s.workers("unsafe"), **s.workers("safe")}
    due = max(
        datetime.strptime(p["metadata"]["deletionTimestamp"], "%Y-%m-%dT%H:%M:%SZ") for p in deleting.values()
    )
    # Past the limit for every one of them (deletionTimestamp is when the grace period ends).
    wait = due.replace(tzinfo=UTC).timestamp() + LIMIT + 1 - time.time()
    if wait > 0:
        time.sleep(wait)
    before = {n: p["metadata"]["uid"] for n, p in s.pods().items()}
    assert set(deleting) <= set(before)
    say(f"5 workers terminating, {LIMIT}s past their grace, {time.monotonic() - t0:.1f}s into the test")

    # Rule on, but the function may not read nodes (the base RBAC): the sweep fails, loudly.
    status, _, decisions = s.sweep({"PODSWEEPER_STUCK_TERMINATING_SECONDS": str(LIMIT)}, "on-no-rbac")
    assert status == 503 and decisions == []
    assert {n: p["metadata"]["uid"] for n, p in s.pods().items()} == before

    # The overlay's one extra power.
    for doc in yaml.safe_load_all(NODES_RBAC.read_text()):
        if doc["kind"] == "ClusterRole":
            s.rbac.create_cluster_role(doc)
        else:
            s.rbac.create_cluster_role_binding(doc)
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    function_api = s.cp.api_client("function")

    def can_read_node() -> bool:
        try:
            return client.CoreV1Api(function_api).read_node(LOST) is not None
        except ApiException:
            return False

    try:
        wait_for("the function may get nodes", can_read_node, timeout=10)
    finally:
        function_api.close()

    # Rule off (the default): the sweep runs and leaves every terminating pod alone.
    status, summary, decisions = s.sweep({}, "off")
    assert status == 200 and decisions == [] and "stuck" not in summary.get("note", "")
    assert {n: p["metadata"]["uid"] for n, p in s.pods().items()} == before

    # Dry-run: the same decisions as below, nothing deleted.
    status, summary, decisions = s.sweep(
        {"PODSWEEPER_STUCK_TERMINATING_SECONDS": str(LIMIT), "PODSWEEPER_DRY_RUN": "true"}, "dry-run"
    )
    assert status == 200
    assert sorted((d["name"], d["action"], d["result"]) for d in decisions) == [
        (name, "force-delete", "dry-run") for name in sorted(lost_workers)
    ]
    assert {n: p["metadata"]["uid"] for n, p in s.pods().items()} == before

    # On: the two workers on the lost node go at once; the one on the Ready node stays.
    status, summary, decisions = s.sweep({"PODSWEEPER_STUCK_TERMINATING_SECONDS": str(LIMIT)}, "on")
    assert status == 200, summary
    assert sorted((d["name"], d["uid"], d["action"], d["result"]) for d in decisions) == [
        (name, pod["metadata"]["uid"], "force-delete", "deleted")
        for name, pod in sorted(lost_workers.items())
    ]
    for d in decisions:
        assert f"on node {LOST}, which is Unknown" in d["reason"], d["reason"]
    assert "2 of 3 pod(s) stuck terminating force-deleted" in summary["note"], summary
    after = s.pods()
    assert set(after) == set(before) - set(lost_workers)
    # Their owner's word: "false" never, "true" not yet (Kueue's turn and the grace first).
    assert all(
        after[name]["metadata"]["uid"] == pod["metadata"]["uid"]
        for name, pod in kept_by_kueue_annotation.items()
    )
    assert after[held]["metadata"]["deletionTimestamp"] and after[held]["spec"]["nodeName"] == ready_node
    assert s.ready(ready_node) == "True"

    # The Event on the job names the node and how long it has been Unknown.
    lost_uid = s.job("lost")["metadata"]["uid"]
    events = [
        e
        for e in s.core.list_namespaced_event(NS, field_selector="reason=PodsCleanedUp").items
        if e.involved_object.uid == lost_uid
    ]
    assert len(events) == 1, [e.message for e in events]
    message = events[0].message
    say(f"Event: {message}")
    assert s.lost_at is not None and s.swept_at is not None
    unknown_for = (s.swept_at - s.lost_at).total_seconds()
    shown = re.findall(
        rf"({'|'.join(lost_workers)}) \[stuck-terminating\] \(force-deleted \d+s past its "
        rf"grace period; node {LOST} Unknown for (\d+)s\)",
        message,
    )
    assert sorted(name for name, _ in shown) == sorted(lost_workers), message
    assert all(abs(int(seconds) - unknown_for) <= 2 for _, seconds in shown), (message, unknown_for)
    record_property("stuck_unknown_for_s", round(unknown_for, 1))
    record_property("stuck_test_wall_s", round(time.monotonic() - t0, 1))
    say(f"done {time.monotonic() - t0:.1f}s into the test (node Unknown for {unknown_for:.0f}s)")
    s.core.patch_namespaced_pod(held, NS, {"metadata": {"finalizers": None}})
