"""What the soak's users do: a job every few seconds (PyTorchJob, TFJob, MPIJob, XGBoostJob;
every cleanPodPolicy; a third with crash-looping workers; some whose lead fails), some deleted
mid-run (orphaning their pods, or with them), some re-created under the same name, finished
jobs deleted a minute later; and what the platform does to the function: one instance killed
at intervals and started again. Drawn from a seed, so a run can be repeated.

`Churn.run()` runs in the main thread (a restarted instance dies with the thread that
started it) and returns its figures.
"""

from __future__ import annotations

import heapq
import random
import sys
import time
from dataclasses import dataclass

from tests.support.stack.users import FOREVER, KINDS, replica, training_job

CRASHING = {"exit-code": "1", "run-for": "1s", "back-off": "1s"}
LEAD = {"PyTorchJob": "Master", "TFJob": "Chief", "MPIJob": "Launcher", "XGBoostJob": "Master"}
POLICIES = (None, "None", "Running", "All")
KEEP_FINISHED = 60.0  # seconds a finished job stays before its user deletes it (with its pods)


@dataclass(frozen=True)
class Plan:
    kind: str
    name: str
    workers: int
    crashing: bool
    policy: str | None  # cleanPodPolicy; None: the operator's default
    lead_fails: bool
    lead_runs: int  # seconds
    fate: str  # "finish" (left to end), "orphan" (deleted, pods orphaned), "delete" (deleted with its pods)
    fate_after: float  # seconds after creation
    recreate: bool  # created again under the same name after the delete

    def job(self) -> dict:
        lead = {"exit-code": "1" if self.lead_fails else "0", "run-for": f"{self.lead_runs}s"}
        replicas = {
            LEAD[self.kind]: replica(
                1, lead, policy="Never" if self.lead_fails else "OnFailure", kind=self.kind
            ),
            "Worker": replica(self.workers, CRASHING if self.crashing else FOREVER, kind=self.kind),
        }
        run_policy = {"cleanPodPolicy": self.policy} if self.policy else {}
        return training_job(self.kind, self.name, replicas, run_policy)


def draw(rng: random.Random, index: int) -> Plan:
    fate = rng.choices(("finish", "orphan", "delete"), weights=(6, 2, 2))[0]
    return Plan(
        kind=rng.choice(sorted(LEAD)),
        name=f"j{index}",
        workers=rng.randint(1, 3),
        crashing=rng.random() < 1 / 3,
        policy=rng.choice(POLICIES),
        lead_fails=rng.random() < 0.15,
        lead_runs=rng.randint(3, 20),
        fate=fate,
        fate_after=rng.uniform(2, 20),
        recreate=fate != "finish" and rng.random() < 0.5,
    )


class Churn:
    """Drives the users and the kills on one stack (stack.functions behind stack.spread)."""

    def __init__(
        self, stack, timeline, *, seed: int, seconds: float, every: float, kill_every: float, log=sys.stderr
    ):
        from kubernetes import client

        self.stack = stack
        self.timeline = timeline
        self.custom = client.CustomObjectsApi(stack.admin_api)
        self.rng = random.Random(seed)
        self.seconds = seconds
        self.every = every
        self.kill_every = kill_every
        self.log = log
        self.created: dict[str, int] = {}  # kind -> jobs created
        self.fates: dict[str, int] = {}
        self.kills: list[tuple[int, float]] = []  # (instance, seconds to healthy again)
        self.rss: list[tuple[float, int, int, int]] = []  # (time, instance, generation, bytes)
        self.generation = [0] * len(stack.functions)
        self._queue: list[tuple[float, int, str, Plan, str]] = []
        self._seq = 0
        self._cleanup_planned: set[str] = set()

    def _at(self, when: float, what: str, plan: Plan, uid: str = "") -> None:
        self._seq += 1
        heapq.heappush(self._queue, (when, self._seq, what, plan, uid))

    def run(self) -> None:
        start = time.monotonic()
        end = start + self.seconds
        next_job, next_kill, next_sample, index = (
            start,
            start + self.kill_every * self.rng.uniform(0.4, 0.9),
            start,
            0,
        )
        next_report = start + max(30.0, self.seconds / 12)
        while time.monotonic() < end:
            now = time.monotonic()
            if now >= next_job:
                plan = draw(self.rng, index)
                index += 1
                self._create(plan, now)
                next_job = now + self.every
            while self._queue and self._queue[0][0] <= now:
                _, _, what, plan, uid = heapq.heappop(self._queue)
                self._act(what, plan, uid, now)
            self._plan_cleanups(now)
            if now >= next_kill:
                self._kill()
                next_kill = time.monotonic() + self.kill_every
            if now >= next_sample:
                self._sample()
                next_sample = now + 10.0
            if now >= next_report:
                self._progress(now - start)
                next_report = now + max(30.0, self.seconds / 12)
            time.sleep(0.1)
        self._sample()
        self.stack.check_alive()

    # -- users ----------------------------------------------------------------------------

    def _create(self, plan: Plan, now: float, attempt: int = 0, again: bool = False) -> None:
        """Create the plan's job; its fate comes later, to the first one only (`again`: the
        re-creation under the same name, left to finish)."""
        from kubernetes.client.rest import ApiException

        plural = KINDS[plan.kind][0]
        try:
            made = self.custom.create_namespaced_custom_object(
                "kubeflow.org", "v1", self.stack.namespace, plural, plan.job()
            )
        except ApiException as error:
            if error.status == 409 and attempt < 15:  # the old one still going (orphan finalizer)
                self._at(now + 1.0, f"again-{attempt + 1}", plan)
                return
            raise
        self.created[plan.kind] = self.created.get(plan.kind, 0) + 1
        if attempt == 0 and plan.fate != "finish" and not again:
            self._at(now + plan.fate_after, plan.fate, plan, made["metadata"]["uid"])

    def _act(self, what: str, plan: Plan, uid: str, now: float) -> None:
        if what.startswith("again-"):
            self._create(plan, now, int(what.split("-")[1]), again=True)
            return
        self.fates[what] = self.fates.get(what, 0) + 1
        self._delete(plan.kind, plan.name, uid, "Orphan" if what == "orphan" else "Background")
        if what in ("orphan", "delete") and plan.recreate:
            self._at(now + self.rng.uniform(0.5, 5.0), "again-0", plan)

    def _delete(self, kind: str, name: str, uid: str, propagation: str) -> None:
        from kubernetes.client.rest import ApiException

        self.timeline.deleted(uid, time.time())
        try:
            self.custom.delete_namespaced_custom_object(
                "kubeflow.org",
                "v1",
                self.stack.namespace,
                KINDS[kind][0],
                name,
                body={"propagationPolicy": propagation, "preconditions": {"uid": uid}},
            )
        except ApiException as error:
            if error.status not in (404, 409):
                raise

    def _plan_cleanups(self, now: float) -> None:
        """A finished job's user deletes it (and its pods) KEEP_FINISHED after its finish."""
        wall = time.time()
        for job in list(self.timeline.jobs.values()):
            if job.finished_at is None or job.deleted_at is not None or job.uid in self._cleanup_planned:
                continue
            if wall - job.finished_at >= KEEP_FINISHED:
                self._cleanup_planned.add(job.uid)
                self.fates["cleaned up by its user"] = self.fates.get("cleaned up by its user", 0) + 1
                self._delete(job.kind, job.name, job.uid, "Background")

    # -- the platform ---------------------------------------------------------------------

    def _kill(self) -> None:
        index = self.rng.randrange(len(self.stack.functions))
        function = self.stack.functions[index]
        function.kill()
        took = function.restart()
        self.generation[index] += 1
        self.kills.append((index, took))
        print(f"soak: killed instance {index}; healthy again in {took:.2f}s", file=self.log, flush=True)

    def _progress(self, elapsed: float) -> None:
        answers = self.stack.spread.by_status() if self.stack.spread is not None else {}
        print(
            f"soak: {elapsed:.0f}/{self.seconds:.0f}s: {sum(self.created.values())} jobs, {len(self.timeline.pods)} pods "
            f"seen, {len(self.kills)} kills, answers {dict(sorted(answers.items()))}",
            file=self.log,
            flush=True,
        )

    def _sample(self) -> None:
        for index, function in enumerate(self.stack.functions):
            self.rss.append((time.monotonic(), index, self.generation[index], function.rss()))
