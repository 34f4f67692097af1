"""Seeded bugs: each a small textual patch to one file of function/podsweeper/.

Every mutant breaks one rule or one safety point of docs/rules.md, and names the suites that
must catch it (each suite on its own, a FAILED test line): the unit tests, the HTTP tests, the
property tests (the generated ones only: the examples kept from fixed disagreements do not
count) or the real-API integration tests. `old` must occur exactly once in the file, so a
refactor that moves the code makes the runner say so instead of testing an unmutated copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Suite(Enum):
    """A suite a mutant must fail: its pytest arguments, relative to the repository."""

    # The unit rung but its HTTP tests, which are a suite of their own.
    UNIT = ("tests/unit", "--ignore=tests/unit/http")
    HTTP = ("tests/unit/http",)
    # The generated property tests: not the generator's own coverage test, not the fixed examples.
    # The live test first: it is the quickest, and -x stops at the first failure.
    PROPERTY = (
        "tests/replay/test_properties.py::test_live_notifications_late_duplicated_or_lost_then_sweep",
        "tests/replay/test_properties.py::test_replay_is_safe_and_leaves_nothing_the_rules_name",
        "tests/replay/test_properties.py::test_dry_run_replay_deletes_nothing",
    )
    # The real client against the real kube-apiserver (built from Go modules, cached).
    REAL_API = ("tests/apiserver/test_kube_cluster.py",)
    # No secret in answers, logs or Events: the served function on the real API server.
    SECRETS = (
        "tests/apiserver/test_security.py::test_every_decision_path_logs_no_env_value",
        "tests/apiserver/test_security.py::test_replay_output_shows_no_env_value",
    )
    # CloudEvents out from the served function (gunicorn's forked worker) on the real world.
    NOTIFY_SERVED = ("tests/controllers/test_notifications.py",)
    # podsweeper's own records (evidence stores, finish marks) on the real API server.
    RECORDS_API = ("tests/apiserver/test_evidence_store.py",)
    # What a Trainer v2 rule does to the chain (deletes, suspends), as the function's user.
    CHAIN_API = ("tests/apiserver/test_trainer_v2_access.py",)
    # The served function under API faults: 503 within its bound, then the retry cleans up.
    FAULTS = (
        "tests/apiserver/test_faults.py::test_api_failure_answers_503_in_time_then_the_retry_cleans_up",
    )

    @property
    def label(self) -> str:
        names = {
            "UNIT": "unit",
            "HTTP": "HTTP",
            "PROPERTY": "property",
            "REAL_API": "real API",
            "NOTIFY_SERVED": "served, real world",
            "RECORDS_API": "records, real API",
            "CHAIN_API": "chain, real API",
            "FAULTS": "faults, real API",
        }
        return names.get(self.name, self.name.lower())


UNIT, HTTP, PROPERTY, REAL_API, SECRETS, NOTIFY_SERVED, RECORDS_API, CHAIN_API, FAULTS = (
    Suite.UNIT,
    Suite.HTTP,
    Suite.PROPERTY,
    Suite.REAL_API,
    Suite.SECRETS,
    Suite.NOTIFY_SERVED,
    Suite.RECORDS_API,
    Suite.CHAIN_API,
    Suite.FAULTS,
)


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # relative to function/podsweeper/
    old: str
    new: str
    breaks: str  # the rule or safety point it breaks
    suites: tuple[Suite, ...] = (UNIT, PROPERTY)  # each must catch it


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "uid-precondition",
        "cluster/simulated.py",
        "if current.uid != uid or (",
        "if False and (",
        "delete preconditions: a pod re-created under the name, or changed since it was read, is deleted",
        (UNIT,),
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
        "rules/door.py",
        '    if isinstance(about, Pod) and about.opted_out:\n        return "pod"',
        '    if False:\n        return "pod"',
        "opt-out: the pod annotation podsweeper.dev/skip is forgotten",
    ),
    Mutant(
        "failed-not-finished",
        "objects/base.py",
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
        # The engine's and the lineage's own gates stand behind triage's: no wrong decision
        # is left for the property tests to see; the unit tests see the passes that now run.
        (UNIT,),
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
        "rules/orphan.py",
        "if age is None or age < grace:\n        return None  # too young",
        "if age is None:\n        return None  # too young",
        "orphan: PODSWEEPER_ORPHAN_GRACE_SECONDS not waited for",
    ),
    Mutant(
        "clean-pod-policy-running",
        "rules/clean_pod_policy_all.py",
        "if job is None or not job.finished or job.clean_pod_policy is not CleanPodPolicy.ALL:",
        "if job is None or not job.finished or job.clean_pod_policy is CleanPodPolicy.NONE:",
        "cleanPodPolicy Running treated like All: terminated pods kept for debugging are deleted",
    ),
    Mutant(
        "dry-run-ignored",
        "actions.py",
        "                if dry_run(decision, settings):\n",
        "                if False:\n",
        "dry-run deletes",
    ),
    Mutant(
        "warn-without-threshold",
        "rules/crash_loop.py",
        "    if restarts < ctx.settings.crashloop_restarts:\n        return None",
        "    if restarts < 1:\n        return None",
        "crash-loop: warns (or deletes) below PODSWEEPER_CRASHLOOP_RESTARTS",
        (UNIT,),
    ),
    Mutant(
        "max-deletes-off-by-one",
        "actions.py",
        "elif budget <= 0:",
        "elif budget < 0:",
        "bounded deletes: one delete more than the pass's bound",
        (UNIT,),
    ),
    Mutant(
        "sweep-active-pods-ignored",
        "rules/finished_job_active_pod.py",
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
        "operator.py",
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
        (UNIT,),
    ),
    Mutant(
        "rewarn-every-pass",
        "cluster/simulated.py",
        "        if not _grew(existing.record.progress, event.progress):",
        "        if False:",
        "crash-loop warnings written again with no new crash (counts follow passes)",
        (UNIT,),
    ),
    Mutant(
        "suspend-kueue-job",
        "objects/jobs.py",
        "    if kinds.KUEUE_QUEUE_LABEL in labels:",
        "    if False:",
        "a job Kueue queues is suspended by podsweeper (Kueue drives suspend itself)",
    ),
    Mutant(
        "chain-foreign-controller",
        "rules/orphan.py",
        "    if controller is not None and controller.kind != parent_kind:\n        return False",
        "    if False:\n        return False",
        "a JobSet or Job another controller owns is taken for a TrainJob's orphan because of its mark",
    ),
    Mutant(
        "chain-orphan-unmarked",
        "rules/orphan.py",
        "    return by_trainjob or intermediate.marked(lineage.chain.marker_label)",
        "    return True",
        "a plain JobSet or batch Job, which no TrainJob made, is deleted as an orphan",
    ),
    Mutant(
        "launcher-unproven",
        "engine.py",
        "        and (pod.batch_job is None or launchers is None or pod.batch_job.uid in launchers)\n",
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
        "rules/stuck_terminating.py",
        "    if node is not None and node.ready is NodeReady.TRUE:\n        return None",
        "    if False:\n        return None",
        "stuck-terminating force-deletes a pod on a Ready node",
        (UNIT,),
    ),
    Mutant(
        "failed-mpijob-no-grace",
        "rules/failed_mpijob_running.py",
        "    if (ctx.now - since).total_seconds() < ctx.settings.operator_grace_seconds:\n        return None",
        "    if False:\n        return None",
        "failed-mpijob-running suspends before the operator had its grace to settle the job",
    ),
    # -- the four disagreements the property tests once found, put back ---------------------
    Mutant(
        "known-bug-1-replay-lists-no-jobset",
        "cluster/simulated.py",
        "if not label or (label in labels and (not value or labels[label] == value)):",
        "if label in labels and (not value or labels[label] == value):",
        'KNOWN BUG 1: the replay\'s sweep lists no JobSet (the empty selector read as label "")',
        (PROPERTY,),
    ),
    Mutant(
        "known-bug-2-trainjob-add-warns",
        "routing.py",
        "check = ref.verb is Verb.ADD and ref.kind.chain is None",
        "check = ref.verb is Verb.ADD",
        "KNOWN BUG 2: a Reference-mode TrainJob add decides the JobSet's unbounded-restarts warning",
        (PROPERTY,),
    ),
    Mutant(
        "known-bug-3-finish-mark-by-name",
        "cluster/simulated.py",
        "        return self.finish_marks.get((job.key, job.uid))",
        "        return next((m for (key, _), m in self.finish_marks.items() if key == job.key), None)",
        "KNOWN BUG 3: a new TrainJob is judged by the finish an earlier one of its name left",
        (PROPERTY,),
    ),
    Mutant(
        "known-bug-4-terminating-jobset-parent",
        "sweep/listing.py",
        "            if not jobset.terminating:  # a terminating JobSet controls nothing the pass would spare\n"
        "                jobsets[(jobset.namespace, jobset.name)] = jobset",
        "            jobsets[(jobset.namespace, jobset.name)] = jobset",
        "KNOWN BUG 4: the sweep spares the Jobs of a terminating JobSet, which the pass names orphan",
        (PROPERTY,),
    ),
    # -- safety points without a mutant before ----------------------------------------------
    Mutant(
        "real-uid-precondition",
        "cluster/kube/writes.py",
        '        preconditions = {"uid": uid, **({"resourceVersion": resource_version} if resource_version else {})}',
        '        preconditions = {**({"resourceVersion": resource_version} if resource_version else {})}',
        "the real client deletes without the uid precondition: a pod re-created under the name goes",
        (REAL_API,),
    ),
    Mutant(
        "real-resource-version-precondition",
        "cluster/kube/writes.py",
        '        preconditions = {"uid": uid, **({"resourceVersion": resource_version} if resource_version else {})}',
        '        preconditions = {"uid": uid}',
        "the real client deletes without the resourceVersion precondition: a pod changed since it was "
        "read (just opted out) goes",
        (REAL_API,),
    ),
    Mutant(
        "warning-written-from-a-stale-read",
        "cluster/kube/writes.py",
        '                "metadata": {"annotations": marks, "resourceVersion": meta.get("resourceVersion")},',
        '                "metadata": {"annotations": marks},',
        "a warning's count is bumped from the version read even when another instance wrote it since: "
        "one restart count written twice",
        (REAL_API,),
    ),
    Mutant(
        "job-opt-out-ignored",
        "rules/door.py",
        '    if job is not None and job.opted_out:\n        return "job"',
        '    if False:\n        return "job"',
        "opt-out: the job annotation podsweeper.dev/skip no longer protects its pods",
    ),
    Mutant(
        "dry-run-suspends",
        "actions.py",
        "outcome = Result.DRY_RUN if dry_run(decision, settings) else suspended.get(decision.job.key)",
        "outcome = suspended.get(decision.job.key)",
        "dry-run suspends jobs",
    ),
    Mutant(
        "sweep-cap-ignored",
        "sweep/sweeper.py",
        "                    left -= self._act(result, min(result.bound, left), cluster, now, ledger, run).sent",
        "                    left -= self._act(result, result.bound, cluster, now, ledger, run).sent",
        "bounded deletes: a sweep deletes beyond PODSWEEPER_MAX_DELETES_PER_EVENT",
        (UNIT,),  # the property tests rarely reach a sweep whose one pass outgrows the cap
    ),
    Mutant(
        "sweep-round-loses-the-page-that-ends-its-share",
        "sweep/listing.py",
        "                self._nominate_pods(page, indexes, namespace, cluster, now, run)\n"
        "                if page.resume is not None and list_until is not None and self.clock() >= list_until:\n"
        "                    return ListPosition(index, page.resume)",
        "                if page.resume is not None and list_until is not None and self.clock() >= list_until:\n"
        "                    return ListPosition(index, page.resume)\n"
        "                self._nominate_pods(page, indexes, namespace, cluster, now, run)",
        "the sweep's rounds: a page listed at the end of a tick's share is never decided, its leftovers never nominated",
        (UNIT,),  # the live property tests' worlds fit in one tick: a round never ends mid-listing there
    ),
    Mutant(
        "sweep-work-share-starves-the-jobs-left",
        "sweep/sweeper.py",
        "                owed = starved and index == 0 and key in waiting",
        "                owed = False",
        "the sweep's work share: a tick whose listing spent it passes nothing, so on a big cluster the jobs left wait for good",
        (UNIT,),
    ),
    Mutant(
        "sweep-pass-started-past-the-room-left",
        "sweep/sweeper.py",
        "                if work_until is not None and not owed and began + longest > work_until:",
        "                if work_until is not None and not owed and began > work_until:",
        "the sweep's work share: a pass is started that, as long as the ones before, ends past the share",
        (UNIT,),
    ),
    Mutant(
        "sweep-page-decided-on-an-incomplete-index",
        "sweep/listing.py",
        "                if job_page.resume is not None and list_until is not None and self.clock() >= list_until:\n"
        "                    return False",
        "                if job_page.resume is not None and list_until is not None and self.clock() >= list_until:\n"
        "                    break",
        "the sweep's job index: a page of pods is decided against a kind's jobs read only in part, its pods of the rest looking orphaned",
        (UNIT,),
    ),
    Mutant(
        "sweep-jobs-left-sorted-anew",
        "sweep/queue.py",
        "        return carried + sorted(key for key in candidates if key not in waiting)",
        "        return sorted(carried) + sorted(key for key in candidates if key not in waiting)",
        "the sweep's queue: a job nominated again jumps ahead of the jobs left waiting, which may never be passed",
        (UNIT,),
    ),
    Mutant(
        "expired-continue-starts-again",
        "cluster/kube/calls.py",
        "                expired_once, token = True, _offered_continue(expired.body)",
        "                expired_once, token = True, None",
        "the sweep's rounds: an expired continue token restarts the listing instead of going on, so a big "
        "cluster's tail is never reached when every tick's token has expired",
        (UNIT, REAL_API),
    ),
    Mutant(
        "chain-orphan-no-grace",
        "rules/orphan.py",
        "        if age is not None and age >= grace:",
        "        if age is not None:",
        "orphan (Trainer v2): a JobSet is deleted before PODSWEEPER_ORPHAN_GRACE_SECONDS",
    ),
    Mutant(
        "stuck-force-delete-uncapped",
        "passes.py",
        "        return PassResult(decided, note, self.settings.max_deletes_per_event)",
        "        return PassResult(decided, note, 10**9)",
        "stuck-terminating force-deletes beyond PODSWEEPER_MAX_DELETES_PER_EVENT in one sweep",
        (UNIT,),
    ),
    Mutant(
        "api-failure-answers-200",
        "web.py",
        '            return _answer(503, f"kubernetes api unavailable: {error}", headers)',
        '            return _answer(200, f"kubernetes api unavailable: {error}", headers)',
        "an unavailable API answers 200: the source drops the event instead of retrying",
        (HTTP,),
    ),
    Mutant(
        "body-limit-off",
        "web.py",
        "    drain_bound = DRAIN_FACTOR * limit\n",
        "    limit = 1 << 40\n    drain_bound = DRAIN_FACTOR * limit\n",
        "the request body limit is not applied",
        (HTTP,),
    ),
    Mutant(
        "door-namespace-gate",
        "rules/door.py",
        "    if not settings.namespace_allowed(about.namespace):\n        return None",
        "    if False:\n        return None",
        "namespaces: the engine decides a pod, a job or a chain outside PODSWEEPER_NAMESPACES that "
        "slipped past triage",
        (UNIT,),
    ),
    Mutant(
        "no-backoff-limit-ignores-the-limit",
        "model.py",
        "        if self.backoff_limit is not None:\n            return ()",
        "        if False:\n            return ()",
        "no-backoff-limit warns about a job whose backoffLimit stops its restarts",
        (UNIT,),
    ),
    Mutant(
        "no-backoff-limit-warns-every-new-job",
        "rules/no_backoff_limit.py",
        "    if not restarting:\n        return None",
        "    if False:\n        return None",
        "no-backoff-limit warns about every new job, whatever its replicas' restart policies and limit",
        (UNIT,),
    ),
    Mutant(
        "restarted-trainjob-resumed-suspended-again",
        "rules/finished_trainjob_restarted.py",
        "    if jobset.resumed:\n        return []",
        "    if False:\n        return []",
        "finished-trainjob-restarted suspends a TrainJob a person resumed (spec.suspend false)",
        (UNIT,),  # the generated worlds have no person resuming a JobSet
    ),
    Mutant(
        "unbounded-restarts-despite-deadline",
        "rules/unbounded_jobset_restarts.py",
        "    if job.active_deadline_seconds is not None:\n        return []  # the deadline ends it",
        "    if False:\n        return []  # the deadline ends it",
        "unbounded-jobset-restarts warns about a TrainJob whose activeDeadlineSeconds ends it",
        (UNIT,),
    ),
    Mutant(
        "deadline-jobset-no-grace",
        "rules/deadline_exceeded_jobset_running.py",
        "    if waited < ctx.settings.operator_grace_seconds:\n        return []",
        "    if False:\n        return []",
        "deadline-exceeded-jobset-running deletes the JobSet before Trainer's own delete had its grace",
        # The generated worlds report a deadline leftover's pods again past the grace, so the
        # property tests reach the rule often enough (16 named deletes in the 1,000 coverage
        # scenarios, from 2) to catch it on their own.
        (UNIT, PROPERTY),
    ),
    Mutant(
        "deadline-jobset-any-failure",
        "rules/deadline_exceeded_jobset_running.py",
        "job.failed_reason != DEADLINE_EXCEEDED:",
        "not job.failed_reason:",
        "deadline-exceeded-jobset-running deletes the JobSet of a TrainJob failed for another reason "
        "(Trainer makes it again, kubeflow/trainer#3891)",
        (UNIT, PROPERTY),
    ),
    Mutant(
        "podgroup-no-grace",
        "rules/failed_trainjob_podgroup.py",
        "    if waited < ctx.settings.operator_grace_seconds:\n        return []",
        "    if False:\n        return []",
        "failed-trainjob-podgroup warns before a Trainer that cleans the PodGroup up had its grace",
        (UNIT, PROPERTY),
    ),
    Mutant(
        "podgroup-any-phase",
        "rules/failed_trainjob_podgroup.py",
        "        if group.phase != RESERVING:\n            continue\n",
        "",
        "failed-trainjob-podgroup says a queue reserves for a PodGroup that is not Inqueue (Pending, Completed)",
        (UNIT, PROPERTY),
    ),
    Mutant(
        "podgroup-complete-job",
        "rules/failed_trainjob_podgroup.py",
        "    if job is None or job.finished != job.kind.finished_conditions[-1] or job.finished_at is None:",
        "    if job is None or job.finished is None or job.finished_at is None:",
        "failed-trainjob-podgroup warns about a Complete TrainJob's PodGroup",
        # Volcano marks a Complete job's PodGroup Completed (measured), so the generated worlds never
        # hold the one state this bug shows in: the unit table's "even were it Inqueue" does.
        (UNIT,),
    ),
    Mutant(
        "podgroup-any-owner",
        "lineage.py",
        "        return [c for c in self.companions if not c.terminating and self.owns(c, self.ref.kind.kind, job.uid)]",
        "        return [c for c in self.companions if not c.terminating]",
        "failed-trainjob-podgroup warns about a PodGroup named like the TrainJob that it does not control "
        "(an earlier TrainJob's, a plain Volcano Job's, nobody's)",
        (UNIT, PROPERTY),
    ),
    # Rule expired-trainjob is opt-in (PODSWEEPER_TRAINJOB_TTL_SECONDS): a third of the generated
    # worlds run with it on (tests/replay/model_ttl.py), and its unit table catches these too.
    Mutant(
        "expired-trainjob-suspended",
        "rules/expired_trainjob.py",
        '    if job.suspended:\n        return "suspended"',
        '    if False:\n        return "suspended"',
        "expired-trainjob deletes a suspended TrainJob (someone holds it: Kueue, a person)",
        (UNIT, PROPERTY),
    ),
    Mutant(
        "expired-trainjob-managed-by-other",
        "rules/expired_trainjob.py",
        '    if job.managed_by not in (None, "", job.kind.managed_by):',
        "    if False:",
        "expired-trainjob deletes a TrainJob another controller manages (spec.managedBy: MultiKueue)",
        (UNIT, PROPERTY),
    ),
    Mutant(
        "expired-trainjob-owned",
        "rules/expired_trainjob.py",
        "    if job.owned_by is not None:",
        "    if False:",
        "expired-trainjob deletes a TrainJob another object owns (an OptimizationJob's trial)",
        (UNIT, PROPERTY),
    ),
    Mutant(
        "expired-trainjob-restarted",
        "rules/expired_trainjob.py",
        "    if jobset is not None and _made_after(jobset.created, job.finished_at):",
        "    if False:",
        "expired-trainjob deletes a TrainJob running a JobSet made after its finish (restarted)",
        (UNIT, PROPERTY),
    ),
    Mutant(
        "expired-trainjob-early",
        "rules/expired_trainjob.py",
        "if waited >= ttl else None",
        "if waited + 1 >= ttl else None",
        "expired-trainjob deletes a finished TrainJob before its retention has passed",
        (UNIT, PROPERTY),
    ),
    Mutant(
        "expired-trainjob-annotation-lengthens",
        "rules/expired_trainjob.py",
        "    if seconds >= ttl:\n        return ttl,",
        "    if False:\n        return ttl,",
        "a TrainJob's podsweeper.dev/ttl-seconds-after-finished lengthens the retention (it may only shorten it)",
        (UNIT, PROPERTY),
    ),
    Mutant(
        "door-suspends-a-managed-job",
        "rules/door.py",
        "    if job.suspend_blocked:\n        return Action.WARN",
        "    if False:\n        return Action.WARN",
        "suspend-or-warn: a job Kueue or another managedBy controller owns is suspended by podsweeper",
        (UNIT,),
    ),
    Mutant(
        "evidence-dry-run-claims-delete",
        "evidence.py",
        "    Result.DRY_RUN: Source.WOULD_BE_DELETED,",
        "    Result.DRY_RUN: Source.DELETED_BY_PODSWEEPER,",
        "evidence: a dry run's record says podsweeper deleted a pod that still runs",
    ),
    Mutant(
        "evidence-written-before-the-result",
        "keeper.py",
        "runs = [f.kept_as(source_of(results.get(uid))) for uid, pod in pods.items() for f in pod]",
        "runs = [f.kept_as(Source.DELETED_BY_PODSWEEPER) for uid, pod in pods.items() for f in pod]",
        "evidence: every pod a pass acted on is recorded deleted by podsweeper, whatever became of it",
    ),
    Mutant(
        "replay-rolled-back",
        "cluster/simulated.py",
        "        number = _version(version)\n",
        "        number = None\n",
        "replay: a late, older change (resourceVersion) replaces the newer state of an object",
    ),
    Mutant(
        "bad-input-echoed",
        "objects/base.py",
        "    return f\"{where}: {first['msg']}\"",
        "    return f\"{where}: {first['msg']} (got {first.get('input')!r})\"",
        "secrets: a 400 answer (and its log line) quotes the invalid input, a pod's env value with it",
        (SECRETS,),
    ),
    # Namespace policy (podsweeper.policy) and the CloudEvents out (podsweeper.notify).
    Mutant(
        "namespace-lifts-dry-run",
        "policy.py",
        "        if mode is Mode.LIVE and settings.dry_run and not settings.namespace_live_allowed:\n",
        "        if False:\n",
        "a namespace's podsweeper.dev/mode: live lifts a global dry-run without PODSWEEPER_NAMESPACE_LIVE_ALLOWED",
        (UNIT,),
    ),
    Mutant(
        "global-dry-run-gate-gone",
        "actions.py",
        "    if settings.dry_run and not settings.namespace_live_allowed:\n        return True\n",
        "",
        "the acting side no longer holds a global dry-run against a decision's policy",
        (UNIT,),
    ),
    Mutant(
        "namespace-off-ignored",
        "namespaces.py",
        "        if resolved.policy.mode is Mode.OFF:\n            return Closed(off_note(namespace))\n",
        "",
        "podsweeper.dev/mode: off still decides (and warns) in that namespace",
        (UNIT, PROPERTY),
    ),
    Mutant(
        "namespace-grace-below-the-floor",
        "policy.py",
        "    if seconds < floor:\n",
        "    if seconds < 0:\n",
        "a namespace shortens a grace below the global one without PODSWEEPER_NAMESPACE_MIN_GRACE_SECONDS",
        (UNIT,),
    ),
    Mutant(
        "emitter-blocks-the-delete",
        "actor.py",
        "        self.notifier.submit(notices(applied, dry, event_id, now, self.notifier.source))\n",
        "        for notice in notices(applied, dry, event_id, now, self.notifier.source):\n"
        "            self.notifier._send(notice)\n",
        "CloudEvents sent inside the pass: a slow sink delays the delete",
        (UNIT,),
    ),
    Mutant(
        "dry-run-emits-a-live-type",
        "notify.py",
        "    if dry_run:\n        return DRY_RUN if result in DRY_RUN_RESULTS else None\n",
        "",
        "a dry run sends dev.podsweeper.job.warned (a live type) for the warnings it writes",
        (UNIT,),
    ),
    Mutant(
        "notify-sender-not-per-process",
        "notify.py",
        "        self._thread: threading.Thread | None = None\n\n"
        "    def _started(self) -> queue.Queue[Notice | None]:\n"
        "        if self._pid != os.getpid():\n",
        "        self._thread: threading.Thread | None = None\n        self._started()\n\n"
        "    def _started(self) -> queue.Queue[Notice | None]:\n"
        "        if self._pid is None:\n",
        "the CloudEvents sender started with the Notifier, in the process that built the app: "
        "gunicorn's forked worker queues to a thread it does not have, and nothing is ever sent",
        (UNIT, NOTIFY_SERVED),
    ),
    Mutant(
        "restart-record-in-the-finish-second",
        "rules/finished_trainjob_restarted.py",
        "_after(jobset, mark.at, strictly=shown)",
        "_after(jobset, mark.at)",
        "finished-trainjob-restarted: a JobSet made in the second of a finish the TrainJob still shows "
        "counts as a restart when podsweeper's record of the finish names no JobSet (the oracle disagreed)",
        (UNIT,),
    ),
    # Trust against a liar (issue 38): each brings back one trust in an event's payload.
    Mutant(
        "liar-erased-failed-believed",
        "lineage.py",
        "    if jobset.created is None or not made_again(job, jobset):\n        return None\n"
        "    since = (jobset.created - claimed).total_seconds()\n    if 0 <= since <= ERASED_WITHIN_SECONDS:",
        "    if jobset.created is None:\n        return None\n"
        "    since = (jobset.created - claimed).total_seconds()\n    if True:",
        "trust: an event claiming Failed makes the pass believe Trainer erased it, on a running job's "
        "first JobSet, and write a finish record (issue 38, finding 1)",
        (UNIT,),
    ),
    Mutant(
        "liar-restart-record-believed",
        "rules/finished_trainjob_restarted.py",
        "        restarted = restarted and made_again(job, jobset)\n",
        "",
        "trust: a planted finish record alone makes a running TrainJob's first JobSet a restart, "
        "and the job is suspended",
        (UNIT,),
    ),
    Mutant(
        "liar-evidence-from-the-payload",
        "keeper.py",
        "        failures = failures_of(fresh, fresh.gpus(gpus), Source.TERMINATED)",
        "        failures = failures_of(pod, pod.gpus(gpus), Source.TERMINATED)",
        "trust: the failed runs kept (and their logs read) are the payload's, not the pod's read now",
        (UNIT,),
    ),
    Mutant(
        "liar-evidence-pod-uid-unchecked",
        "keeper.py",
        "        if fresh is None or fresh.uid != pod.uid:",
        "        if fresh is None:",
        "trust: a pod event with another pod's uid has the pod of that name's log kept",
        (UNIT,),
    ),
    Mutant(
        "liar-evidence-job-unproven",
        "keeper.py",
        "        job = proven_job(fresh, cluster)",
        "        job = fresh.job",
        "trust: a pod's job is taken from its ownerReference without reading the job's uid now "
        "(issue 38, finding 2)",
        (UNIT,),
    ),
    # podsweeper's own records, bounded and its own (issue 38, findings 5 and 6).
    Mutant(
        "evidence-byte-budget",
        "evidence.py",
        "    if total <= budget:\n        return records",
        "    if True:\n        return records",
        "evidence: a big failing job's store passes 1 MiB and is refused (every event of the job 503)",
        (UNIT, RECORDS_API),
    ),
    Mutant(
        "evidence-first-failure-dropped",
        "evidence.py",
        "        if not first[i]:\n",
        "        if True:\n",
        "evidence: a container's first failure is dropped to fit the store",
        (UNIT,),
    ),
    Mutant(
        "message-without-log-permission",
        "keeper.py",
        "            new = [f.without_text() for f in new]",
        "            pass",
        "evidence: the termination message (the log, under FallbackToLogsOnError) kept where log text is off",
        (UNIT,),
    ),
    Mutant(
        "foreign-label-ignored",
        "cluster/kube/records.py",
        '    if (metadata.get("labels") or {}).get(label) != label_value(job.name):\n        return Whose.FOREIGN',
        "    if False:\n        return Whose.FOREIGN",
        "records: a ConfigMap without podsweeper's label is taken for its record",
        (UNIT,),
    ),
    Mutant(
        "foreign-evidence-store-overwritten",
        "cluster/kube/records.py",
        "        if owner is Whose.FOREIGN:\n            raise NotKept",
        "        if False:\n            raise NotKept",
        "records: someone else's ConfigMap at the store's name is read and replaced",
        (RECORDS_API,),
    ),
    Mutant(
        "foreign-finish-mark-overwritten",
        "cluster/kube/records.py",
        "        if owner is not Whose.THIS_JOB:\n            reason",
        "        if False:\n            reason",
        "records: a ConfigMap at the finish mark's name that is not podsweeper's is replaced",
        (RECORDS_API,),
    ),
    Mutant(
        "finish-mark-predates-job",
        "cluster/kube/records.py",
        "        return datetime.fromisoformat(made) < created",
        "        return False",
        "records: a finish mark made before its job (planted) counts",
        (UNIT, RECORDS_API),
    ),
    Mutant(
        "evidence-refused-is-503",
        "cluster/kube/records.py",
        "version, (409, *REFUSED_FOR_GOOD)",
        "version, (409,)",
        "evidence: a store the API refuses (422) becomes ApiUnavailable, every event of the job 503",
        (RECORDS_API,),
    ),
    Mutant(
        "liar-first-jobset-at-resume-made-again",
        "lineage.py",
        "    started = max(job.created, job.suspend_changed_at or job.created)",
        "    started = job.created",
        "trust: a TrainJob admitted (or resumed) late gets its first JobSet then, which passes for one made "
        "again: a claimed Failed just before it is believed, and the running job suspended",
        (UNIT,),
    ),
    Mutant(
        "finish-mark-signature-unchecked",
        "cluster/kube/records.py",
        "        if key is None or not hmac.compare_digest(signature, sign(key, job, fields)):",
        "        if key is None:",
        "trust: a finish mark anyone may plant (podsweeper's label, the job as owner) counts without "
        "podsweeper's signature, and a running TrainJob whose JobSet was made again is suspended",
        (RECORDS_API,),
    ),
    # The safety points an audit found no seeded bug for (each caught where its suites say).
    Mutant(
        "stuck-limit-ignored",
        "rules/stuck_terminating.py",
        "    return seconds if seconds >= limit else None",
        "    return seconds if seconds >= 0 else None",
        "stuck-terminating force-deletes as soon as a pod's grace ended, PODSWEEPER_STUCK_TERMINATING_SECONDS ignored",
        (UNIT,),
    ),
    Mutant(
        "kueue-unsafe-forced",
        "rules/stuck_terminating.py",
        "    if limit is None or pod.safe_to_force_delete is False:",
        "    if limit is None:",
        "stuck-terminating force-deletes a pod whose owner said safe-to-forcefully-delete: false",
        (UNIT, PROPERTY),
    ),
    Mutant(
        "kueue-raced",
        "rules/stuck_terminating.py",
        "        return max(limit, KUEUE_FORCEFUL_TERMINATION_SECONDS + ctx.settings.operator_grace_seconds)",
        "        return limit",
        "stuck-terminating force-deletes a safe-to-forcefully-delete pod before Kueue's own turn and the grace",
        (UNIT, PROPERTY),
    ),
    Mutant(
        "delete-grace-zero",
        "cluster/kube/writes.py",
        '            **({"gracePeriodSeconds": 0} if force else {}),',
        '            "gracePeriodSeconds": 0,',
        "every delete is a force delete (grace period 0): containers get no SIGTERM grace",
        (REAL_API,),
    ),
    Mutant(
        "evidence-store-unbounded",
        "evidence.py",
        "    return bounded(ordered, [id(r) in firsts for r in ordered], STORE_BUDGET)",
        "    return ordered",
        "the evidence store's byte bound is off: a big failing job's store outgrows what the API accepts",
        (UNIT,),
    ),
    Mutant(
        "chain-link-deleted-orphaning",
        "cluster/kube/writes.py",
        '"propagationPolicy": "Background"',
        '"propagationPolicy": "Orphan"',
        "a JobSet or batch Job is deleted with Orphan propagation: its Jobs and pods run on",
        (CHAIN_API,),
    ),
    Mutant(
        "chain-link-delete-uid-unchecked",
        "cluster/kube/writes.py",
        '"preconditions": {"uid": uid}}',
        "}",
        "a JobSet or batch Job is deleted without its uid as precondition: a same-named new one may go",
        (CHAIN_API,),
    ),
    Mutant(
        "suspend-uid-unchecked",
        "cluster/kube/writes.py",
        '        patch = {"metadata": {"uid": ref.uid}, "spec": switch}',
        '        patch = {"spec": switch}',
        "a suspend carries no uid precondition: a job re-created under the name is suspended",
        (REAL_API, CHAIN_API),
    ),
    Mutant(
        "lineage-owns-by-kind",
        "lineage.py",
        "        return controlled_by(intermediate.controller, parent_kind, parent_uid)",
        "        return intermediate.controller is not None and intermediate.controller.kind == parent_kind",
        "a TrainJob owns a JobSet (and a JobSet a Job) by kind, not by uid: an earlier job's links count as its own",
        (UNIT,),
    ),
    Mutant(
        "deadline-counts-every-pod",
        "rules/deadline_exceeded_jobset_running.py",
        "    pods = tuple(p for p in lineage.pods if p.labels.get(lineage.chain.uid_label) == jobset.uid)",
        "    pods = lineage.pods",
        "deadline-exceeded-jobset-running carries (and keeps the evidence of) pods that are not its JobSet's",
        (UNIT,),
    ),
    Mutant(
        "stuck-chain-unproven",
        "passes.py",
        "            if pod.job.kind.chain is not None and not _chain_proven(pod, cluster):\n                continue\n",
        "",
        "the stuck pass force-deletes a pod labelled as a TrainJob's whose JobSet, read now, is not that job's",
        (UNIT,),
    ),
    Mutant(
        "dry-run-announced-as-done",
        "notify.py",
        "        return DRY_RUN if result in DRY_RUN_RESULTS else None",
        "        return LIVE_TYPES.get(result) if result is not None else None",
        "a dry run's decisions are announced as CloudEvents of acts",
        (UNIT,),
    ),
    Mutant(
        "evidence-upgraded-by-a-sighting",
        "evidence.py",
        "    if new.observed or kept is None:",
        "    if kept is None:",
        "a pod event's sighting rewrites a record of podsweeper's own act (the evidence upgrade order)",
        (UNIT,),
    ),
    Mutant(
        "request-deadline-dropped",
        "pipeline.py",
        "        cluster = self.cluster.bounded(deadline) if deadline is not None else self.cluster",
        "        cluster = self.cluster",
        "the per-request deadline is not passed to the API calls: a hanging API holds the answer past its bound",
        (FAULTS,),
    ),
)
