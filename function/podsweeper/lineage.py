"""A chained job as its pass read it (Trainer v2: TrainJob -> JobSet -> batch Job -> Pod).

A pod of an active batch Job that is deleted is only re-created by the Job controller, so the
chain rules (podsweeper.rules, Looks.CHAIN) act on the level that stops the waste for good: the
job, the JobSet, or a batch Job left without one. The pass reads the chain's objects fresh (the
TrainJob, its JobSet, the Jobs and pods labelled with its name, and, once it finished, what
else it controls under its name: Volcano's PodGroup) into a Lineage.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from podsweeper.kinds import Chain
from podsweeper.model import FinishMark, Intermediate, Job, JobRef, Pod
from podsweeper.ownership import controlled_by

# A TrainJob's first JobSet is made within a second of it (measured ~0.1 s); one made later
# was made again (after a delete or a TTL). Only such a JobSet can be a restart's.
FIRST_JOBSET_WITHIN_SECONDS = 2.0


def made_again(job: Job, jobset: Intermediate) -> bool:
    """Whether this JobSet was made after the TrainJob's first: fresh state, the one proof that
    a TrainJob may have been restarted (its first JobSet never was). Trainer makes the first at
    the job's creation or, for a job made suspended (Kueue's queue), at its resume."""
    if job.suspended or jobset.suspended or job.created is None or jobset.created is None:
        return False
    started = max(job.created, job.suspend_changed_at or job.created)
    return (jobset.created - started).total_seconds() >= FIRST_JOBSET_WITHIN_SECONDS


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


@dataclass(frozen=True)
class Lineage:
    """One chained job as a fresh read found it; `job` None: it does not exist."""

    ref: JobRef
    job: Job | None
    jobset: Intermediate | None  # the JobSet named like the job
    batch_jobs: tuple[Intermediate, ...] = ()  # the batch Jobs labelled with the job's name
    pods: tuple[Pod, ...] = ()
    finish_mark: FinishMark | None = None  # podsweeper's record of the job's last finish
    companions: tuple[Intermediate, ...] = ()  # named like the job (a PodGroup), read once it finished

    @property
    def chain(self) -> Chain:
        chain = self.ref.kind.chain
        assert chain is not None, "a Lineage is only built for a chained kind"
        return chain

    def owns(self, intermediate: Intermediate, parent_kind: str, parent_uid: str | None) -> bool:
        return controlled_by(intermediate.controller, parent_kind, parent_uid)

    @property
    def filed_under(self) -> JobRef:
        """The job the chain's decisions are filed under (its Events, its evidence)."""
        if self.job is not None:
            return self.job.ref
        return JobRef(self.ref.kind, self.ref.namespace, self.ref.name)

    @property
    def live_jobset(self) -> Intermediate | None:
        """The JobSet the existing TrainJob controls, if any."""
        jobset, job = self.jobset, self.job
        if jobset is None or job is None or jobset.terminating:
            return None
        return jobset if self.owns(jobset, self.ref.kind.kind, job.uid) else None

    @property
    def own_companions(self) -> list[Intermediate]:
        """The companions (a PodGroup) the existing job controls, by uid, not being deleted."""
        job = self.job
        if job is None:
            return []
        return [c for c in self.companions if not c.terminating and self.owns(c, self.ref.kind.kind, job.uid)]

    def active_pods(self, jobset: Intermediate) -> list[Pod]:
        """Pending/Running pods the JobSet runs: its uid on them, under a batch Job it controls
        (a Job left without it keeps its pods when the JobSet goes: not the JobSet's to free)."""
        uid_label = self.chain.uid_label
        jobs = {j.uid for j in self.batch_jobs if self.owns(j, jobset.link.kind, jobset.uid)}
        return [
            p
            for p in self.pods
            if p.active
            and not p.terminating
            and p.batch_job is not None
            and p.batch_job.uid in jobs
            and p.labels.get(uid_label) == jobset.uid
        ]
