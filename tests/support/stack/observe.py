"""Looking at the real API server from the tests: which pods are gone, and when; the Events.

Pods are tracked by uid, so a pod re-created under the same name is a different pod.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from kubernetes import client

POLL_SECONDS = 0.02


@dataclass
class Removal:
    """When each tracked pod was seen terminating (delete requested) and gone, in seconds
    after `since` (a time.monotonic() value)."""

    since: float
    names: dict[str, str]  # uid -> name
    terminating: dict[str, float] = field(default_factory=dict)
    gone: dict[str, float] = field(default_factory=dict)
    polls: int = 0

    @property
    def all_gone(self) -> bool:
        return set(self.gone) == set(self.names)

    @property
    def last_gone(self) -> float | None:
        return max(self.gone.values()) if self.all_gone and self.gone else None

    @property
    def first_terminating(self) -> float | None:
        seen = [self.terminating.get(uid, self.gone.get(uid)) for uid in self.names]
        return min(s for s in seen if s is not None) if any(s is not None for s in seen) else None

    def remaining(self) -> list[str]:
        return sorted(self.names[uid] for uid in self.names if uid not in self.gone)


def _pods(core: client.CoreV1Api, namespace: str) -> dict[str, dict]:
    body = json.loads(core.list_namespaced_pod(namespace, _preload_content=False).data)
    return {p["metadata"]["uid"]: p for p in body.get("items") or []}


def wait_gone(
    core: client.CoreV1Api, namespace: str, pods: dict[str, str], since: float, timeout: float = 30.0
) -> Removal:
    """Poll every ~20 ms until every pod (uid -> name) is gone, or `timeout` after `since`."""
    removal = Removal(since, dict(pods))
    deadline = since + timeout
    while True:
        polled = time.monotonic()
        current = _pods(core, namespace)
        stamp = time.monotonic() - since
        removal.polls += 1
        for uid in removal.names:
            if uid in removal.gone:
                continue
            pod = current.get(uid)
            if pod is None:
                removal.gone[uid] = stamp
                removal.terminating.setdefault(uid, stamp)
            elif pod["metadata"].get("deletionTimestamp"):
                removal.terminating.setdefault(uid, stamp)
        if removal.all_gone or time.monotonic() > deadline:
            return removal
        time.sleep(max(0.0, polled + POLL_SECONDS - time.monotonic()))


def present(core: client.CoreV1Api, namespace: str, uid: str) -> bool:
    """The pod with this uid exists and is not being deleted."""
    pod = _pods(core, namespace).get(uid)
    return pod is not None and not pod["metadata"].get("deletionTimestamp")


def events(
    core: client.CoreV1Api, namespace: str, *, reason: str | None = None, involved_name: str | None = None
) -> list[dict]:
    selectors = []
    if reason:
        selectors.append(f"reason={reason}")
    if involved_name:
        selectors.append(f"involvedObject.name={involved_name}")
    body = json.loads(
        core.list_namespaced_event(
            namespace, field_selector=",".join(selectors) or None, _preload_content=False
        ).data
    )
    return body.get("items") or []


def wait_events(
    core: client.CoreV1Api,
    namespace: str,
    *,
    reason: str,
    involved_name: str,
    involved_uid: str | None = None,
    timeout: float = 10.0,
) -> list[dict]:
    """Events with this reason about this object, once at least one exists (or [] at timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        found = [
            e
            for e in events(core, namespace, reason=reason, involved_name=involved_name)
            if involved_uid is None or e["involvedObject"].get("uid") == involved_uid
        ]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def evidence(kubeconfig, namespace: str, job: str) -> list[dict]:
    """`podsweeper evidence NS/JOB --json` as a person runs it: the job's kept runs."""
    return [json.loads(line) for line in evidence_text(kubeconfig, namespace, job, "--json").splitlines()]


def evidence_text(kubeconfig, namespace: str, job: str, *args: str) -> str:
    """What `podsweeper evidence NS/JOB` prints, run as a person runs it (its own process, with
    `kubeconfig`)."""
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "podsweeper", "evidence", f"{namespace}/{job}", *args],
        env={"KUBECONFIG": str(kubeconfig), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout
