"""Rule stuck-terminating (opt-in): force delete only where no kubelet will ever finish a delete."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from podsweeper.cluster.simulated import SimulatedCluster
from podsweeper.config import Settings
from podsweeper.decisions import Action, Result, Rule
from podsweeper.intake import parse_event
from podsweeper.model import Node, NodeReady, Verb
from podsweeper.pipeline import Pipeline
from tests.fixtures import trainer as v2
from tests.fixtures.builders import at, job, ping, pod, split
from tests.fixtures.parse import parse_intermediate, parse_job, parse_pod

SUCCEEDED = [("Created", at(0)), ("Running", at(2)), ("Succeeded", at(30))]


@dataclass
class NodesCluster(SimulatedCluster):
    """The simulated cluster, with node facts (a replay has none) and force deletes recorded."""

    nodes: dict[str, Node] = field(default_factory=dict)
    forced: list[str] = field(default_factory=list)

    reads: list[str] = field(default_factory=list)

    def get_node(self, name):
        self.reads.append(name)
        return self.nodes.get(name)

    def delete_pod(self, namespace, name, uid, resource_version="", force=False):
        result = super().delete_pod(namespace, name, uid, resource_version, force)
        if force and result is Result.DELETED:
            self.forced.append(name)
        return result


def sweep(cluster, now, **settings):
    return Pipeline(cluster, Settings(**{"dry_run": False, **settings})).handle(
        parse_event(*split(ping(at(now)))), at(now)
    )


def stuck_world(node_state: str | None, *, skip=False):
    deleting_at = at(100)
    j = job(conditions=SUCCEEDED)
    cluster = NodesCluster()
    cluster.observe(Verb.ADD, parse_job(j))
    annotations = {"podsweeper.dev/skip": "true"} if skip else None
    for i in range(2):
        raw = pod(
            j, "Worker", i, phase="Running", node="lost", deleting_at=deleting_at, annotations=annotations
        )
        cluster.observe(Verb.ADD, parse_pod(raw))
    cluster.observe(
        Verb.ADD, parse_pod(pod(j, "Worker", 2, phase="Running", node="fine", deleting_at=deleting_at))
    )
    cluster.nodes["fine"] = Node("fine", NodeReady.TRUE, at(0))
    if node_state is not None:
        cluster.nodes["lost"] = Node("lost", NodeReady(node_state), at(90))
    return cluster


def test_off_by_default_nothing_happens():
    cluster = stuck_world("Unknown")
    assert sweep(cluster, 1000).applied == [] and len(cluster.pods) == 3


def test_on_only_the_pods_of_the_lost_node_go():
    for state in ("Unknown", "False", None):  # None: the Node object is gone
        cluster = stuck_world(state)
        outcome = sweep(cluster, 400, stuck_terminating_seconds=300)
        assert [(a.decision.rule, a.decision.action, a.result) for a in outcome.applied] == [
            (Rule.STUCK_TERMINATING, Action.FORCE_DELETE, Result.DELETED)
        ] * 2
        assert sorted(cluster.forced) == sorted(a.decision.name for a in outcome.applied)
        assert [p.node for p in cluster.pods.values()] == ["fine"]
        assert "lost" in outcome.applied[0].decision.reason


def test_one_event_per_job_names_the_node_and_how_long_it_is_lost():
    """The users' question is "why did my pod vanish without its kubelet": the Event answers."""
    cluster = stuck_world("Unknown")
    sweep(cluster, 400, stuck_terminating_seconds=300)
    (event,) = [e.record for e in cluster.events.values() if e.record.reason == "PodsCleanedUp"]
    message = event.message
    assert message.startswith("podsweeper deleted 2 pod(s)"), message
    for i in range(2):
        assert (
            f"-worker-{i} [stuck-terminating] (force-deleted 300s past its grace period; node lost Unknown for 310s"
            in message
        )
    assert "GPU-seconds held" in message and " 0 GPU-seconds" not in message  # held since the grace ended
    gone = stuck_world(None)
    sweep(gone, 400, stuck_terminating_seconds=300)
    (event,) = [e.record for e in gone.events.values() if e.record.reason == "PodsCleanedUp"]
    assert "node lost no longer exists" in event.message


def test_each_node_is_read_once_per_sweep_and_the_delete_cap_holds():
    cluster = stuck_world("Unknown")
    outcome = sweep(cluster, 400, stuck_terminating_seconds=300, max_deletes_per_event=1)
    assert sorted(cluster.reads) == ["fine", "lost"]
    assert [a.result for a in outcome.applied] == [Result.DELETED, Result.DEFERRED]
    assert len(cluster.forced) == 1 and len(cluster.pods) == 2


def test_not_before_the_limit_and_never_on_a_ready_node():
    cluster = stuck_world("Unknown")
    assert sweep(cluster, 399, stuck_terminating_seconds=300).applied == []
    cluster = stuck_world("True")
    assert sweep(cluster, 10_000, stuck_terminating_seconds=300).applied == []
    assert len(cluster.pods) == 3


def test_dry_run_and_opt_out():
    cluster = stuck_world("Unknown")
    outcome = sweep(cluster, 400, stuck_terminating_seconds=300, dry_run=True)
    assert [a.result for a in outcome.applied] == [Result.DRY_RUN] * 2 and cluster.forced == []
    cluster = stuck_world("Unknown", skip=True)
    outcome = sweep(cluster, 400, stuck_terminating_seconds=300)
    assert [a.decision.action for a in outcome.applied] == [Action.SKIP] * 2 and cluster.forced == []


def test_a_plain_jobsets_pod_is_never_forced():
    """Only a pod whose JobSet a TrainJob controls is a training pod."""
    cluster = NodesCluster()
    plain = v2.jobset(None, name="plain", marked=False)
    batch = v2.batch_job(plain)
    raw = v2.pod(batch, 0)
    raw["metadata"]["deletionTimestamp"] = v2.stamp(at(100))
    raw["spec"]["nodeName"] = "lost"
    cluster.observe(Verb.ADD, parse_intermediate(plain))
    cluster.observe(Verb.ADD, parse_pod(raw))
    assert sweep(cluster, 1000, stuck_terminating_seconds=300).applied == []
    tj = v2.trainjob("plain")
    cluster.observe(Verb.ADD, parse_job(tj))
    cluster.observe(Verb.ADD, parse_intermediate(v2.jobset(tj, name="plain")))
    outcome = sweep(cluster, 1000, stuck_terminating_seconds=300)
    assert [a.result for a in outcome.applied] == [Result.DELETED]


def test_a_nodes_ready_condition_is_read_strictly():
    """Anything but True/False/Unknown is unreadable (kube.get_node then counts it Ready)."""
    from podsweeper.errors import BadEvent
    from podsweeper.objects.nodes import decode_node

    def body(*conditions):
        return json.dumps({"metadata": {"name": "n"}, "status": {"conditions": list(conditions)}})

    lost = decode_node(
        body({"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"})
    )
    assert (lost.ready, lost.since.isoformat()) == (NodeReady.FALSE, "2026-01-01T00:00:00+00:00")
    assert decode_node(body({"type": "MemoryPressure", "status": "False"})).ready is NodeReady.UNKNOWN
    with pytest.raises(BadEvent, match="Maybe"):
        decode_node(body({"type": "Ready", "status": "Maybe"}))


def kueue_world(consent: str) -> NodesCluster:
    """Two workers stuck on the lost node, both carrying Kueue's annotation with `consent`."""
    deleting_at = at(100)
    j = job(conditions=SUCCEEDED)
    cluster = NodesCluster()
    cluster.observe(Verb.ADD, parse_job(j))
    annotations = {"kueue.x-k8s.io/safe-to-forcefully-delete": consent}
    for i in range(2):
        raw = pod(
            j, "Worker", i, phase="Running", node="lost", deleting_at=deleting_at, annotations=annotations
        )
        cluster.observe(Verb.ADD, parse_pod(raw))
    cluster.nodes["lost"] = Node("lost", NodeReady.UNKNOWN, at(90))
    return cluster


@pytest.mark.parametrize("consent", ["true", "false", "True", ""])
def test_the_annotation_is_read_as_kueue_reads_it(consent):
    """Kueue compares the value with "true" exactly; podsweeper also takes "false" as a no."""
    (found,) = {p.safe_to_force_delete for p in kueue_world(consent).pods.values()}
    assert found is {"true": True, "false": False}.get(consent)


def test_a_pod_whose_owner_said_false_is_never_force_deleted():
    cluster = kueue_world("false")
    assert sweep(cluster, 100_000, stuck_terminating_seconds=1).applied == []
    assert len(cluster.pods) == 2 and cluster.forced == []


@pytest.mark.parametrize(
    ("limit", "grace", "first"),
    [
        (10, 30, 60 + 30),  # Kueue's 60 s and the operator grace after it, not the shorter limit
        (10, 0, 60),
        (300, 30, 300),  # a limit longer than Kueue's turn stands
    ],
)
def test_a_pod_said_safe_waits_for_kueue_then_the_grace(limit, grace, first):
    """Kueue's failure recovery force-deletes such a pod on an unreachable node 60 s after its
    deletionTimestamp: podsweeper never races it (both would send a force delete; the second
    answers 404 or 409), and takes over where Kueue does not (a NotReady node, a Node gone)."""
    settings = {"stuck_terminating_seconds": limit, "operator_grace_seconds": grace}
    cluster = kueue_world("true")
    assert sweep(cluster, 100 + first - 1, **settings).applied == []
    outcome = sweep(cluster, 100 + first, **settings)
    assert [(a.decision.rule, a.result) for a in outcome.applied] == [
        (Rule.STUCK_TERMINATING, Result.DELETED)
    ] * 2
    reason = outcome.applied[0].decision.reason
    assert f"safe-to-forcefully-delete, so Kueue's 60s and the operator grace {grace}s first" in reason, (
        reason
    )
