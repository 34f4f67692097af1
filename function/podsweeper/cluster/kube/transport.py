"""The hot path's HTTP: one keep-alive connection pool to the API server, bytes in and out.

The kubernetes client still loads the configuration (kubeconfig or in-cluster, its TLS
material, its proxy, its token refresh), but a pass's calls do not go through its generated
methods: those serialize model objects, copy their per-call settings and re-read the proxy
environment on every request, which cost the function more CPU per DELETE than the API server
spends on it. A request here is a method, a path, a query and a JSON body, on a pool of at
least as many connections as requests in flight (no handshake per request).
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import urllib3
from kubernetes import client, config
from kubernetes.client.rest import RESTClientObject

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
# How often the client's token refresh hook is asked again. It renews an expiring credential
# (the in-cluster ServiceAccount token file it re-reads every minute, an exec plugin's or OIDC
# token by its expiry), but a kubeconfig's hook also re-applies the whole configuration, whose
# proxy lookup scans the environment: per request, that was a sixth of a DELETE's CPU.
TOKEN_RECHECK_SECONDS = 10.0


@dataclass(frozen=True)
class Answer:
    """The API server's answer: status, the headers the client reads, the raw body."""

    status: int
    body: bytes
    retry_after: str | None = None
    reason: str = ""


def load_configuration(kubeconfig: str | None = None) -> client.Configuration:
    """In-cluster config inside a pod, else KUBECONFIG / ~/.kube/config. Never calls the API."""
    configuration = client.Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)
    else:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    configuration.retries = 0  # one try per call: the event source does the retrying
    return configuration


class Api:
    """Requests to one API server through one connection pool (thread-safe)."""

    def __init__(self, configuration: client.Configuration, connections: int = 16):
        configuration.connection_pool_maxsize = max(connections, 4)
        self.configuration = configuration
        self.host = configuration.host.rstrip("/")
        # The kubernetes client's own pool manager: its TLS (CA, client certificate, server
        # name, verification) and its proxy choice, exactly as the generated client would use.
        self._manager = RESTClientObject(configuration).pool_manager
        self._pool = self._manager.connection_from_url(self.host)
        # A forwarding (non-tunnelled) proxy needs the absolute URL in the request line.
        forwarding = getattr(self._pool, "proxy", None) is not None and urlsplit(self.host).scheme == "http"
        self._prefix = self.host if forwarding else urlsplit(self.host).path.rstrip("/")
        self._token_lock = threading.Lock()
        self._token: str | None = None
        self._token_checked = float("-inf")

    def _authorization(self) -> str | None:
        """The Authorization header's value, from the client's (refreshed) configuration."""
        now = time.monotonic()
        if now - self._token_checked >= TOKEN_RECHECK_SECONDS:
            with self._token_lock:
                if now - self._token_checked >= TOKEN_RECHECK_SECONDS:
                    self._token = self.configuration.get_api_key_with_prefix(
                        "BearerToken", alias="authorization"
                    )
                    self._token_checked = now
        return self._token

    def request(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: float | None = None,
        accept: str = JSON,
    ) -> Answer:
        """One request; urllib3's errors (connection, timeout) are the caller's to handle."""
        headers = {"Accept": accept, "User-Agent": "podsweeper"}
        token = self._authorization()
        if token:
            headers["Authorization"] = token
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = content_type
        target = self._prefix + path
        if query:
            target += "?" + urlencode({k: v for k, v in query.items() if v is not None and v != ""})
        response = self._pool.urlopen(
            method,
            target,
            body=data,
            headers=headers,
            retries=False,
            redirect=False,
            timeout=urllib3.Timeout(total=timeout) if timeout is not None else None,
            preload_content=True,
            assert_same_host=False,
        )
        retry_after = response.headers.get("Retry-After")
        return Answer(response.status, response.data or b"", retry_after, response.reason or "")

    def close(self) -> None:
        self._manager.clear()
