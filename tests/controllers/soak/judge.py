"""The soak's two judgements, restated from docs/rules.md for the v1 pod rules the soak's
jobs reach (orphan, finished-job-active-pod, clean-pod-policy-all; crash-loop is `warn`):

- `wrong_deletes`: each of the function's pod DELETEs, as the API server's audit log has it,
  against the pod's version its resourceVersion precondition names and its job's state at
  the delete's time. The rules name the pod when its job (the pod's controller in that
  version, or its first controller once the garbage collector has orphaned it) was deleted
  and the pod is at least the orphan grace old; or its job had finished (condition time)
  and the pod was Pending/Running, or terminated under cleanPodPolicy All, and under
  Running/All the operator grace since the finish had passed. Anything else is wrong, and so
  is a delete without both preconditions, and a uid removed twice.
- `still_named`: the pods present now that the rules name (what a last sweep must remove).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass

from tests.controllers.soak.timeline import ACTIVE, JobLife, Timeline, epoch
from tests.support.audit import Call

SLACK = 0.25  # seconds: the function's clock and the API server's are this machine's


@dataclass(frozen=True)
class Graces:
    orphan: float
    operator: float


def named_because(job: JobLife | None, phase: str, created: float, at: float, graces: Graces) -> str | None:
    """The rule that names a pod (of `job`, in `phase`, made at `created`) at time `at`."""
    if job is None:
        return None
    if job.deleted_at is not None and at >= job.deleted_at and at - created >= graces.orphan - SLACK:
        return "orphan"
    if job.finished_at is None or at < job.finished_at:
        return None
    waited = job.policy == "None" or at - job.finished_at >= graces.operator - SLACK
    if phase in ACTIVE and waited:
        return "finished-job-active-pod"
    if job.policy == "All" and phase not in ACTIVE and waited:
        return "clean-pod-policy-all"
    return None


def wrong_deletes(writes: list[Call], timeline: Timeline, graces: Graces) -> tuple[list[str], Counter]:
    """(one line per wrong delete, the rules that named the deletes that removed a pod)."""
    wrong: list[str] = []
    by_rule: Counter = Counter()
    removed: set[str] = set()
    for write in writes:
        if write.verb not in ("delete", "deletecollection"):
            continue
        what = f"{write.verb} {write.resource} {write.name} -> {write.code} at {write.at}"
        preconditions = (write.body or {}).get("preconditions") or {}
        if write.resource != "pods":
            wrong.append(f"{what}: the soak's jobs name no {write.resource}")
            continue
        if not preconditions.get("uid") or not preconditions.get("resourceVersion"):
            wrong.append(f"{what}: preconditions {preconditions}")
            continue
        if write.code != 200:
            continue
        uid = preconditions["uid"]
        if uid in removed:
            wrong.append(f"{what}: uid {uid} removed twice")
            continue
        removed.add(uid)
        found = timeline.pod_version(uid, preconditions["resourceVersion"])
        if found is None:
            seen = timeline.pods.get(uid)
            wrong.append(
                f"{what}: version {preconditions['resourceVersion']} of {uid} never seen "
                f"(seen: {sorted(seen.versions) if seen else 'no version'})"
            )
            continue
        life, (phase, owner, terminating) = found
        job = timeline.job(owner or life.first_owner)
        at = epoch(write.at) or 0.0
        rule = None if terminating else named_because(job, phase, life.created, at, graces)
        if rule is None:
            state = (
                f"unknown job {owner or life.first_owner}"
                if job is None
                else f"{job.kind} {job.uid} policy {job.policy} finished {job.finished_at} "
                f"deleted {job.deleted_at} conditions {job.conditions}"
            )
            same = [
                (j.uid[:8], j.finished_at, j.deleted_at)
                for j in timeline.jobs.values()
                if j.name == life.job_name
            ]
            wrong.append(
                f"{what}: {phase} pod of {state}, made {life.created}: named by no rule "
                f"(jobs named {life.job_name}: {same})"
            )
        else:
            by_rule[rule] += 1
    return wrong, by_rule


def still_named(core, namespace: str, timeline: Timeline, graces: Graces, now: float) -> dict[str, str]:
    """uid -> "name (rule)" of the pods present, not terminating, that the rules name now.
    A pod without a controller whose label names an existing job is left out: the operator
    adopts such a pod, and the rules then judge it as that job's."""
    body = json.loads(core.list_namespaced_pod(namespace, _preload_content=False).data)
    present = {(j.name) for j in timeline.jobs.values() if j.deleted_at is None}
    found = {}
    for pod in body.get("items") or []:
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        life = timeline.pods.get(meta["uid"])
        if life is None:
            continue
        owner = next((r["uid"] for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
        if owner is None and life.job_name in present:
            continue
        job = timeline.job(owner or life.first_owner)
        rule = named_because(job, (pod.get("status") or {}).get("phase") or "", life.created, now, graces)
        if rule is not None:
            found[meta["uid"]] = f"{meta['name']} ({rule})"
    return found
