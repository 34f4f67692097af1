"""The live function's state: settings, the cluster client, the pipeline.

Built once per process (`Service.from_environment()`; bad configuration fails the start)
and handed to the HTTP edge. The Kubernetes client is created on first use, so the server
starts, and answers irrelevant or malformed events, without ever reaching the API.

Two gates stand before the pipeline: who sent the request (`authenticate`, podsweeper.auth,
asked by the edge before it reads the body) and, for a sweep, whether one may start now
(`SweepGate`: one at a time per instance, and a minimum interval between starts), so that
nobody, not even an allowed sender, can make an instance sweep more often than that.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from podsweeper import metrics
from podsweeper.auth import Denied, KeyReader, Verifier
from podsweeper.cluster.base import Cluster
from podsweeper.config import AuthMode, Settings, load_settings
from podsweeper.errors import ApiUnavailable, BadEvent
from podsweeper.intake import Intake, parse_event
from podsweeper.notify import Notifier, overrides
from podsweeper.pipeline import Outcome, Pipeline
from podsweeper.report import setup_logging
from podsweeper.triggers import ACCEPTED_TYPES, SweepRequest


class SweepGate:
    """At most one sweep at a time, and `min_interval` seconds from one start to the next:
    a ping inside the interval or during a sweep is answered (2xx) with a note, not run."""

    def __init__(self, min_interval: float, clock: Callable[[], float] = time.monotonic):
        self.min_interval = min_interval
        self._clock = clock
        self._running = threading.Lock()
        self._started: float | None = None

    def enter(self) -> str | None:
        """None: this caller sweeps now (call `leave` after); else why not."""
        if not self._running.acquire(blocking=False):
            return "a sweep is already running in this instance"
        now = self._clock()
        if self._started is not None and now - self._started < self.min_interval:
            self._running.release()
            return (
                f"the last sweep started {now - self._started:.0f}s ago, "
                f"under the {self.min_interval:g}s between sweeps"
            )
        self._started = now
        return None

    def leave(self) -> None:
        self._running.release()


class Service:
    def __init__(
        self,
        settings: Settings,
        cluster: Cluster | None = None,
        kubeconfig: str | None = None,
        notifier: Notifier | None = None,
        keys: KeyReader | None = None,
    ):
        self.settings = settings
        self._cluster = cluster
        self._kubeconfig = kubeconfig
        self._lock = threading.Lock()
        self.notifier = notifier
        self.sweeps = SweepGate(settings.sweep_min_interval_seconds)
        self.verifier: Verifier | None = None
        if settings.auth is AuthMode.OIDC:
            if keys is None:
                from podsweeper.cluster.issuer import issuer_keys

                keys = issuer_keys(kubeconfig)
            self.verifier = Verifier(
                settings.auth_audience,
                settings.auth_subject_set,
                keys,
                issuer=settings.auth_issuer,
                refresh_seconds=settings.auth_keys_refresh_seconds,
            )
        self.pipeline = Pipeline(
            cluster if cluster is not None else _LazyCluster(self), settings, notifier=notifier
        )

    @classmethod
    def from_environment(cls) -> Service:
        """The served function's Service: PODSWEEPER_* settings, decision lines on stdout, and
        decisions out as CloudEvents when K_SINK names a sink (flushed, bounded, at exit)."""
        settings = load_settings()
        setup_logging()
        sink = os.environ.get("K_SINK", "").strip()
        notifier = None
        if sink:
            notifier = Notifier(sink, settings, overrides(os.environ.get("K_CE_OVERRIDES")))
            atexit.register(notifier.close)
        return cls(settings, notifier=notifier)

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            with self._lock:
                if self._cluster is None:
                    from podsweeper.cluster.kube import connect

                    try:
                        self._cluster = connect(self.settings, self._kubeconfig)
                    except Exception as error:  # noqa: BLE001 - no kubeconfig yet: retry later
                        raise ApiUnavailable(f"no Kubernetes configuration: {error}") from None
        return self._cluster

    def authenticate(self, authorization: str | None) -> Denied | None:
        """None if the request may be handled (PODSWEEPER_AUTH=none: always), else why not
        (-> 401). Asked before anything is read; may raise ApiUnavailable (-> 503) only while
        the issuer's keys cannot be read, which happens at most once per refresh interval."""
        if self.verifier is None:
            return None
        denied = self.verifier.check(authorization)
        if denied is not None:
            metrics.auth_refusals(denied.reason.value).inc()
        return denied

    def handle(self, attributes: Mapping[str, Any], data: bytes | None) -> Outcome:
        """Handle one CloudEvent (its attributes and its data as sent) within the time bound."""
        started = time.monotonic()
        metrics.IN_FLIGHT.inc()
        # Only the accepted types label the metric: any other string an event may carry
        # would add a time series for good (unbounded memory, a Prometheus cardinality bomb).
        event_type = attributes.get("type")
        label = event_type if isinstance(event_type, str) and event_type in ACCEPTED_TYPES else "other"
        outcome_label = "error"
        try:
            intake = parse_event(attributes, data)
            deadline = started + self.settings.event_timeout_seconds
            if isinstance(intake.trigger, SweepRequest):
                outcome = self._sweep(intake, deadline)
            else:
                outcome = self.pipeline.handle(intake, datetime.now(UTC), deadline)
            outcome_label = "ignored" if outcome.ignored else "processed"
            return outcome
        except BadEvent:
            outcome_label = "bad_request"
            raise
        except ApiUnavailable:
            outcome_label = "api_unavailable"
            raise
        finally:
            metrics.event_counter(label, outcome_label).inc()
            metrics.HANDLING.observe(time.monotonic() - started)
            metrics.IN_FLIGHT.dec()  # last: once it drops, the event's log lines are written

    def _sweep(self, intake: Intake, deadline: float) -> Outcome:
        """A sweep, if the gate lets one start now; else the answer says why not (2xx: the
        source must not retry it)."""
        refused = self.sweeps.enter()
        if refused is not None:
            metrics.SWEEPS_SKIPPED.inc()
            return Outcome(intake.attributes.id, note=f"sweep not run: {refused}")
        try:
            return self.pipeline.handle(intake, datetime.now(UTC), deadline)
        finally:
            self.sweeps.leave()


class _LazyCluster:
    """Defers creating the API client until a pass really needs the cluster."""

    def __init__(self, service: Service, deadline: float | None = None):
        self._service, self._deadline = service, deadline

    def bounded(self, deadline: float) -> _LazyCluster:
        return _LazyCluster(self._service, deadline)

    def __getattr__(self, name: str) -> Any:
        cluster = self._service.cluster
        if self._deadline is not None:
            cluster = cluster.bounded(self._deadline)
        return getattr(cluster, name)
