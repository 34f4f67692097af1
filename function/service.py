"""The live function's process-wide state: settings, the cluster client, the pipeline.

Settings are read at start (bad configuration fails the start); the Kubernetes client is
created on first use, so the server starts, and answers irrelevant or malformed events,
without ever reaching the API.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from function import metrics
from function.cluster.base import Cluster
from function.config import Settings, load_settings
from function.errors import ApiUnavailable, BadEvent
from function.intake import PING_TYPE, REFERENCE_PREFIX, RESOURCE_PREFIX, VERBS, parse_event
from function.pipeline import Outcome, Pipeline
from function.report import setup_logging


ACCEPTED_TYPES = frozenset({PING_TYPE} | {prefix + verb for prefix in (RESOURCE_PREFIX, REFERENCE_PREFIX)
                                           for verb in VERBS})


class Service:
    def __init__(self, settings: Settings, cluster: Cluster | None = None, kubeconfig: str | None = None):
        self.settings = settings
        self._cluster = cluster
        self._kubeconfig = kubeconfig
        self._lock = threading.Lock()
        self.pipeline = Pipeline(cluster if cluster is not None else _LazyCluster(self), settings)

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            with self._lock:
                if self._cluster is None:
                    from function.cluster.kube import KubeCluster, load_api_client

                    try:
                        self._cluster = KubeCluster(load_api_client(self._kubeconfig))
                    except Exception as error:  # no kubeconfig yet: retry later
                        raise ApiUnavailable(f"no Kubernetes configuration: {error}") from None
        return self._cluster

    def handle(self, attributes: Mapping[str, Any], data: Any) -> Outcome:
        """Handle one CloudEvent within the configured time bound."""
        started = time.monotonic()
        # Only the accepted types label the metric: any other string an event may carry
        # would add a time series for good (unbounded memory, a Prometheus cardinality bomb).
        event_type = attributes.get("type")
        label = event_type if isinstance(event_type, str) and event_type in ACCEPTED_TYPES else "other"
        outcome_label = "error"
        try:
            intake = parse_event(attributes, data)
            outcome = self.pipeline.handle(intake, datetime.now(timezone.utc),
                                      started + self.settings.event_timeout_seconds)
            outcome_label = "ignored" if outcome.note and not outcome.applied else "processed"
            return outcome
        except BadEvent:
            outcome_label = "bad_request"
            raise
        except ApiUnavailable:
            outcome_label = "api_unavailable"
            raise
        finally:
            metrics.EVENTS.labels(label, outcome_label).inc()
            metrics.HANDLING.observe(time.monotonic() - started)


class _LazyCluster:
    """Defers creating the API client until a pass really needs the cluster."""

    def __init__(self, service: Service, deadline: float | None = None):
        self._service, self._deadline = service, deadline

    def bounded(self, deadline: float) -> "_LazyCluster":
        return _LazyCluster(self._service, deadline)

    def __getattr__(self, name: str):
        cluster = self._service.cluster
        if self._deadline is not None:
            cluster = cluster.bounded(self._deadline)
        return getattr(cluster, name)


_service: Service | None = None


def get_service() -> Service:
    """The process's Service, created from the environment on first call."""
    global _service
    if _service is None:
        setup_logging()
        _service = Service(load_settings())
    return _service
