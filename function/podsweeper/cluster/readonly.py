"""A cluster that is only looked at: a person's `podsweeper sweep` without --live.

Everything is read as the deployed function reads it; nothing is written. The held-back acts
(deletes, suspends) never reach the cluster anyway (the pipeline holds them); what the function
would also write (Warning Events, evidence stores, finish records, the records' signing key) is
not written either, so a look at a cluster with a person's credentials changes nothing in it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from podsweeper.cluster.base import Cluster
from podsweeper.decisions import Result
from podsweeper.kinds import IntermediateKind
from podsweeper.model import EventRecord, FinishMark, JobRef


class ReadOnly:
    """Reads go to `inner`; writes are dropped (and say they were not made), acts refused."""

    def __init__(self, inner: Cluster, writes_skipped: Callable[[str], None] | None = None):
        self._inner = inner
        self._skipped = writes_skipped or (lambda what: None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def bounded(self, deadline: float) -> Cluster:
        view: Cluster = ReadOnly(self._inner.bounded(deadline), self._skipped)
        return view

    def write_finish_mark(self, job: JobRef, mark: FinishMark) -> None:
        self._skipped("finish record")

    def write_evidence(self, job: JobRef, records: list[dict[str, Any]], version: str | None) -> bool:
        self._skipped("evidence store")
        return True  # as if kept: nothing is asked again in this run

    def retain_evidence(self, job: JobRef, records: list[dict[str, Any]], at: datetime) -> bool:
        self._skipped("retained evidence")
        return True

    def record_event(self, event: EventRecord) -> bool:
        self._skipped("Event")
        return True  # what a live run would have written (the summary says it was not)

    def container_log(
        self, namespace: str, pod: str, container: str, previous: bool, lines: int, limit_bytes: int
    ) -> str | None:
        return None  # read only to be kept: nothing is kept

    def delete_pod(
        self, namespace: str, name: str, uid: str, resource_version: str = "", force: bool = False
    ) -> Result:
        raise AssertionError("a read-only look at a cluster deletes nothing")

    def delete_intermediate(self, link: IntermediateKind, namespace: str, name: str, uid: str) -> Result:
        raise AssertionError("a read-only look at a cluster deletes nothing")

    def delete_job(self, ref: JobRef, uid: str, resource_version: str = "") -> Result:
        raise AssertionError("a read-only look at a cluster deletes nothing")

    def suspend_job(self, ref: JobRef) -> Result:
        raise AssertionError("a read-only look at a cluster suspends nothing")
