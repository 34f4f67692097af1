"""One job's pass: re-read it (and what a rule may need), decide on that fresh state.

The shape of the job says which pass: a v1 job owns its pods (JobPassRunner.v1), a chained
job reaches them through a JobSet and batch Jobs (JobPassRunner.chain, which also keeps the
record of the job's finish that Trainer may erase). Both decide through podsweeper.engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from podsweeper import engine
from podsweeper.cluster.base import Cluster
from podsweeper.config import Settings
from podsweeper.decisions import Action, Decision, Target
from podsweeper.evidence import Source, failures_of
from podsweeper.keeper import EvidenceKeeper
from podsweeper.lineage import Lineage, made_again
from podsweeper.model import FinishMark, Intermediate, Job
from podsweeper.namespaces import NamespacePolicies, Resolved
from podsweeper.ownership import controlled_by
from podsweeper.policy import Knob, Mode, NamespacePolicy
from podsweeper.report import log_disagreement
from podsweeper.rules.operator_cleanup import left_to_operator
from podsweeper.triage import JobPass, PassReason


@dataclass(frozen=True)
class PassResult:
    decisions: list[Decision]
    note: str | None
    bound: int  # how many of the decisions' deletes this pass may make


# How long after the finish an event claims a JobSet made again may still be the restart
# that erased it: Trainer makes it within ~20 ms of the old one's delete (measured), and the
# event comes within seconds; a claim older than this cannot be corroborated any more.
ERASED_WITHIN_SECONDS = 60.0


def finish_seen(job: Job, jobset: Intermediate | None, claimed: datetime | None) -> FinishMark | None:
    """The finish of a chained job to remember: the one the fresh read shows, with the JobSet it
    finished with (its own, unless that one was made after the finish); or, when an event
    `claimed` a finish (its time) that the fresh job no longer shows, the one Trainer erased, if
    the fresh objects corroborate it.

    Trainer v2.3.0 derives Failed from the JobSet and drops it once the JobSet is gone, making a
    new one: under JobSet ttlSecondsAfterFinished 0 a TrainJob is Failed for ~50 ms, and the pass
    of that event can read it after (measured). Failed is the only finish it erases. The event
    is a claim: anyone who can reach the function can send one, with the job's real uid. So the
    erasure is believed only on the job's own JobSet, read now: the one it failed with, ended
    (a JobSet only being deleted proves nothing: a person may delete a running one); or one made again (not the job's first) at or after the claimed finish and
    within ERASED_WITHIN_SECONDS of it. A running job's first JobSet corroborates nothing, nor
    does no JobSet at all (a restart in that window goes unseen: a missed act, never a wrong one)."""
    if job.finished is not None:
        if jobset is None:
            return None
        owned = controlled_by(jobset.controller, job.kind.kind, job.uid)
        made_after = (
            job.finished_at is not None and jobset.created is not None and jobset.created > job.finished_at
        )
        return FinishMark(job.finished, job.finished_at, jobset.uid if owned and not made_after else "")
    if claimed is None or jobset is None or not controlled_by(jobset.controller, job.kind.kind, job.uid):
        return None
    failed = job.kind.finished_conditions[-1]
    if jobset.finished is not None:  # the JobSet it finished with, ended (maybe on its way out)
        return FinishMark(failed, None, jobset.uid)
    if jobset.created is None or not made_again(job, jobset):
        return None
    since = (jobset.created - claimed).total_seconds()
    if 0 <= since <= ERASED_WITHIN_SECONDS:
        return FinishMark(failed, jobset.created, "")  # the JobSet made again already
    return None


def stamped(decisions: list[Decision], policy: NamespacePolicy) -> list[Decision]:
    """The decisions, each with the namespace policy it was decided under: the acting side
    reads its dry-run there, the reports say which settings applied and where they came from."""
    return [replace(d, policy=policy) for d in decisions]


def off_note(namespace: str) -> str:
    return f"podsweeper is off in namespace {namespace} ({Knob.MODE.annotation}: {Mode.OFF.value})"


@dataclass(frozen=True)
class JobPassRunner:
    settings: Settings
    keeper: EvidenceKeeper
    # Each namespace's policy (podsweeper.namespaces), shared with the sweep.
    policies: NamespacePolicies = field(default=None, compare=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.policies is None:
            object.__setattr__(self, "policies", NamespacePolicies(self.settings))

    def resolved(self, cluster: Cluster, namespace: str, now: datetime) -> Resolved:
        """The namespace's policy and the settings its passes decide with."""
        return self.policies.for_namespace(cluster, namespace, now)

    def run(self, work: JobPass, cluster: Cluster, now: datetime) -> PassResult:
        """Re-read the job (and, when a rule may apply, its pods) and decide on that, with
        the settings of its namespace's policy; nothing at all where podsweeper is off."""
        ref = work.ref
        if not cluster.knows_job(ref):  # only a replay cannot tell: it never saw the job
            return PassResult([], f"job unknown, not gone: {ref.kind.kind} {ref.namespace}/{ref.name}", 0)
        resolved = self.resolved(cluster, ref.namespace, now)
        if resolved.policy.mode is Mode.OFF:
            return PassResult([], off_note(ref.namespace), 0)
        if ref.kind.chain is not None:
            result = self.chain(work, cluster, now, resolved.settings)
        else:
            result = self.v1(work, cluster, now, resolved.settings)
        return replace(result, decisions=stamped(result.decisions, resolved.policy))

    def v1(
        self, work: JobPass, cluster: Cluster, now: datetime, settings: Settings | None = None
    ) -> PassResult:
        settings = settings or self.settings
        job = cluster.get_job(work.ref)
        replaced = job is not None and work.ref.uid is not None and job.uid != work.ref.uid
        owner = None if replaced else job  # a same-named new job does not own the old pods
        decisions: list[Decision] = []
        if job is not None:
            # A same-named new job (replaced) gets only its new-job warnings from this pass.
            decisions += engine.decide_job(job, now, settings, new=work.check_backoff, replaced=replaced)
        note = None
        if job is None or job.finished or replaced or work.reason.lists_pods:
            pods = cluster.list_job_pods(work.ref, all_label_sets=work.all_label_sets)
            # A launcher pod (MPIJob v2beta1) is the job's only if its batch Job, read now, is.
            launcher, ns = work.ref.kind.launcher, work.ref.namespace
            vias = engine.launcher_links(pods) if launcher is not None else []
            links = [cluster.get_intermediate(launcher.link, ns, via.name) for via in vias if launcher]
            launchers = engine.proven_launchers(owner, [link for link in links if link is not None])
            decisions += engine.decide_pods(work.ref, job, pods, now, settings, launchers)
            note = left_to_operator(owner, pods, now, settings)
        bound = engine.delete_bound(owner, settings)
        if not decisions:
            note = note or "the fresh state names no pod for any rule"
        return PassResult(decisions, note, bound)

    def chain(
        self, work: JobPass, cluster: Cluster, now: datetime, settings: Settings | None = None
    ) -> PassResult:
        """A chained job (TrainJob): read the job, its JobSet, the Jobs and pods labelled with
        its name, decide on the whole chain."""
        settings = settings or self.settings
        ref, chain = work.ref, work.ref.kind.chain
        assert chain is not None
        job = cluster.get_job(ref)
        jobset = cluster.get_intermediate(chain.links[0], ref.namespace, ref.name)
        selector = f"{chain.name_label}={ref.name}"
        batch_jobs = tuple(cluster.list_intermediates(chain.links[-1], ref.namespace, selector))
        pods = tuple(cluster.list_job_pods(ref))
        mark = None
        # The event claimed the job finished; read now, the same job no longer is: Trainer may have
        # erased it, if the fresh chain says so (finish_seen); else the claim is said and dropped.
        claimed = (
            work.claimed_finish or now
            if work.reason is PassReason.FINISHED
            and job is not None
            and job.finished is None
            and job.uid == work.ref.uid
            else None
        )
        if job is not None and not job.suspended and jobset is not None:
            mark = cluster.read_finish_mark(job.ref, job.created)
            seen = finish_seen(job, jobset, claimed if mark is None else None)
            if seen is not None and (mark is None or (mark.condition, mark.at) != (seen.condition, seen.at)):
                mark = seen  # remembered: Trainer may erase the finish (a Failed TrainJob restarted)
                cluster.write_finish_mark(job.ref, mark)
            elif claimed is not None and mark is None:
                log_disagreement(
                    f"{ref.kind.kind} {ref.namespace}/{ref.name} finished",
                    "not finished, and its JobSet does not show a finish Trainer erased: nothing done",
                )
        lineage = Lineage(ref, job, jobset, batch_jobs, pods, mark)
        decisions = engine.decide_chain(lineage, now, settings, new=work.check_backoff)
        self._keep_chain_evidence(decisions, lineage, cluster)
        note = None if decisions else "the fresh state of the chain names nothing for any rule"
        return PassResult(decisions, note, settings.max_deletes_per_event)

    def _keep_chain_evidence(self, decisions: list[Decision], lineage: Lineage, cluster: Cluster) -> None:
        """Failed runs of the pods a JobSet/Job delete is about to take with it, logs included.

        Kept as seen terminated, before the act: the pods go by the garbage collector's hand
        (or not at all, in dry-run), so no record of them says podsweeper deleted them."""
        doomed = {d.uid for d in decisions if d.action is Action.DELETE and d.target is Target.INTERMEDIATE}
        if not doomed or lineage.job is None:
            return
        uid_label = lineage.chain.uid_label
        gpus = self.settings.gpu_resource_names
        failures = [
            failure
            for pod in lineage.pods
            if pod.labels.get(uid_label) in doomed
            or (pod.batch_job is not None and pod.batch_job.uid in doomed)
            for failure in failures_of(pod, pod.gpus(gpus), Source.TERMINATED)
        ]
        if failures:
            self.keeper.keep(cluster, lineage.job.ref, failures, read_logs=True)
