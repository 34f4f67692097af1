"""Kueue's alpha FailureRecoveryPolicy against the real Kueue v0.17.0 manager: which terminating
pods it force-deletes, and when, so that podsweeper's `stuck-terminating` never races it.

Kueue (tests/controllers/kueue_world.py: built from its Go module, out of cluster, admin
kubeconfig) runs beside the test world (tests/support/world: kwok nodes, kube-controller-manager
without the node-lifecycle controller, the training operator). The pods are plain pods (no
`kueue.x-k8s.io/queue-name`, no Workload: Kueue's pod integration is off by default), bound by
`nodeName` to three extra kwok nodes and Running there; then the nodes are lost the way
tests/controllers/test_stuck_terminating.py loses one (README "Making a kwok node lost": the Node
is deleted and created again without kwok's annotation, with what the node-lifecycle controller
would write):

- UNREACHABLE: Ready `Unknown`, taints `node.kubernetes.io/unreachable` NoSchedule + NoExecute;
- NOTREADY: Ready `False` (KubeletNotReady), taints `node.kubernetes.io/not-ready`;
- LATE: Ready `Unknown` without a taint at first; tainted unreachable only once Kueue's
  threshold for its pod has passed.

Nothing else acts on those pods (no kubelet, no pod GC, no taint eviction): whatever deletes
one is Kueue. A pod watch timestamps every change. The run, one scene for all the tests:

1. Kueue with its default feature gates; `g1-true` (annotation "true", UNREACHABLE) deleted
   (grace 1 s) and left past deletionTimestamp + 60 s: nothing happens.
2. Kueue restarted with `FailureRecoveryPolicy: true`: `g1-true` goes at start-up.
3. Deleted together (grace 1 s unless said): `true`, `false`, `absent`, `true-grace30` (grace
   30 s), `true-queue-label` (with a queue-name label, still unmanaged), `late-annotation` (the
   annotation added *after* the delete) on UNREACHABLE; `notready-true` on NOTREADY; `late-true`
   on LATE; `ready-true` on a Ready kwok node, held by a finalizer; `failed-true` (UNREACHABLE)
   whose phase is written Failed just after the delete. Watched until 15 s past the last
   threshold.
4. Kueue restarted: what its start-up pass does with the pods the running one left.

Run with -s to see the timeline.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from datetime import UTC, datetime

import pytest

from tests.controllers import lost_node
from tests.controllers.kueue_world import CONTROLLER, FEATURE_GATE, KUEUE_VERSION, Kueue
from tests.support.harness.waiting import wait_for

# What the upstream controllers do, pinned: run by `make world-facts` when a pinned version
# changes (tests/support/world/facts.py), not by every CI run.
pytestmark = pytest.mark.world_facts

NS = "kueue-failure-recovery"
ANNOTATION = "kueue.x-k8s.io/safe-to-forcefully-delete"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
CONDITION = ("KueueFailureRecovery", "KueueForcefullyDeleted")
# Kueue v0.17.0's forcefulTerminationGracePeriod: time.Minute in pod_termination_controller.go,
# not in the Configuration (failurerecovery.SetupControllers passes no option).
KUEUE_WAIT = 60
UNREACHABLE, NOTREADY, LATE = "kfr-unreachable", "kfr-notready", "kfr-late"
HOLD = "podsweeper.dev/test-hold"
# Bounds on Kueue's act after its threshold: it requeues for exactly the remaining time; seen
# 0.0-1.0 s late (deletionTimestamp has whole seconds). 5 s for a busy 2-core machine.
SLACK = 5
QUIET = 15  # how long past a threshold a pod Kueue must not touch is watched


def say(text: str) -> None:
    print(f"kueue-facts: {text}", file=sys.stderr, flush=True)


def parse_time(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def pod_body(name: str, node: str, annotation: str | None, *, grace: int = 1, labels=None, finalizer=False):
    # run-for 1h: kwok's pod-succeed stage, timed when the pod started, still fires after the
    # node is lost (a first run saw the pods Succeeded 10 s after start, before Kueue's turn).
    metadata: dict = {
        "name": name,
        "labels": {"app": "kfr", **(labels or {})},
        "annotations": {"sim.podsweeper.dev/run-for": "1h"},
    }
    if annotation is not None:
        metadata["annotations"][ANNOTATION] = annotation
    if finalizer:
        metadata["finalizers"] = [HOLD]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": grace,
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "sim"}],
            # As a training pod has them (DefaultTolerationSeconds): nothing evicts here anyway.
            "tolerations": [
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
            ],
        },
    }


class PodWatch:
    """Every change of the namespace's pods, timestamped on arrival (time.time())."""

    def __init__(self, cp):
        self.cp = cp
        self.events: list[tuple[float, str, dict]] = []
        self.stopped = False
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import requests

        session = requests.Session()
        session.trust_env = False
        session.headers["Authorization"] = f"Bearer {self.cp.tokens['admin']}"
        version = ""
        while not self.stopped:
            params = {"watch": "true", "timeoutSeconds": "30"}
            if version:
                params["resourceVersion"] = version
            try:
                with session.get(
                    f"{self.cp.url}/api/v1/namespaces/{NS}/pods",
                    params=params,
                    stream=True,
                    verify=str(self.cp.ca_file),
                    timeout=(5, 60),
                ) as response:
                    for line in response.iter_lines():
                        if self.stopped:
                            return
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        if event["type"] == "ERROR":  # 410 Gone: list again from now
                            version = ""
                            continue
                        obj = event["object"]
                        version = obj["metadata"].get("resourceVersion", version)
                        with self.lock:
                            self.events.append((time.time(), event["type"], obj))
            except Exception as error:  # noqa: BLE001 - a dropped watch is resumed
                if not self.stopped:
                    say(f"watch resumed after {type(error).__name__}: {error}")
                    time.sleep(0.2)

    def of(self, name: str) -> list[tuple[float, str, dict]]:
        with self.lock:
            return [e for e in self.events if e[2]["metadata"]["name"] == name]

    def deleted(self, name: str) -> tuple[float, dict] | None:
        for at, kind, obj in self.of(name):
            if kind == "DELETED":
                return at, obj
        return None

    def failed_by_kueue(self, name: str) -> tuple[float, dict] | None:
        for at, _, obj in self.of(name):
            conditions = (obj.get("status") or {}).get("conditions") or []
            if any((c.get("type"), c.get("reason")) == CONDITION for c in conditions):
                return at, obj
        return None

    def stop(self) -> None:
        self.stopped = True


class Scene:
    def __init__(self, cp, world):
        from kubernetes import client

        self.cp, self.world = cp, world
        self.api = cp.api_client("admin")
        self.core = client.CoreV1Api(self.api)
        self.deleted_at: dict[str, float] = {}  # when the test sent each DELETE
        self.deletion_timestamp: dict[str, float] = {}
        self.notes: dict[str, float | str] = {}
        self.kueue_starts: list[tuple[float, float]] = []  # (launched, ready) per gate-on start
        self.kueue_logs: list[str] = []
        self.current: Kueue | None = None

    def ready(self, node: str) -> str:
        conditions = self.core.read_node(node).status.conditions or []
        return next((c.status for c in conditions if c.type == "Ready"), "")

    def pod(self, name: str) -> dict | None:
        from kubernetes.client.rest import ApiException

        try:
            return json.loads(self.core.read_namespaced_pod(name, NS, _preload_content=False).data)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def lose(self, node: str, *, ready: str, taint: str | None) -> None:
        """Delete the Node (kwok forgets it) and create it as node-lifecycle would leave it."""
        lost_node.lose(self.core, node, ready=ready, taint=taint)

    def taint_unreachable(self, node: str) -> None:
        taints = [
            {"key": "node.kubernetes.io/unreachable", "effect": effect}
            for effect in ("NoSchedule", "NoExecute")
        ]
        self.core.patch_node(node, {"spec": {"taints": taints}})

    def delete(self, name: str, grace: int | None = None) -> None:
        body = {"gracePeriodSeconds": grace} if grace is not None else None
        self.deleted_at[name] = time.time()
        self.core.delete_namespaced_pod(name, NS, body=body)
        pod = self.pod(name)
        assert pod is not None and pod["metadata"].get("deletionTimestamp"), pod
        self.deletion_timestamp[name] = parse_time(pod["metadata"]["deletionTimestamp"])

    def threshold(self, name: str) -> float:
        return self.deletion_timestamp[name] + KUEUE_WAIT

    def kueue(self, label: str, *, gate: bool) -> Kueue:
        k = Kueue(self.cp, self.world.workdir / f"kueue-{label}", feature_gate=gate)
        launched = time.time()
        self.current = k
        k.start()
        if gate:
            self.kueue_starts.append((launched, time.time()))
        return k

    def stop_kueue(self, k: Kueue) -> None:
        k.stop()
        self.current = None
        assert k.process is not None
        self.kueue_logs.append(k.process.text())


GROUP2 = {
    # name: (node, annotation, grace, labels, finalizer)
    "true": (UNREACHABLE, "true", 1, None, False),
    "false": (UNREACHABLE, "false", 1, None, False),
    "absent": (UNREACHABLE, None, 1, None, False),
    "true-grace30": (UNREACHABLE, "true", 30, None, False),
    "true-queue-label": (UNREACHABLE, "true", 1, {QUEUE_LABEL: "no-such-queue"}, False),
    "late-annotation": (UNREACHABLE, None, 1, None, False),
    "notready-true": (NOTREADY, "true", 1, None, False),
    "late-true": (LATE, "true", 1, None, False),
    "ready-true": ("kwok-node-1", "true", 1, None, True),
    "failed-true": (UNREACHABLE, "true", 1, None, False),  # phase Failed after the delete
}


@pytest.fixture(scope="module")
def scene():
    from tests.support.controlplane.launcher import ControlPlane
    from tests.support.world.launcher import World

    t0 = time.monotonic()
    with ControlPlane(log=sys.stderr) as cp, World(cp, webhooks=False, log=sys.stderr) as world:
        say(f"world ready in {time.monotonic() - t0:.1f}s")
        s = Scene(cp, world)
        s.core.create_namespace({"metadata": {"name": NS}})
        watch = PodWatch(cp)
        s.watch = watch
        try:
            run(s)
            yield s
        finally:
            watch.stop()
            if s.current is not None:
                s.stop_kueue(s.current)
            for name in GROUP2:
                if s.pod(name):
                    s.core.patch_namespaced_pod(name, NS, {"metadata": {"finalizers": None}})
            s.api.close()


def run(s: Scene) -> None:
    t0 = time.monotonic()
    for node in (UNREACHABLE, NOTREADY, LATE):
        s.core.create_node(lost_node.node_body(node, kwok=True))
    for node in (UNREACHABLE, NOTREADY, LATE):
        wait_for(f"kwok makes {node} Ready", lambda node=node: s.ready(node) == "True", timeout=30)
        s.core.patch_node(node, {"spec": {"taints": None}})
    pods = {"g1-true": (UNREACHABLE, "true", 1, None, False), **GROUP2}
    for name, (node, annotation, grace, labels, finalizer) in pods.items():
        s.core.create_namespaced_pod(
            NS, pod_body(name, node, annotation, grace=grace, labels=labels, finalizer=finalizer)
        )

    def running() -> bool:
        return all((s.pod(n) or {}).get("status", {}).get("phase") == "Running" for n in pods)

    wait_for(f"the {len(pods)} pods Running", running, timeout=60)
    s.lose(UNREACHABLE, ready="Unknown", taint="node.kubernetes.io/unreachable")
    s.lose(NOTREADY, ready="False", taint="node.kubernetes.io/not-ready")
    s.lose(LATE, ready="Unknown", taint=None)
    say(f"pods Running, nodes lost, {time.monotonic() - t0:.0f}s")

    # 1. The default feature gates.
    k = s.kueue("default-gates", gate=False)
    s.notes["default_gates_log"] = "\n".join(k.log_lines(FEATURE_GATE))
    s.notes["default_gates_controller"] = "\n".join(k.log_lines(CONTROLLER))
    s.delete("g1-true")
    until = s.threshold("g1-true") + QUIET
    say(f"default gates: g1-true deleted; waiting {until - time.time():.0f}s past Kueue's threshold")
    time.sleep(max(0.0, until - time.time()))
    s.notes["g1_after_default_gates"] = "present" if s.pod("g1-true") else "gone"
    s.stop_kueue(k)

    # 2. The gate on: g1-true is long past its threshold.
    k = s.kueue("gate-on", gate=True)
    wait_for("g1-true force-deleted", lambda: s.watch.deleted("g1-true"), timeout=30)

    # 3. Group 2.
    for name in GROUP2:
        s.delete(name, grace=None)  # the pod's own terminationGracePeriodSeconds
    s.core.patch_namespaced_pod("late-annotation", NS, {"metadata": {"annotations": {ANNOTATION: "true"}}})
    # Failed while terminating, as a kubelet reports a container that ended on SIGTERM just
    # before its node went silent (a pod already Failed is removed by the DELETE at once).
    s.core.patch_namespaced_pod_status("failed-true", NS, {"status": {"phase": "Failed"}})
    s.notes["late_annotation_patched"] = time.time()
    taint_at = s.threshold("late-true") + 10
    time.sleep(max(0.0, taint_at - time.time()))
    s.taint_unreachable(LATE)
    s.notes["late_tainted"] = time.time()
    say(
        f"{LATE} tainted unreachable {time.time() - s.threshold('late-true'):.1f}s past late-true's threshold"
    )
    until = max(s.threshold(n) for n in GROUP2) + QUIET
    time.sleep(max(0.0, until - time.time()))
    s.notes["before_restart"] = json.dumps(sorted(n for n in GROUP2 if s.pod(n)))
    s.stop_kueue(k)

    # 4. A restart.
    s.notes["restart_launched"] = time.time()
    k = s.kueue("restart", gate=True)
    time.sleep(QUIET)
    s.notes["after_restart"] = json.dumps(sorted(n for n in GROUP2 if s.pod(n)))
    s.stop_kueue(k)
    say(f"scene done in {time.monotonic() - t0:.0f}s")
    timeline(s)


def timeline(s: Scene) -> None:
    for name in ["g1-true", *GROUP2]:
        gone = s.watch.deleted(name)
        failed = s.watch.failed_by_kueue(name)
        line = (
            f"{name:18} deletionTimestamp+60 s at {s.threshold(name) - s.deleted_at[name]:5.1f}s after DELETE"
        )
        if failed:
            line += (
                f"; Failed+condition {failed[0] - s.deletion_timestamp[name]:6.2f}s after deletionTimestamp"
            )
        if gone:
            line += f"; DELETED {gone[0] - s.deletion_timestamp[name]:6.2f}s after deletionTimestamp"
        else:
            line += "; still there"
        say(line)


# -- the facts -------------------------------------------------------------------------------


def test_feature_gate_is_off_by_default(scene):
    s = scene
    assert f'"{FEATURE_GATE}":false' in s.notes["default_gates_log"], s.notes["default_gates_log"]
    assert s.notes["default_gates_controller"] == "", s.notes["default_gates_controller"]
    # Past its threshold on an unreachable node, with the annotation: untouched.
    assert s.notes["g1_after_default_gates"] == "present"


def test_start_up_force_deletes_pods_already_past_the_threshold(scene, record_property):
    s = scene
    launched, ready = s.kueue_starts[0]
    gone = s.watch.deleted("g1-true")
    assert gone is not None
    at, obj = gone
    assert launched < at <= ready + SLACK, (launched, at, ready)
    record_property("kueue_startup_delete_after_launch_s", round(at - launched, 2))
    say(
        f"g1-true gone {at - launched:.2f}s after the gate-on Kueue was launched ({ready - launched:.2f}s to ready)"
    )
    assert obj["metadata"].get("deletionGracePeriodSeconds") == 0


def test_force_delete_of_an_unmanaged_annotated_pod_on_an_unreachable_node(scene, record_property):
    """Phase Failed + condition first, then a DELETE with grace 0, at deletionTimestamp + 60 s."""
    s = scene
    for name in ("true", "true-queue-label", "true-grace30"):
        failed, gone = s.watch.failed_by_kueue(name), s.watch.deleted(name)
        assert failed is not None and gone is not None, name
        status = failed[1]["status"]
        assert status["phase"] == "Failed", status
        (cond,) = [c for c in status["conditions"] if c["type"] == CONDITION[0]]
        assert cond["status"] == "True" and cond["reason"] == CONDITION[1]
        assert f"unreachable node `{UNREACHABLE}`" in cond["message"], cond["message"]
        assert ANNOTATION in cond["message"]
        assert failed[0] <= gone[0]
        assert gone[1]["metadata"].get("deletionGracePeriodSeconds") == 0, gone[1]["metadata"]
        delay = gone[0] - s.deletion_timestamp[name]
        say(
            f"{name}: DELETED {delay:.2f}s after deletionTimestamp ({gone[0] - s.deleted_at[name]:.2f}s after DELETE)"
        )
        assert KUEUE_WAIT <= delay <= KUEUE_WAIT + SLACK, (name, delay)
        record_property(f"kueue_delete_after_deletion_timestamp_{name}_s", round(delay, 2))
        record_property(f"kueue_delete_after_request_{name}_s", round(gone[0] - s.deleted_at[name], 2))


def test_event_and_its_message(scene):
    """A Warning Event per pod; its "grace period" adds deletionGracePeriodSeconds as nanoseconds."""
    s = scene
    events = json.loads(s.core.list_namespaced_event(NS, _preload_content=False).data)["items"]
    mine = {e["involvedObject"]["name"]: e for e in events if e.get("reason") == CONDITION[1]}
    for name, event in sorted(mine.items()):
        say(f"Event {name}: {event['type']} source {event.get('source')} message {event['message']!r}")
    forced = {"g1-true", "true", "true-queue-label", "true-grace30", "late-annotation", "late-true"}
    assert set(mine) == forced, sorted(mine)
    for event in mine.values():
        assert event["type"] == "Warning" and event["count"] == 1
        assert (event.get("source") or {}).get("component") == "kueue-pod-termination-controller"
    assert mine["true"]["message"] == (
        f"Pod forcefully terminated after 1m0.000000001s grace period due to unreachable node "
        f"`{UNREACHABLE}` (triggered by `{ANNOTATION}` annotation)"
    )
    assert "1m0.00000003s" in mine["true-grace30"]["message"], mine["true-grace30"]["message"]


def test_false_absent_notready_ready_untouched(scene):
    s = scene
    untouched = {"false", "absent", "notready-true", "ready-true", "failed-true"}
    for name in untouched:
        assert s.watch.deleted(name) is None, name
        assert s.watch.failed_by_kueue(name) is None, name
    left = set(json.loads(s.notes["after_restart"]))
    assert untouched <= left


def test_node_tainted_after_the_threshold_is_not_acted_on_until_a_restart(scene, record_property):
    s = scene
    before = set(json.loads(s.notes["before_restart"]))
    assert "late-true" in before, "Kueue acted after the late taint without a restart"
    gone = s.watch.deleted("late-true")
    assert gone is not None, "not deleted after the restart either"
    assert gone[0] > s.notes["restart_launched"]
    record_property(
        "kueue_late_taint_delete_after_restart_s", round(gone[0] - s.notes["restart_launched"], 2)
    )


def test_annotation_added_after_the_delete_is_not_acted_on_until_a_restart(scene):
    s = scene
    before = set(json.loads(s.notes["before_restart"]))
    assert "late-annotation" in before
    gone = s.watch.deleted("late-annotation")
    assert gone is not None and gone[0] > s.notes["restart_launched"]


def test_kueue_version(scene):
    assert any(KUEUE_VERSION in log for log in scene.kueue_logs)
