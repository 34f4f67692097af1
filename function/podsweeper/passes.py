"""The passes: re-read what a rule may need and decide on that fresh state. A pass only reads
and decides; podsweeper.actor carries out what it decided.

The shape of the work says which pass: a v1 job owns its pods (Passes.v1), a chained job
reaches them through a JobSet and batch Jobs (Passes.chain, which also keeps the record of the
job's finish that Trainer may erase), and pods the sweep saw stuck terminating are read again
with their nodes (Passes.stuck). All decide through podsweeper.engine, under the policy of the
namespace the one gate (NamespacePolicies.admit) resolved.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import datetime

from podsweeper import engine
from podsweeper.cluster.base import Cluster
from podsweeper.config import Settings
from podsweeper.decisions import Action, Decision, Target
from podsweeper.evidence import Failure, Source, failures_of
from podsweeper.lineage import Lineage, finish_seen
from podsweeper.model import Intermediate, JobRef, Node, Pod
from podsweeper.namespaces import Closed, NamespacePolicies
from podsweeper.operator import left_to_operator
from podsweeper.policy import NamespacePolicy
from podsweeper.report import log_disagreement
from podsweeper.rules import Listed, Looks
from podsweeper.triage import JobPass, PassReason


@dataclass(frozen=True)
class PassResult:
    decisions: list[Decision]
    note: str | None
    bound: int  # how many of the decisions' deletes this pass may make
    # The failed runs of the pods a JobSet/Job delete takes with it, and the job they are filed
    # under: kept before the act (the pods go by the garbage collector's hand, or not at all).
    keep_first: tuple[JobRef, tuple[Failure, ...]] | None = None


def stamped(decisions: list[Decision], policy: NamespacePolicy) -> list[Decision]:
    """The decisions, each with the namespace policy it was decided under: the acting side
    reads its dry-run there, the reports say which settings applied and where they came from."""
    return [replace(d, policy=policy) for d in decisions]


@dataclass(frozen=True)
class Passes:
    settings: Settings
    # Each namespace's policy (podsweeper.namespaces), shared with the sweep and the actor.
    policies: NamespacePolicies

    def run(self, work: JobPass, cluster: Cluster, now: datetime) -> PassResult:
        """Re-read the job (and, when a rule may apply, its pods) and decide on that, with
        the settings of its namespace's policy; nothing at all where podsweeper is off."""
        ref = work.ref
        if not cluster.knows_job(ref):  # only a replay cannot tell: it never saw the job
            return PassResult([], f"job unknown, not gone: {ref.kind.kind} {ref.namespace}/{ref.name}", 0)
        admitted = self.policies.admit(cluster, ref.namespace, now)
        if isinstance(admitted, Closed):
            return PassResult([], admitted.note, 0)
        if ref.kind.chain is not None:
            result = self.chain(work, cluster, now, admitted.settings)
        else:
            result = self.v1(work, cluster, now, admitted.settings)
        return replace(result, decisions=stamped(result.decisions, admitted.policy))

    def stuck(
        self, pods: list[tuple[str, str]], cluster: Cluster, now: datetime, deadline: float | None
    ) -> PassResult:
        """Rule stuck-terminating's pass: re-read each pod (namespace, name) the sweep saw stuck,
        its node and its job, then decide. Each node is read once (a lost node holds many pods);
        the decisions are carried out together, so one Event per job names all its pods. The
        note says where it stopped, if at the time bound."""
        decided: list[Decision] = []
        nodes: dict[str, Node | None] = {}
        note = ""
        for index, (namespace, name) in enumerate(pods):
            if deadline is not None and time.monotonic() > deadline - 1.0:
                note = f" (stopped at its time bound after {index} of {len(pods)})"
                break
            pod = cluster.get_pod(namespace, name)
            if pod is None or pod.job is None or pod.node is None:
                continue
            if not engine.nominated(Looks.STUCK, Listed(pod=pod), now, self.settings):
                continue  # no longer stuck, read now: no node read for it
            if pod.job.kind.chain is not None and not _chain_proven(pod, cluster):
                continue
            admitted = self.policies.admit(cluster, namespace, now)
            if isinstance(admitted, Closed):
                continue
            job = cluster.get_job(pod.job)
            if pod.node not in nodes:
                nodes[pod.node] = cluster.get_node(pod.node)
            found = engine.decide_stuck(pod, nodes[pod.node], job, now, admitted.settings)
            decided += stamped(found, admitted.policy)
        return PassResult(decided, note, self.settings.max_deletes_per_event)

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
        # A finished job's companions (a PodGroup): one GET each, only once it finished (a
        # running job's are its controller's); a kind the cluster does not serve reads as none.
        companions: tuple[Intermediate, ...] = ()
        if job is not None and job.finished is not None:
            found = (cluster.get_intermediate(kind, ref.namespace, ref.name) for kind in chain.companions)
            companions = tuple(c for c in found if c is not None)
        lineage = Lineage(ref, job, jobset, batch_jobs, pods, mark, companions)
        decisions = engine.decide_chain(lineage, now, settings, new=work.check_backoff)
        note = None if decisions else "the fresh state of the chain names nothing for any rule"
        return PassResult(
            decisions, note, settings.max_deletes_per_event, self._doomed_runs(decisions, lineage)
        )

    def _doomed_runs(
        self, decisions: list[Decision], lineage: Lineage
    ) -> tuple[JobRef, tuple[Failure, ...]] | None:
        """Failed runs of the pods a JobSet/Job delete is about to take with it, seen
        terminated: kept before the act, logs included (podsweeper.actor). The pods go by the
        garbage collector's hand (or not at all, in dry-run), so no record of them says
        podsweeper deleted them."""
        doomed = {d.uid for d in decisions if d.action is Action.DELETE and d.target is Target.INTERMEDIATE}
        jobset = lineage.live_jobset
        if jobset is not None and any(
            d.action is Action.DELETE and d.target is Target.JOB for d in decisions
        ):
            doomed.add(jobset.uid)  # the job itself goes (rule expired-trainjob): its chain with it
        if not doomed or lineage.job is None:
            return None
        uid_label = lineage.chain.uid_label
        gpus = self.settings.gpu_resource_names
        failures = tuple(
            failure
            for pod in lineage.pods
            if pod.labels.get(uid_label) in doomed
            or (pod.batch_job is not None and pod.batch_job.uid in doomed)
            for failure in failures_of(pod, pod.gpus(gpus), Source.TERMINATED)
        )
        return (lineage.job.ref, failures) if failures else None


def _chain_proven(pod: Pod, cluster: Cluster) -> bool:
    """A chain's pod counts as a training pod only when its JobSet, read now, is the one its
    labels name and a TrainJob controls it (a plain JobSet's pods look alike)."""
    assert pod.job is not None and pod.job.kind.chain is not None
    chain = pod.job.kind.chain
    jobset = cluster.get_intermediate(chain.links[0], pod.namespace, pod.job.name)
    return (
        jobset is not None
        and jobset.uid == pod.labels.get(chain.uid_label)
        and jobset.controller is not None
        and jobset.controller.kind == pod.job.kind.kind
    )
