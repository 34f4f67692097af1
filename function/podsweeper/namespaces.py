"""Reading namespace policies: a Namespace's annotations, re-read with a bound, resolved once.

The shell around podsweeper.policy (pure): a per-instance cache of each namespace's resolved
policy, used for at most PODSWEEPER_NAMESPACE_CACHE_SECONDS and holding at most MAX_ENTRIES
namespaces (the oldest read goes first). Re-read, not watched: the function is served by
Knative and may scale to zero, a watch would hold a connection for a change that comes
rarely, and a bounded re-read makes the worst case plain: a new annotation is in force
everywhere within the bound. Only a pass or a sweep asks, and both go to the API anyway: an
event answered without an API request still costs none.

A problem in a Namespace's annotations is answered by a Warning Event on the Namespace, once
per instance for each (namespace, problems) seen: a re-read that finds the same problems
writes nothing again.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from podsweeper.cluster.base import Cluster
from podsweeper.config import Settings
from podsweeper.errors import ApiUnavailable
from podsweeper.model import EventRecord, Namespace
from podsweeper.policy import Knob, Mode, NamespacePolicy, effective, global_policy, resolve
from podsweeper.report import truncate
from podsweeper.triage import in_scope

log = logging.getLogger("podsweeper.namespaces")

MAX_ENTRIES = 4096  # namespaces cached at once
POLICY_WARNING_REASON = "PodsweeperPolicyIgnored"


@dataclass(frozen=True)
class Resolved:
    """A namespace's policy and the settings its passes decide with."""

    policy: NamespacePolicy
    settings: Settings


@dataclass(frozen=True)
class Closed:
    """Why podsweeper does nothing in a namespace: outside its scope, or `off` there."""

    note: str


def off_note(namespace: str) -> str:
    return f"podsweeper is off in namespace {namespace} ({Knob.MODE.annotation}: {Mode.OFF.value})"


@dataclass(frozen=True)
class _Entry:
    resolved: Resolved
    read_at: float
    uid: str
    annotations: dict[str, str]  # as read: a re-read finding the same reuses `resolved`
    warned: bool  # its problems were written on the Namespace (or it has none)


def policy_warning(namespace: Namespace, policy: NamespacePolicy, now: datetime) -> EventRecord:
    """The Warning on a Namespace whose annotations podsweeper does not use (all of them, or
    some): named after the problems, so the same problems again bump one Event's count."""
    digest = hashlib.sha256("|".join((namespace.uid, *policy.problems)).encode()).hexdigest()[:16]
    message = truncate("podsweeper ignores: " + "; ".join(policy.problems))
    return EventRecord(
        name=f"{namespace.name}.{digest}",
        involved=namespace,
        type="Warning",
        reason=POLICY_WARNING_REASON,
        message=message,
        time=now,
    )


class NamespacePolicies:
    """Each namespace's policy, read through the cluster at most once per bound."""

    def __init__(
        self,
        settings: Settings,
        cache_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.settings = settings
        self._ttl = settings.namespace_cache_seconds if cache_seconds is None else cache_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._global: dict[str, Resolved] = {}

    def for_namespace(self, cluster: Cluster, namespace: str, now: datetime) -> Resolved:
        """The namespace's policy: cached, or read now (ApiUnavailable when the read fails:
        a namespace that asked for `off` must not be acted in on a guess)."""
        if not self.settings.namespace_policy:
            return self._global_for(namespace)
        at = self._clock()
        with self._lock:
            entry = self._entries.get(namespace)
        if entry is not None and at - entry.read_at < self._ttl:
            return entry.resolved
        found = cluster.get_namespace(namespace)
        annotations = found.annotations if found is not None else {}
        uid = found.uid if found is not None else ""
        if entry is not None and (entry.uid, entry.annotations) == (uid, annotations):
            resolved = entry.resolved  # read again, unchanged: resolved already
        else:
            policy = resolve(self.settings, namespace, annotations)
            resolved = Resolved(policy, effective(self.settings, policy))
        policy = resolved.policy
        warned = found is None or not policy.problems
        if entry is not None and (entry.uid, entry.resolved.policy.problems) == (uid, policy.problems):
            warned = warned or entry.warned
        if not warned and found is not None:
            try:
                cluster.record_event(policy_warning(found, policy, now))
                warned = True
            except ApiUnavailable as error:  # the next read tries again; the pass goes on
                log.warning("could not warn on namespace %s: %s", namespace, error)
        with self._lock:
            self._entries[namespace] = _Entry(resolved, at, uid, annotations, warned)
            self._entries.move_to_end(namespace)
            while len(self._entries) > MAX_ENTRIES:
                self._entries.popitem(last=False)
        return resolved

    def admit(self, cluster: Cluster, namespace: str, now: datetime) -> Resolved | Closed:
        """The one gate every pass, sweep nomination and evidence write goes through: the
        namespace is in scope (PODSWEEPER_NAMESPACES, excluded ones) and podsweeper is not
        `off` there. The scope is checked first: it costs no API request."""
        outside = in_scope(namespace, self.settings)
        if outside is not None:
            return Closed(outside.reason)
        resolved = self.for_namespace(cluster, namespace, now)
        if resolved.policy.mode is Mode.OFF:
            return Closed(off_note(namespace))
        return resolved

    def _global_for(self, namespace: str) -> Resolved:
        resolved = self._global.get(namespace)
        if resolved is None:
            resolved = Resolved(global_policy(self.settings, namespace), self.settings)
            if len(self._global) < MAX_ENTRIES:
                self._global[namespace] = resolved
        return resolved
