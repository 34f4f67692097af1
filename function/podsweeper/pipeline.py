"""One event, one clear pass: triage -> fresh read -> decide -> act -> report.

Shared by the live function, the CLI sweep and the replay; only the Cluster differs.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from podsweeper import engine, metrics
from podsweeper.actions import Applied, carry_out
from podsweeper.cluster.base import Cluster, JobUnknown
from podsweeper.config import Settings
from podsweeper.decisions import Action, Decision
from podsweeper.intake import Ignored, Intake, ObjectChange, ReferenceChange, SweepRequest, Trigger
from podsweeper.model import JobRef, Pod, Verb
from podsweeper.ownership import has_current_labels
from podsweeper.report import log_decision
from podsweeper.triage import JobPass, PassReason, in_scope, triage_object


@dataclass
class Outcome:
    """What handling one event did; `note` says why nothing (or not everything) was done."""

    event_id: str
    applied: list[Applied] = field(default_factory=list)
    note: str | None = None

    @property
    def ignored(self) -> bool:
        return self.note is not None and not self.applied

    @property
    def summary(self) -> dict[str, Any]:
        counts: dict[str, int] = defaultdict(int)
        for item in self.applied:
            counts[item.result.value if item.result else item.decision.action.value] += 1
        return {
            "event_id": self.event_id,
            "decisions": len(self.applied),
            **counts,
            **({"note": self.note} if self.note else {}),
        }


@dataclass
class Pipeline:
    cluster: Cluster
    settings: Settings

    def handle(self, intake: Intake, now: datetime, deadline: float | None = None) -> Outcome:
        """Handle one parsed event. Raises ApiUnavailable when the API fails (-> 503)."""
        cluster = self.cluster.bounded(deadline) if deadline is not None else self.cluster
        outcome = Outcome(intake.attributes.id)
        work = self._work_for(intake.trigger, cluster)
        if isinstance(work, Ignored):
            outcome.note = work.reason
            return outcome
        if isinstance(work, SweepRequest):
            decisions, outcome.note = self._sweep(cluster, now, deadline)
        else:
            decisions, outcome.note = self._run_pass(work, cluster, now)

        def report(item: Applied) -> None:
            metrics.DECISIONS.labels(item.decision.rule.value, item.decision.action.value).inc()
            if item.decision.action is Action.DELETE and item.result is not None:
                metrics.DELETES.labels(item.result.value).inc()
            log_decision(outcome.event_id, item.decision, item.result, self.settings.dry_run)
            outcome.applied.append(item)

        carry_out(decisions, cluster, self.settings, now, report)
        return outcome

    # -- what to do ----------------------------------------------------------------
    def _work_for(self, trigger: Trigger, cluster: Cluster) -> JobPass | SweepRequest | Ignored:
        if isinstance(trigger, (Ignored, SweepRequest)):
            return trigger
        namespace = trigger.namespace if isinstance(trigger, ReferenceChange) else trigger.obj.namespace
        outside = in_scope(namespace, self.settings)
        if outside is not None:
            return outside
        if isinstance(trigger, ReferenceChange):
            return self._resolve_reference(trigger, cluster)
        return triage_object(trigger, self.settings)

    def _resolve_reference(self, ref: ReferenceChange, cluster: Cluster) -> JobPass | Ignored:
        """Reference mode carries no object: read it, then triage it like Resource mode."""
        if ref.kind is not None:  # a job: the pass reads it fresh anyway
            job_ref = JobRef(ref.kind, ref.namespace, ref.name, None, ref.api_version)
            if ref.verb is Verb.DELETE:
                return JobPass(job_ref, PassReason.DELETED)
            return JobPass(job_ref, PassReason.REFERENCE, check_backoff=ref.verb is Verb.ADD)
        if ref.verb is Verb.DELETE:
            return Ignored("pod deleted")
        pod = cluster.get_pod(ref.namespace, ref.name)
        if pod is None:
            return Ignored("pod no longer exists")
        return triage_object(ObjectChange(ref.verb, pod), self.settings)

    # -- deciding on fresh state -----------------------------------------------------
    def _run_pass(self, work: JobPass, cluster: Cluster, now: datetime) -> tuple[list[Decision], str | None]:
        """Re-read the job (and, when a rule may apply, its pods) and decide on that."""
        try:
            job = cluster.get_job(work.ref)
        except JobUnknown as unknown:
            return [], f"job unknown, not gone: {unknown}"
        decisions: list[Decision] = []
        if job is not None and work.check_backoff:
            decisions += engine.decide_new_job(job, self.settings)
        replaced = job is not None and work.ref.uid is not None and job.uid != work.ref.uid
        note = None
        if job is None or job.finished or replaced or work.reason.lists_pods:
            pods = cluster.list_job_pods(work.ref, all_label_sets=work.all_label_sets)
            decisions += engine.decide_pods(work.ref, job, pods, now, self.settings)
            note = engine.left_to_operator(None if replaced else job, pods, now, self.settings)
        if decisions:
            return decisions, note
        return decisions, note or "the fresh state names no pod for any rule"

    def _sweep(
        self, cluster: Cluster, now: datetime, deadline: float | None
    ) -> tuple[list[Decision], str | None]:
        """Backstop: find jobs whose listed state needs action, then run a normal pass on each.

        Pods are listed before jobs, so a job created in between can never make its pods
        look orphaned; every candidate is re-read by its pass before anything is decided.
        """
        decisions: list[Decision] = []
        scopes: list[str | None] = list(sorted(self.settings.namespace_set)) or [None]
        candidates: list[JobPass] = []
        for namespace in scopes:
            groups: dict[tuple[str, str, str], list[Pod]] = defaultdict(list)
            for pod in cluster.list_training_pods(namespace):
                if pod.job is not None and in_scope(pod.namespace, self.settings) is None:
                    groups[pod.job.key].append(pod)
            if not groups:
                continue
            jobs = {job.ref.key: job for job in cluster.list_jobs(namespace)}
            for key, pods in groups.items():
                owner = pods[0].job
                assert owner is not None
                ref = JobRef(owner.kind, pods[0].namespace, owner.name)
                listed = engine.decide_pods(ref, jobs.get(key), pods, now, self.settings)
                if any(d.action is not Action.SKIP for d in listed):
                    # Pods labelled only the pre-v1.6 way: the pass must list both label sets.
                    legacy = not all(has_current_labels(pod.labels) for pod in pods)
                    candidates.append(JobPass(ref, PassReason.SWEEP, all_label_sets=legacy))
        for index, work in enumerate(candidates):
            if deadline is not None and time.monotonic() > deadline - 1.0:
                return decisions, f"sweep stopped at its time bound after {index} of {len(candidates)} jobs"
            decisions += self._run_pass(work, cluster, now)[0]
        return decisions, f"swept {len(candidates)} job(s) needing action"
