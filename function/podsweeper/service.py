"""The live function's state: settings, the cluster client, the pipeline.

Built once per process (`Service.from_environment()`; bad configuration fails the start)
and handed to the HTTP edge. The Kubernetes client is created on first use, so the server
starts, and answers irrelevant or malformed events, without ever reaching the API.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from podsweeper import metrics
from podsweeper.cluster.base import Cluster
from podsweeper.config import Settings, load_settings
from podsweeper.errors import ApiUnavailable, BadEvent
from podsweeper.intake import parse_event
from podsweeper.notify import Notifier, overrides
from podsweeper.pipeline import Outcome, Pipeline
from podsweeper.report import setup_logging
from podsweeper.triggers import ACCEPTED_TYPES


class Service:
    def __init__(
        self,
        settings: Settings,
        cluster: Cluster | None = None,
        kubeconfig: str | None = None,
        notifier: Notifier | None = None,
    ):
        self.settings = settings
        self._cluster = cluster
        self._kubeconfig = kubeconfig
        self._lock = threading.Lock()
        self.notifier = notifier
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

    def handle(self, attributes: Mapping[str, Any], data: bytes | None) -> Outcome:
        """Handle one CloudEvent (its attributes and its data as sent) within the time bound."""
        started = time.monotonic()
        # Only the accepted types label the metric: any other string an event may carry
        # would add a time series for good (unbounded memory, a Prometheus cardinality bomb).
        event_type = attributes.get("type")
        label = event_type if isinstance(event_type, str) and event_type in ACCEPTED_TYPES else "other"
        outcome_label = "error"
        try:
            intake = parse_event(attributes, data)
            outcome = self.pipeline.handle(
                intake, datetime.now(UTC), started + self.settings.event_timeout_seconds
            )
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
