"""The API server's service-account token issuer: its OIDC discovery document and its keys.

Read with the function's own credentials (a ServiceAccount may: Kubernetes binds
system:service-account-issuer-discovery to system:serviceaccounts), two GETs on the API server
itself: /.well-known/openid-configuration for the issuer, /openid/v1/jwks for the keys (the
document's jwks_uri may name an external URL; the API server serves the same keys here).
podsweeper.auth decides when (rarely: at the first token, then on an unknown key id).
"""

from __future__ import annotations

import json
from typing import Any

import urllib3

from podsweeper.auth import IssuerKeys, KeyReader
from podsweeper.cluster.kube.transport import Api, load_configuration
from podsweeper.errors import ApiUnavailable

DISCOVERY = "/.well-known/openid-configuration"
JWKS = "/openid/v1/jwks"


def _get(api: Api, path: str, timeout: float, accept: str = "application/json") -> Any:
    try:
        answer = api.request("GET", path, timeout=timeout, accept=accept)
    except (urllib3.exceptions.HTTPError, OSError) as error:
        raise ApiUnavailable(f"reading {path}: {type(error).__name__}: {error}"[:300]) from None
    if answer.status != 200:
        raise ApiUnavailable(f"reading {path}: API answered {answer.status} {answer.reason}")
    try:
        return json.loads(answer.body)
    except ValueError:
        raise ApiUnavailable(f"reading {path}: not JSON") from None


def issuer_keys(kubeconfig: str | None = None, timeout: float = 5.0) -> KeyReader:
    """A reader of the issuer and its keys (the connection made at its first call)."""
    api: list[Api] = []

    def read() -> IssuerKeys:
        if not api:
            try:
                api.append(Api(load_configuration(kubeconfig), connections=1))
            except Exception as error:  # noqa: BLE001 - no configuration yet: 503, retried
                raise ApiUnavailable(f"no Kubernetes configuration: {error}") from None
        discovery = _get(api[0], DISCOVERY, timeout)
        issuer = discovery.get("issuer") if isinstance(discovery, dict) else None
        if not isinstance(issuer, str) or not issuer:
            raise ApiUnavailable(f"{DISCOVERY} names no issuer")
        jwks = _get(api[0], JWKS, timeout, accept="application/jwk-set+json")
        return IssuerKeys(issuer, jwks if isinstance(jwks, dict) else {})

    return read
