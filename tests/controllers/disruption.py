"""The disruption tests' scenario and judge (tests/controllers/test_disruption*.py).

One scenario: a running bystander job (named by nothing) and a job whose master runs until
`finish()`, its workers running forever: once the job is finished the rules name exactly its
workers (never the master that finished it, nor the bystander's pods), and its operator never
makes them again. One judge, from the API server's side (tests/support/audit.py): nothing
removed that the rules did not name, everything named gone within a bound.
"""

from __future__ import annotations

import json
from datetime import datetime

from tests.support import audit, figures
from tests.support.stack import Stack, observe
from tests.support.stack.users import FOREVER, User, pytorchjob, replica


def uids(pods: dict[str, dict]) -> dict[str, str]:
    """uid -> name of each pod (name -> pod)."""
    return {p["metadata"]["uid"]: name for name, p in pods.items()}


def job_and_bystander(
    user: User, name: str, workers: int, *, bystander: str = "keep", timeout: float = 240
) -> tuple[dict, dict, dict]:
    """A running bystander job (1 master, 3 workers) and a job with `workers` workers whose
    master runs until `finish(...)`: (bystander pods, master pod, worker pods), all Running."""
    user.submit(pytorchjob(bystander, {"Master": replica(1, FOREVER), "Worker": replica(3, FOREVER)}))
    user.submit(pytorchjob(name, {"Master": replica(1, FOREVER), "Worker": replica(workers, FOREVER)}))
    kept = user.wait_running(bystander, 4, timeout=120)
    # All of them, the master too (CI saw every worker made before it): Running, so the
    # master's end (finish) is what ends the job, and the pass deletes running workers.
    pods = user.wait_running(name, workers + 1, timeout=timeout)
    master = {f"{name}-master-0": pods.pop(f"{name}-master-0")}
    return kept, master, pods


def finish(user: User, name: str) -> None:
    """End the job's master (exit 0): the operator marks the job Succeeded (kwok's pod-succeed
    stage reads run-for from the pod's annotation)."""
    user.core.patch_namespaced_pod(
        f"{name}-master-0",
        user.namespace,
        {"metadata": {"annotations": {"sim.podsweeper.dev/run-for": "1ms"}}},
    )


def wait_deletes(user: User, selector: str, count: int, timeout: float = 60.0) -> int:
    """Block until `count` pods matching `selector` are being deleted (or gone); returns how many."""
    from kubernetes.watch.watch import iter_resp_lines

    listed = json.loads(
        user.core.list_namespaced_pod(user.namespace, label_selector=selector, _preload_content=False).data
    )
    seen = {p["metadata"]["uid"] for p in listed["items"] if p["metadata"].get("deletionTimestamp")}
    response = user.core.list_namespaced_pod(
        user.namespace,
        label_selector=selector,
        watch=True,
        resource_version=listed["metadata"]["resourceVersion"],
        timeout_seconds=int(timeout),
        _preload_content=False,
    )
    try:
        for line in iter_resp_lines(response):
            change = json.loads(line)
            meta = (change.get("object") or {}).get("metadata") or {}
            if change.get("type") == "DELETED" or meta.get("deletionTimestamp"):
                seen.add(meta.get("uid"))
            if len(seen) >= count:
                return len(seen)
    finally:
        response.close()
    raise AssertionError(f"only {len(seen)} of {count} pods deleted after {timeout:.0f}s")


def judged(stack: Stack, named: dict[str, str], kept: dict[str, str], since: float, timeout: float) -> float:
    """The two judgements in the stack's namespace; returns the seconds from `since` to the last
    named pod gone (the caller asserts its bound: docs/guarantees.md quotes each figure by its
    literal name)."""
    core = User(stack).core
    removal = observe.wait_gone(core, stack.namespace, named, since, timeout=timeout)
    wrong = audit.wrong_deletes(stack.cp.audit_log, stack.namespace, named)
    assert not wrong, "deleted what the rules did not name:\n" + "\n".join(wrong)
    # A pod the function's own DELETE removed (answered 200, so the API set its deletion) that is
    # still Terminating waits for the kubelet, here kwok: kwok retries a delete that failed while
    # the control plane was down with a doubling backoff (1 s, 2 s, 4 s... up to 32 min), and CI
    # once saw a pod wait past the bound for it. podsweeper's part ended with the accepted delete
    # and it never deletes a terminating pod again, so such a pod is counted, and said, as left to
    # the kubelet; any other pod left fails the test.
    accepted = (set(removal.terminating) - set(removal.gone)) & _accepted_deletes(stack, set(named))
    left = sorted(
        removal.names[uid] for uid in removal.names if uid not in removal.gone and uid not in accepted
    )
    assert not left, f"named pods left: {left}\n{stack.function.tail()}"
    if accepted:
        print(
            f"left to kwok, terminating after the function's accepted delete: {sorted(removal.names[u] for u in accepted)}"
        )
    for uid, name in kept.items():
        assert observe.present(core, stack.namespace, uid), f"{name} (uid {uid}) must be kept"
    figures.add("disruption: function deletes judged from the audit log", len(deletes(stack)))
    figures.add("disruption: named pods left terminating by kwok after an accepted delete", len(accepted))
    return max([removal.gone[uid] for uid in removal.gone] + [removal.terminating[uid] for uid in accepted])


def _accepted_deletes(stack: Stack, uids: set[str]) -> set[str]:
    """The uids among `uids` a DELETE of the function's removed (200), as audited."""
    return {
        call.uid_precondition for call in deletes(stack) if call.code == 200 and call.uid_precondition in uids
    }


def deletes(stack: Stack, namespace: str | None = None) -> list[audit.Call]:
    """The function's DELETEs in the namespace (default: the stack's first), as audited."""
    found = audit.writes(stack.cp.audit_log, namespace=namespace or stack.namespace)
    return [w for w in found if w.verb == "delete"]


def since(calls: list[audit.Call], moment: float) -> list[audit.Call]:
    """The calls the API server finished after `moment` (time.time())."""
    return [c for c in calls if datetime.fromisoformat(c.at.replace("Z", "+00:00")).timestamp() > moment]
