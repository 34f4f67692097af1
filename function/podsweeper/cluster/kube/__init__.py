"""The real cluster, through the official kubernetes client.

Every call is bounded by the event's deadline, reads raw JSON (`_preload_content=False`)
and goes through the same typed edge as event payloads. Failures become ApiUnavailable
(-> 503, the source retries); 404 and 409 on delete mean "already handled".

KubeCluster is the Cluster protocol assembled from one module per job: `calls` (one request:
deadline, rate limit, Retry-After, pages), `reads` (the cluster's objects), `writes` (deletes,
suspends, Events under preconditions) and `records` (podsweeper's own ConfigMaps).
"""

from __future__ import annotations

import os

from kubernetes import client, config

from podsweeper.cluster.kube.reads import Reads
from podsweeper.cluster.kube.records import Records
from podsweeper.cluster.kube.writes import Writes
from podsweeper.cluster.ratelimit import RateLimiter
from podsweeper.config import Settings


class KubeCluster(Reads, Writes, Records):
    """The Cluster protocol on a real API server (`bounded` gives a view with a deadline)."""


def load_api_client(kubeconfig: str | None = None, connections: int = 16) -> client.ApiClient:
    """In-cluster config inside a pod, else KUBECONFIG / ~/.kube/config. Never calls the API.

    `connections`: the pool size, at least as many as requests in flight at once (concurrent
    deletes), so none is opened and thrown away per request.
    """
    configuration = client.Configuration()
    configuration.connection_pool_maxsize = max(connections, 4)
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)
    else:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    configuration.retries = 0  # one try per call: the event source does the retrying
    return client.ApiClient(configuration)


def connect(settings: Settings, kubeconfig: str | None = None) -> KubeCluster:
    """The real cluster as the settings say: pool sized for the concurrent deletes, one rate
    limiter for every request this instance makes."""
    api = load_api_client(kubeconfig, connections=settings.delete_concurrency + 4)
    return KubeCluster(api, limiter=RateLimiter(settings.kube_api_qps, settings.kube_api_burst))
