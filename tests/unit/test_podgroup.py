"""Rule failed-trainjob-podgroup: a Failed TrainJob whose PodGroup its Volcano queue reserves for.

The PodGroup is Trainer v2.3.0's (plugins/volcano: named like the TrainJob, controlled by it);
Volcano puts it back Inqueue once the failed job's pods are gone, Completed for a Complete job
(tests/support/world/README.md, "Trainer with Volcano"). The table names each way the rule
warns and each look-alike it spares, decided on the sweep's ping (the PodGroup is listed) and
on the TrainJob's own update (the pass reads it by name). It never deletes anything.
"""

from __future__ import annotations

import pytest

from podsweeper.decisions import Action, Result, Rule
from tests.fixtures import trainer as v2
from tests.fixtures.builders import at, controller_ref, event, ping
from tests.unit.test_lineage import decided, handle, world

RULE = Rule.FAILED_TRAINJOB_PODGROUP


def ended(kind: str = "Failed", at_second: int = 50, **meta) -> dict:
    return v2.trainjob(conditions=[("Created", at(0)), (kind, at(at_second))], **meta)


def foreign(kind: str, api_version: str) -> dict:
    """Another controller's object named like the TrainJob (a plain Volcano Job, a PyTorchJob)."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "tj", "namespace": "team-a", "uid": kind},
    }


WARNED = (Action.WARN, Result.WARNED)


@pytest.mark.parametrize(
    "case, tj, owner, group, now, expected",
    [
        ("Failed, Inqueue, past the grace", ended(), "own", {}, 600, WARNED),
        ("within the operator's grace", ended(), "own", {}, 70, None),
        ("Complete: Volcano marks it Completed", ended("Complete"), "own", {"phase": "Completed"}, 600, None),
        ("Complete, even were it Inqueue", ended("Complete"), "own", {}, 600, None),
        ("Failed but Pending: nothing reserved", ended(), "own", {"phase": "Pending"}, 600, None),
        ("running", v2.trainjob(conditions=[("Created", at(0))]), "own", {"phase": "Running"}, 600, None),
        ("suspended after it failed", ended(), "own", {}, 600, None),
        ("an earlier TrainJob's of the name (another uid)", ended(), "earlier", {}, 600, None),
        ("nobody's (no controller)", ended(), "none", {}, 600, None),
        ("a plain Volcano Job's", ended(), "volcano", {}, 600, None),
        ("a PyTorchJob's (its operator deletes it)", ended(), "pytorchjob", {}, 600, None),
        ("being deleted", ended(), "own", {"deletionTimestamp": "2026-11-01T10:00:30Z"}, 600, None),
        (
            "the TrainJob opted out",
            ended(annotations={"podsweeper.dev/skip": "true"}),
            "own",
            {},
            600,
            (Action.SKIP, None),
        ),
    ],
)
@pytest.mark.parametrize("trigger", ["sweep", "update"])
def test_failed_trainjob_podgroup_table(case, tj, owner, group, now, expected, trigger):
    if case.startswith("suspended"):
        tj["spec"]["suspend"] = True
    owners = {
        "own": tj,
        "earlier": v2.trainjob(generation="-earlier"),
        "none": None,
        "volcano": foreign("Job", "batch.volcano.sh/v1alpha1"),
        "pytorchjob": foreign("PyTorchJob", "kubeflow.org/v1"),
    }
    pg = v2.podgroup(None, **group)
    if owners[owner] is not None:
        pg["metadata"]["ownerReferences"] = [controller_ref(owners[owner])]
    cluster = world(tj, pg)
    raw = ping(at(now)) if trigger == "sweep" else event("update", tj, at(now))
    outcome = handle(cluster, raw, now=now)
    named = [d for d in decided(outcome) if d[0] is RULE]
    assert ("PodGroup", "team-a", "tj") in cluster.intermediates, case  # never deleted
    if expected is None:
        assert named == [], case
        return
    action, result = expected
    assert named == [(RULE, action, "TrainJob", "tj", result)], case


def test_failed_trainjob_podgroup_names_the_queue_and_what_it_reserves():
    tj = ended()
    outcome = handle(world(tj, v2.podgroup(tj, gpus=16, queue="team-gpus")), ping(at(600)), now=600)
    (warning,) = [a.decision for a in outcome.applied if a.decision.rule is RULE]
    assert "queue team-gpus reserves nvidia.com/gpu 16" in warning.reason
    assert "deleting the TrainJob frees it" in warning.reason
    # Pods that set GPU limits only: Trainer's minResources is {} (measured); the queue still
    # holds the PodGroup's place, said without a figure.
    outcome = handle(world(tj, v2.podgroup(tj, gpus=0, queue=None)), ping(at(600)), now=600)
    (warning,) = [a.decision for a in outcome.applied if a.decision.rule is RULE]
    assert "queue default reserves its minMember" in warning.reason


def test_failed_trainjob_podgroup_warns_in_dry_run_too_and_only_in_its_namespaces():
    """A warning changes nothing, so a dry run writes it as every warning rule's is (the
    namespace policy and the opt-out still hold it back)."""
    tj = ended()
    cluster = world(tj, v2.podgroup(tj))
    outcome = handle(cluster, ping(at(600)), now=600, dry_run=True)
    assert decided(outcome) == [(RULE, Action.WARN, "TrainJob", "tj", Result.WARNED)]
    for settings in ({"exclude_namespaces": "team-a"}, {"namespaces": "elsewhere", "exclude_namespaces": ""}):
        outcome = handle(cluster, ping(at(600)), now=600, **settings)
        assert [d for d in decided(outcome) if d[0] is RULE] == [], settings


def test_failed_trainjob_podgroup_is_found_by_the_sweep_once_the_jobset_is_gone():
    """JobSet ttlSecondsAfterFinished took the JobSet and its pods: only the TrainJob and its
    PodGroup are left, and no event will come. The sweep lists the PodGroup and its pass warns."""
    tj = ended()
    outcome = handle(world(tj, v2.podgroup(tj)), ping(at(900)), now=900)
    assert decided(outcome) == [(RULE, Action.WARN, "TrainJob", "tj", Result.WARNED)]
