"""Rule finished-trainjob-podgroup: a finished TrainJob's Volcano PodGroup goes, nothing else does.

The PodGroup is Trainer v2.3.0's (plugins/volcano: named like the TrainJob, controlled by it);
the table names each way the rule fires and each look-alike it spares, decided on the sweep's
ping (the PodGroup is listed) and on the TrainJob's own update (the pass reads it by name).
"""

from __future__ import annotations

import pytest

from podsweeper.decisions import Action, Result, Rule
from podsweeper.model import Verb
from tests.fixtures import trainer as v2
from tests.fixtures.builders import at, controller_ref, event, ping
from tests.fixtures.parse import parse_intermediate
from tests.unit.test_lineage import decided, handle, world

RULE = Rule.FINISHED_TRAINJOB_PODGROUP
PODGROUP = ("PodGroup", "team-a", "tj")


def finished(kind: str = "Complete", at_second: int = 50, **meta) -> dict:
    return v2.trainjob(conditions=[("Created", at(0)), (kind, at(at_second))], **meta)


def volcano_job() -> dict:
    """A plain Volcano Job named like the TrainJob: its PodGroup is Volcano's, not Trainer's."""
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "tj", "namespace": "team-a", "uid": "volcano-job-uid"},
    }


def podgroups(cluster) -> set[tuple[str, str, str]]:
    return {key for key in cluster.intermediates if key[0] == "PodGroup"}


@pytest.mark.parametrize(
    "case, tj, group, now, expected",
    [
        ("Complete, past the grace: it goes", finished(), "own", 600, (Action.DELETE, Result.DELETED)),
        ("Failed, past the grace: it goes", finished("Failed"), "own", 600, (Action.DELETE, Result.DELETED)),
        ("within the operator's grace", finished(), "own", 70, None),
        ("running", v2.trainjob(conditions=[("Created", at(0))]), "own", 600, None),
        ("suspended, not finished", v2.trainjob(conditions=[("Created", at(0))]), "own", 600, None),
        ("an earlier TrainJob's of the name (another uid)", finished(), "earlier", 600, None),
        ("nobody's (no controller)", finished(), "none", 600, None),
        ("a plain Volcano Job's", finished(), "volcano", 600, None),
        ("being deleted", finished(), "terminating", 600, None),
        (
            "the TrainJob opted out",
            finished(annotations={"podsweeper.dev/skip": "true"}),
            "own",
            600,
            (Action.SKIP, None),
        ),
        ("the PodGroup opted out", finished(), "opted-out", 600, (Action.SKIP, None)),
    ],
)
@pytest.mark.parametrize("trigger", ["sweep", "update"])
def test_finished_trainjob_podgroup_table(case, tj, group, now, expected, trigger):
    if case.startswith("suspended"):
        tj["spec"]["suspend"] = True
    owners = {
        "own": tj,
        "earlier": v2.trainjob(generation="-earlier"),
        "none": None,
        "volcano": volcano_job(),
        "terminating": tj,
        "opted-out": tj,
    }
    meta: dict = {}
    if group == "terminating":
        meta = {"deletionTimestamp": "2026-11-01T10:00:30Z", "finalizers": ["x"]}
    if group == "opted-out":
        meta = {"annotations": {"podsweeper.dev/skip": "true"}}
    pg = v2.podgroup(owners[group], **meta)
    cluster = world(tj, pg)
    raw = ping(at(now)) if trigger == "sweep" else event("update", tj, at(now))
    outcome = handle(cluster, raw, now=now)
    named = [d for d in decided(outcome) if d[0] is RULE]
    if expected is None:
        assert named == [], case
        assert podgroups(cluster) == {PODGROUP}, case
        return
    action, result = expected
    assert named == [(RULE, action, "PodGroup", "tj", result)], case
    assert podgroups(cluster) == (set() if result is Result.DELETED else {PODGROUP}), case


def test_finished_trainjob_podgroup_dry_run_and_namespaces_keep_it():
    tj = finished()
    cluster = world(tj, v2.podgroup(tj))
    outcome = handle(cluster, ping(at(600)), now=600, dry_run=True)
    assert decided(outcome) == [(RULE, Action.DELETE, "PodGroup", "tj", Result.DRY_RUN)]
    for settings in ({"exclude_namespaces": "team-a"}, {"namespaces": "elsewhere", "exclude_namespaces": ""}):
        outcome = handle(cluster, ping(at(600)), now=600, **settings)
        assert [d for d in decided(outcome) if d[0] is RULE] == [], settings
    assert podgroups(cluster) == {PODGROUP}


def test_finished_trainjob_podgroup_is_found_by_the_sweep_once_the_jobset_is_gone():
    """JobSet ttlSecondsAfterFinished took the JobSet and its pods: only the TrainJob and its
    PodGroup are left, and no event will come. The sweep lists the PodGroup and its pass goes."""
    tj = finished()
    cluster = world(tj, v2.podgroup(tj))
    outcome = handle(cluster, ping(at(900)), now=900)
    assert decided(outcome) == [(RULE, Action.DELETE, "PodGroup", "tj", Result.DELETED)]


def test_finished_trainjob_podgroup_deletes_by_uid_only():
    """A PodGroup made again under the name since the pass read it is not deleted (the uid
    precondition: the simulated cluster answers CONFLICT as the API's 409)."""
    tj = finished()
    cluster = world(tj, v2.podgroup(tj))
    newer = parse_intermediate(v2.podgroup(tj, generation="-newer"))
    read = cluster.get_intermediate

    def racing(link, namespace, name):
        found = read(link, namespace, name)
        if found is not None and link.kind == "PodGroup":
            cluster.observe(Verb.UPDATE, newer)  # made again right after the read
        return found

    cluster.get_intermediate = racing  # type: ignore[method-assign]
    outcome = handle(cluster, event("update", tj, at(600)), now=600)
    assert decided(outcome) == [(RULE, Action.DELETE, "PodGroup", "tj", Result.CONFLICT)]
    assert cluster.intermediates[PODGROUP].uid == newer.uid


def test_a_v1_jobs_podgroup_is_never_a_trainjobs():
    """The training operator's own PodGroup of a PyTorchJob (it deletes it itself at the
    finish) under a finished TrainJob's name is not the TrainJob's."""
    tj = finished()
    pytorchjob = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "tj", "namespace": "team-a", "uid": "pytorchjob-uid"},
    }
    pg = v2.podgroup(None)
    pg["metadata"]["ownerReferences"] = [controller_ref(pytorchjob)]
    cluster = world(tj, pg)
    outcome = handle(cluster, ping(at(600)), now=600)
    assert [d for d in decided(outcome) if d[0] is RULE] == []
    assert podgroups(cluster) == {PODGROUP}
