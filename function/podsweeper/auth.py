"""Who may send events: a Knative source's bearer token, checked before any other work.

With Eventing's `authentication-oidc`, each source asks the API server for a token of its own
ServiceAccount (TokenRequest) for the sink's audience and sends `Authorization: Bearer <jwt>`.
Such a token is checked here against the API server's service-account signing keys (its OIDC
discovery: the issuer, the JWKS), not by a TokenReview: a TokenReview is an API request per
unknown token, so forged tokens would cost the API server one request each. Here:

- no token, or one that is not a JWT of an accepted algorithm, is refused from the request
  alone;
- a token naming another audience or subject, or expired, is refused from its own (unverified)
  claims, before any key is looked at: it cannot make the function read anything either;
- a token with a key id not among the keys held re-reads the keys at most once every
  `refresh_seconds` (key rotation); any other key id is refused without a request (503, so
  the source retries, while the last read failed: the key may well be the issuer's);
- a signature is verified against the key with that id (PyJWT, the algorithm the key's type
  allows), then audience, issuer, expiry and not-before again, and the subject among the allowed
  senders. A token that passed is remembered until it expires (a small bounded cache), so a
  source's stream of events costs one signature check per token, not one per event.

The keys are read by a callable the service gives (the cluster layer's `issuer_keys`), so this
module does no I/O of its own and is tested with keys it makes.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import jwt
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from podsweeper.errors import ApiUnavailable

log = logging.getLogger("podsweeper.auth")

# What the API server signs service-account tokens with (RSA or ECDSA keys). "none" and the
# HMAC algorithms are never accepted: a public key must not double as a shared secret.
ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "ES256", "ES384", "ES512"})
MAX_TOKEN_BYTES = 8192  # a service-account token is ~1 KiB; more is not one
CACHE_SIZE = 256  # tokens that passed, kept until they expire (one per source and hour)
LEEWAY_SECONDS = 30  # clock skew between the API server and this instance
RETRY_FAILED_READ_SECONDS = 2.0  # after a failed read of the keys, the next one at most this soon


class Refused(StrEnum):
    """Why a request was answered 401 (the metric's label: a fixed set)."""

    MISSING = "missing"  # no Authorization header, or not a bearer token
    MALFORMED = "malformed"  # not a JWT, or of an algorithm not accepted
    AUDIENCE = "audience"
    SUBJECT = "subject"
    EXPIRED = "expired"  # exp passed, or nbf/iat still ahead
    UNKNOWN_KEY = "unknown_key"  # no key with its kid, even after a re-read
    SIGNATURE = "signature"
    ISSUER = "issuer"


@dataclass(frozen=True)
class Denied:
    """The answer is 401; `detail` is for the log and the response's one line."""

    reason: Refused
    detail: str


@dataclass(frozen=True)
class IssuerKeys:
    """The issuer the API server names in its discovery document, and its JWKS."""

    issuer: str
    jwks: Mapping[str, Any]


KeyReader = Callable[[], IssuerKeys]


def _public_key(jwk: Mapping[str, Any]) -> tuple[Any, frozenset[str]] | None:
    """A JWK's public key and the algorithms its type allows; None for a key of no use here."""
    try:
        if jwk.get("kty") == "RSA":
            return RSAAlgorithm.from_jwk(json.dumps(jwk)), frozenset({"RS256", "RS384", "RS512"})
        if jwk.get("kty") == "EC":
            return ECAlgorithm.from_jwk(json.dumps(jwk)), frozenset({"ES256", "ES384", "ES512"})
    except (jwt.InvalidKeyError, ValueError, TypeError, KeyError):
        log.warning("the issuer's key %r could not be read; left out", jwk.get("kid"))
    return None


def keys_by_id(jwks: Mapping[str, Any]) -> dict[str, tuple[Any, frozenset[str]]]:
    keys = jwks.get("keys") if isinstance(jwks, Mapping) else None
    found = {}
    for jwk in keys if isinstance(keys, list) else []:
        if isinstance(jwk, Mapping) and isinstance(jwk.get("kid"), str) and jwk.get("use", "sig") == "sig":
            key = _public_key(jwk)
            if key is not None:
                found[jwk["kid"]] = key
    return found


class Verifier:
    """Checks one Authorization header value; thread-safe (gunicorn's threads share it)."""

    def __init__(
        self,
        audience: str,
        subjects: frozenset[str],
        read_keys: KeyReader,
        *,
        issuer: str = "",
        refresh_seconds: float = 30.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self.audience = audience
        self.subjects = subjects
        self._read_keys = read_keys
        self._issuer = issuer  # "" = the one the keys' reader names
        self._refresh_seconds = refresh_seconds
        self._clock, self._monotonic = clock, monotonic
        self._lock = threading.Lock()
        self._keys: dict[str, tuple[Any, frozenset[str]]] = {}
        self._read_at: float | None = None  # monotonic time of the last read (tried)
        self._read_failed = False
        self._passed: OrderedDict[str, float] = OrderedDict()  # token -> its exp
        self.key_reads = 0  # how many times the keys were read (tests, the log)

    def check(self, authorization: str | None) -> Denied | None:
        """None if the header carries a valid token of an allowed sender, else why not.
        May raise what the key reader raises (ApiUnavailable: the answer is 503)."""
        token = _bearer(authorization)
        if token is None:
            return Denied(Refused.MISSING, "a bearer token is required (Authorization: Bearer <jwt>)")
        now = self._clock()
        with self._lock:
            exp = self._passed.get(token)
            if exp is not None and now < exp:
                self._passed.move_to_end(token)
                return None
        try:
            header = jwt.get_unverified_header(token)
            claims = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError as error:
            return Denied(Refused.MALFORMED, f"not a JWT: {error}")
        algorithm, kid = header.get("alg"), header.get("kid")
        if algorithm not in ALGORITHMS or not isinstance(kid, str):
            return Denied(Refused.MALFORMED, f"algorithm {str(algorithm)[:20]!r} or key id not accepted")
        # The claims as sent, before any key is looked at: a token for someone else costs nothing.
        denied = self._claims(claims, now)
        if denied is not None:
            return denied
        found = self._key(kid)
        if found is None:
            return Denied(Refused.UNKNOWN_KEY, f"no key {kid[:80]!r} among the issuer's")
        key, algorithms = found
        if algorithm not in algorithms:
            return Denied(Refused.MALFORMED, f"algorithm {algorithm} does not fit key {kid[:80]!r}")
        try:
            verified = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=self.audience,
                issuer=self._issuer or None,
                leeway=LEEWAY_SECONDS,
                options={"require": ["exp", "iat", "iss", "sub", "aud"]},
            )
        except jwt.InvalidSignatureError:
            return Denied(Refused.SIGNATURE, "signature does not verify")
        except jwt.InvalidIssuerError:
            return Denied(Refused.ISSUER, f"issuer is not {self._issuer!r}")
        except (jwt.ExpiredSignatureError, jwt.ImmatureSignatureError) as error:
            return Denied(Refused.EXPIRED, str(error))
        except jwt.InvalidAudienceError:
            return Denied(Refused.AUDIENCE, f"audience is not {self.audience!r}")
        except jwt.PyJWTError as error:
            return Denied(Refused.MALFORMED, f"invalid token: {error}")
        denied = self._claims(verified, now)  # the same checks on what was signed
        if denied is not None:
            return denied
        with self._lock:
            self._passed[token] = float(verified["exp"])
            while len(self._passed) > CACHE_SIZE:
                self._passed.popitem(last=False)
        return None

    def _claims(self, claims: Mapping[str, Any], now: float) -> Denied | None:
        audiences = claims.get("aud")
        audiences = [audiences] if isinstance(audiences, str) else audiences
        if not isinstance(audiences, list) or self.audience not in audiences:
            return Denied(Refused.AUDIENCE, f"audience is not {self.audience!r}")
        subject = claims.get("sub")
        if subject not in self.subjects:
            return Denied(Refused.SUBJECT, f"sender {str(subject)[:200]!r} is not allowed")
        exp = claims.get("exp")
        if not isinstance(exp, int | float) or isinstance(exp, bool) or exp <= now - LEEWAY_SECONDS:
            return Denied(Refused.EXPIRED, "token has expired (or has no exp)")
        return None

    def _key(self, kid: str) -> tuple[Any, frozenset[str]] | None:
        """The key with this id; re-reads the keys when it is not held, at most once every
        refresh_seconds (whatever the tokens ask for)."""
        with self._lock:
            if kid in self._keys:
                return self._keys[kid]
            now = self._monotonic()
            # After a failed read, sooner (the first events wait on it), still bounded.
            interval = (
                min(self._refresh_seconds, RETRY_FAILED_READ_SECONDS)
                if self._read_failed
                else (self._refresh_seconds)
            )
            if self._read_at is not None and now - self._read_at < interval:
                if self._read_failed:  # not an unknown key: keys not read yet, the source retries
                    wait = interval - (now - self._read_at)
                    raise ApiUnavailable("the issuer's keys could not be read", retry_after=max(1.0, wait))
                return None
            self._read_at = now  # a failed read counts too: no retry storm against the API
            self.key_reads += 1
            self._read_failed = True
            keys = self._read_keys()
            self._read_failed = False
            self._keys = keys_by_id(keys.jwks)
            if not self._issuer:
                self._issuer = keys.issuer
            log.info("read %d signing keys of issuer %s", len(self._keys), self._issuer)
            return self._keys.get(kid)


def _bearer(authorization: str | None) -> str | None:
    if not authorization or len(authorization) > MAX_TOKEN_BYTES:
        return None
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token
