"""The real cluster: the kubernetes client's configuration, podsweeper's own requests.

Every call is bounded by the event's deadline, reads raw JSON through one connection pool
(`transport`) and goes through the same typed edge as event payloads. Failures become ApiUnavailable
(-> 503, the source retries); 404 and 409 on delete mean "already handled".

KubeCluster is the Cluster protocol assembled from one module per job: `calls` (one request:
deadline, rate limit, Retry-After, pages), `reads` (the cluster's objects), `writes` (deletes,
suspends, Events under preconditions) `records` (podsweeper's own ConfigMaps) and `retained` (evidence copies of jobs it deleted).
"""

from __future__ import annotations

from kubernetes import client

from podsweeper.cluster.kube.calls import Keyring
from podsweeper.cluster.kube.reads import Reads
from podsweeper.cluster.kube.records import Records
from podsweeper.cluster.kube.retained import Retaining
from podsweeper.cluster.kube.transport import Api, load_configuration
from podsweeper.cluster.kube.writes import Writes
from podsweeper.cluster.ratelimit import RateLimiter
from podsweeper.config import Settings


class KubeCluster(Reads, Writes, Records, Retaining):
    """The Cluster protocol on a real API server (`bounded` gives a view with a deadline)."""


def load_api(kubeconfig: str | None = None, connections: int = 16) -> Api:
    """The hot path's connection pool to the API server the configuration names.

    `connections`: the pool size, at least as many as requests in flight at once (concurrent
    deletes), so none is opened and thrown away per request.
    """
    return Api(load_configuration(kubeconfig), connections)


def load_api_client(kubeconfig: str | None = None, connections: int | None = None) -> client.ApiClient:
    """The kubernetes client itself, for what is not the hot path (the recorder's watches, the
    benchmark's reference client); `connections`: its pool size, if not the client's default."""
    configuration = load_configuration(kubeconfig)
    if connections is not None:
        configuration.connection_pool_maxsize = connections
    return client.ApiClient(configuration)


def connect(settings: Settings, kubeconfig: str | None = None, make_record_key: bool = True) -> KubeCluster:
    """The real cluster as the settings say: pool sized for the concurrent deletes, one rate
    limiter for every request this instance makes. `make_record_key` False: the finish records'
    signing key is only read, never made (a read-only look)."""
    api = load_api(kubeconfig, connections=settings.delete_concurrency + 4)
    limiter = RateLimiter(settings.kube_api_qps, settings.kube_api_burst)
    keyring = Keyring(settings.record_key_secret, make=make_record_key)
    return KubeCluster(api, limiter=limiter, keyring=keyring)
