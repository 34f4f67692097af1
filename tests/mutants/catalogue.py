"""Seeded bugs: each a small textual patch to one file of function/podsweeper/.

Every mutant breaks one rule or one safety point of docs/rules.md; the fast tests (tests/unit
and the property tests of tests/reliability/test_properties.py) must catch each. `old` must
occur exactly once in the file, so a refactor that moves the code makes the runner say so
instead of testing an unmutated copy.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # relative to function/podsweeper/
    old: str
    new: str
    breaks: str  # the rule or safety point it breaks


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "uid-precondition",
        "cluster/simulated.py",
        "if current.uid != uid or (",
        "if False and (",
        "delete preconditions: a pod re-created under the name, or changed since it was read, is deleted",
    ),
    Mutant(
        "earlier-job-uid",
        "engine.py",
        "if pod.job is not None and pod.job.uid and pod.job.uid != job.uid:",
        "if False:",
        "ownership by uid: a pod of an earlier job of the same name is judged by the new job",
    ),
    Mutant(
        "opt-out-ignored",
        "engine.py",
        '    if pod.opted_out:\n        return "pod"',
        '    if False:\n        return "pod"',
        "opt-out: the pod annotation podsweeper.dev/skip is forgotten",
    ),
    Mutant(
        "failed-not-finished",
        "objects.py",
        "finished = failure if failure in true else success if success in true else None",
        "finished = None if failure in true else success if success in true else None",
        "a job with a Failed condition is treated as not finished",
    ),
    Mutant(
        "namespace-gate",
        "triage.py",
        "    if settings.namespace_allowed(namespace):\n        return None",
        "    if True:\n        return None",
        "namespaces: PODSWEEPER_NAMESPACES / PODSWEEPER_EXCLUDE_NAMESPACES ignored",
    ),
    Mutant(
        "delete-terminating",
        "engine.py",
        "        and not pod.foreign_controller\n        and not pod.terminating\n",
        "        and not pod.foreign_controller\n",
        "pods already terminating are deleted again",
    ),
    Mutant(
        "no-orphan-grace",
        "engine.py",
        "if age is None or age < grace:",
        "if age is None:",
        "orphan: PODSWEEPER_ORPHAN_GRACE_SECONDS not waited for",
    ),
    Mutant(
        "clean-pod-policy-running",
        "engine.py",
        "if job is None or not job.finished or job.clean_pod_policy is not CleanPodPolicy.ALL:",
        "if job is None or not job.finished or job.clean_pod_policy is CleanPodPolicy.NONE:",
        "cleanPodPolicy Running treated like All: terminated pods kept for debugging are deleted",
    ),
    Mutant(
        "dry-run-ignored",
        "actions.py",
        "                if settings.dry_run:\n",
        "                if False:\n",
        "dry-run deletes",
    ),
    Mutant(
        "warn-without-threshold",
        "engine.py",
        "    if restarts < ctx.settings.crashloop_restarts:\n        return None",
        "    if restarts < 1:\n        return None",
        "crash-loop: warns (or deletes) below PODSWEEPER_CRASHLOOP_RESTARTS",
    ),
    Mutant(
        "max-deletes-off-by-one",
        "actions.py",
        "elif budget <= 0:",
        "elif budget < 0:",
        "bounded deletes: one delete more than the pass's bound",
    ),
    Mutant(
        "sweep-active-pods-ignored",
        "engine.py",
        "or not pod.active or not ctx.settings.sweep_active_pods:",
        "or not pod.active:",
        "PODSWEEPER_SWEEP_ACTIVE_PODS=false still deletes a finished job's active pods",
    ),
    Mutant(
        "foreign-controller-claimed",
        "ownership.py",
        "            return _launched(namespace, controller, labels) or _chained(namespace, controller, labels)\n",
        "            pass\n",
        "a pod another controller owns is claimed by its training labels",
    ),
    Mutant(
        "crash-loop-warning-dropped",
        "actions.py",
        "                written = cluster.record_event(warning_event(decision, now))\n"
        "                outcome = Result.WARNED if written else Result.ALREADY_WARNED",
        "                outcome = None",
        "crash-loop / no-backoff-limit: the Warning is never written",
    ),
    Mutant(
        "suspended-swept",
        "engine.py",
        "        if owner is not None and owner.suspended:\n            continue",
        "        if False:\n            continue",
        "a suspended job's pods are deleted (the operator owns them)",
    ),
    Mutant(
        "operator-grace-ignored",
        "engine.py",
        "    if not job.finished or job.finished_at is None or not operator_deletes(pod, job):",
        "    if True:",
        "under cleanPodPolicy Running/All podsweeper races the operator's own cleanup",
    ),
    Mutant(
        "job-bound-ignored",
        "engine.py",
        "    return declared + max(MIN_STRAGGLERS, int(declared * STRAGGLER_MARGIN))",
        "    return 10**9",
        "bounded deletes: a job pass deletes beyond what its job declares",
    ),
    Mutant(
        "rewarn-every-pass",
        "cluster/simulated.py",
        "        if not _grew(existing.record.progress, event.progress):",
        "        if False:",
        "crash-loop warnings written again with no new crash (counts follow passes)",
    ),
    Mutant(
        "suspend-kueue-job",
        "objects.py",
        "    if KUEUE_QUEUE_LABEL in labels:",
        "    if False:",
        "a job Kueue queues is suspended by podsweeper (Kueue drives suspend itself)",
    ),
    Mutant(
        "chain-foreign-controller",
        "lineage.py",
        "    if controller is not None and controller.kind != parent_kind:\n        return False",
        "    if False:\n        return False",
        "a JobSet or Job another controller owns is taken for a TrainJob's orphan because of its mark",
    ),
    Mutant(
        "chain-orphan-unmarked",
        "lineage.py",
        "    return by_trainjob or workload.marked(lineage.chain.marker_label)",
        "    return True",
        "a plain JobSet or batch Job, which no TrainJob made, is deleted as an orphan",
    ),
    Mutant(
        "launcher-unproven",
        "engine.py",
        "        and (pod.via is None or launchers is None or pod.via.uid in launchers)\n",
        "",
        "a batch Job's pod is decided as an MPIJob's launcher without its Job being proven the MPIJob's",
    ),
    Mutant(
        "launcher-job-active",
        "engine.py",
        "        and link.finished is not None\n",
        "",
        "the pod of a launcher Job still running is deleted (the Job controller only re-creates it)",
    ),
    Mutant(
        "stuck-on-ready-node",
        "engine.py",
        "    if node is not None and node.ready is NodeReady.TRUE:\n        return None",
        "    if False:\n        return None",
        "stuck-terminating force-deletes a pod on a Ready node",
    ),
    Mutant(
        "failed-mpijob-no-grace",
        "engine.py",
        "    if (now - since).total_seconds() < settings.operator_grace_seconds:\n        return None",
        "    if False:\n        return None",
        "failed-mpijob-running suspends before the operator had its grace to settle the job",
    ),
)
