"""Only the sources may speak, and no one may make an instance sweep more often than allowed.

The HTTP edge in-process (create_app, Flask's test client) with PODSWEEPER_AUTH=oidc, keys this
test makes (an RSA key as the API server's service-account signer), and a cluster that records
every call: a request without a valid token of an allowed sender is answered 401 and causes no
cluster call; forged tokens cannot make the function read the issuer's keys more than once per
refresh interval; an allowed sender's token goes through (and then the cluster is used). The
real tokens, from Knative's own sources, are tests/controllers/test_sender_identity.py.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import RSAAlgorithm

from podsweeper.auth import IssuerKeys, Refused, Verifier
from podsweeper.config import SHIPPED_AUDIENCE, SHIPPED_SENDERS, load_settings
from podsweeper.errors import ApiUnavailable
from podsweeper.pipeline import Outcome
from podsweeper.service import Service, SweepGate
from podsweeper.web import create_app
from tests.fixtures.builders import at, event, job, ping
from tests.support.harness.served import binary_headers

ISSUER = "https://kubernetes.default.svc.cluster.local"
ADAPTER, DISPATCHER = SHIPPED_SENDERS


class Signer:
    """The API server's service-account signer: one RSA key, its JWKS, tokens."""

    def __init__(self, kid: str = "key-1"):
        self.kid = kid
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.reads = 0

    def jwks(self) -> dict[str, Any]:
        jwk = RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        return {"keys": [{**jwk, "kid": self.kid, "use": "sig", "alg": "RS256"}]}

    def read(self) -> IssuerKeys:
        self.reads += 1
        return IssuerKeys(ISSUER, self.jwks())

    def token(self, subject: str = ADAPTER, audience: str = SHIPPED_AUDIENCE, **overrides: Any) -> str:
        now = int(time.time())
        claims = {"iss": ISSUER, "sub": subject, "aud": [audience], "iat": now, "nbf": now, "exp": now + 3600}
        claims.update(overrides)
        kid = claims.pop("kid", self.kid)
        return jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": kid})


class RecordingCluster:
    """Every call recorded; every read fails (-> 503), so a call that happened shows."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def bounded(self, deadline: float) -> RecordingCluster:
        return self

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            raise ApiUnavailable(f"recorded {name}")

        return call


@pytest.fixture
def signer() -> Signer:
    return Signer()


@pytest.fixture
def cluster() -> RecordingCluster:
    return RecordingCluster()


@pytest.fixture
def client(signer, cluster):
    settings = load_settings(auth="oidc", sweep_min_interval_seconds=0, auth_keys_refresh_seconds=30)
    return create_app(Service(settings, cluster=cluster, keys=signer.read)).test_client()


def post(client, raw_event: dict, token: str | None = None, scheme: str = "Bearer"):
    headers = binary_headers(raw_event)
    if token is not None:
        headers["Authorization"] = f"{scheme} {token}"
    return client.post("/", data=json.dumps(raw_event["data"]), headers=headers)


def finished_job_event() -> dict:
    return event("update", job(conditions=[("Created", at(0)), ("Succeeded", at(30))]), at(30))


def other_key_token(**claims: Any) -> str:
    """Well formed, the right claims, the signer's key id: signed by a key that is not its."""
    return Signer().token(**claims)


def test_an_allowed_senders_token_goes_through_to_the_cluster(client, signer, cluster):
    """The control: with a valid token the same requests do reach the cluster."""
    assert post(client, finished_job_event(), signer.token(ADAPTER)).status_code == 503
    assert post(client, ping(at(0)), signer.token(DISPATCHER)).status_code == 503
    assert cluster.calls and signer.reads == 1


@pytest.mark.parametrize(
    ("authorization", "reason"),
    [
        (None, "missing"),
        ("", "missing"),
        ("Basic dXNlcjpwYXNz", "missing"),
        ("Bearer", "missing"),
        ("Bearer not-a-jwt", "malformed"),
        ("Bearer a.b.c", "malformed"),
        ("Bearer " + "x" * 10000, "missing"),
        # alg none, and HS256 (a public key must never serve as a shared secret)
        (
            "Bearer " + jwt.encode({"sub": ADAPTER, "aud": SHIPPED_AUDIENCE}, None, algorithm="none"),
            "malformed",
        ),
        (
            "Bearer " + jwt.encode({"sub": ADAPTER}, "secret-of-32-bytes-at-least-xxxxx", algorithm="HS256"),
            "malformed",
        ),
    ],
)
def test_no_token_or_a_malformed_one_is_401_and_causes_nothing(
    client, signer, cluster, authorization, reason
):
    for raw in (finished_job_event(), ping(at(0))):
        headers = binary_headers(raw)
        if authorization is not None:
            headers["Authorization"] = authorization
        answer = client.post("/", data=json.dumps(raw["data"]), headers=headers)
        assert answer.status_code == 401, answer.get_data(as_text=True)
        assert answer.headers["WWW-Authenticate"] == "Bearer"
    assert cluster.calls == [] and signer.reads == 0
    metrics = client.get("/metrics").get_data(as_text=True)
    assert f'podsweeper_auth_refusals_total{{reason="{reason}"}}' in metrics


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        ({"audience": "https://kubernetes.default.svc.cluster.local"}, Refused.AUDIENCE),
        ({"subject": "system:serviceaccount:team-a:default"}, Refused.SUBJECT),
        ({"exp": int(time.time()) - 120}, Refused.EXPIRED),
    ],
)
def test_a_real_token_for_someone_else_is_401_without_reading_keys(client, signer, cluster, claims, reason):
    """Signed by the issuer's own key, but for another audience or sender, or expired: refused
    from its claims, before any key is read."""
    token = signer.token(**claims)
    assert post(client, finished_job_event(), token).status_code == 401
    assert post(client, ping(at(0)), token).status_code == 401
    assert cluster.calls == [] and signer.reads == 0
    verifier = Verifier(SHIPPED_AUDIENCE, frozenset(SHIPPED_SENDERS), signer.read)
    denied = verifier.check(f"Bearer {token}")
    assert denied is not None and denied.reason is reason and signer.reads == 0


def test_forged_tokens_cost_at_most_one_key_read_per_refresh_interval(signer, cluster):
    """A forged token with the right claims: its key id unknown, the keys are read once; within
    the refresh interval no forged token, whatever its key id, reads them again."""
    clock = [1000.0]
    settings = load_settings(auth="oidc", sweep_min_interval_seconds=0)
    service = Service(settings, cluster=cluster, keys=signer.read)
    assert service.verifier is not None
    service.verifier._monotonic = lambda: clock[0]
    client = create_app(service).test_client()
    forged = [other_key_token()] + [other_key_token(kid=str(uuid.uuid4())) for _ in range(50)]
    answers = [post(client, ping(at(0)), token).status_code for token in forged]
    assert answers == [401] * len(forged)
    assert signer.reads == 1 and cluster.calls == []
    clock[0] += 31  # past the refresh interval: one more read, no more
    assert [
        post(client, ping(at(0)), other_key_token(kid=str(uuid.uuid4()))).status_code for _ in range(20)
    ] == [401] * 20
    assert signer.reads == 2 and cluster.calls == []
    # The real key still works without a read: it is held.
    assert post(client, ping(at(0)), signer.token(DISPATCHER)).status_code == 503
    assert signer.reads == 2 and cluster.calls


def test_verifier_reasons(signer):
    verifier = Verifier(SHIPPED_AUDIENCE, frozenset(SHIPPED_SENDERS), signer.read, issuer=ISSUER)
    assert verifier.check(f"Bearer {signer.token()}") is None
    assert verifier.check(f"Bearer {signer.token(iss='https://elsewhere')}").reason is Refused.ISSUER
    assert verifier.check(f"Bearer {other_key_token()}").reason is Refused.SIGNATURE
    assert verifier.check(f"Bearer {signer.token(kid='rotated')}").reason is Refused.UNKNOWN_KEY
    later = signer.token(nbf=int(time.time()) + 600)
    assert verifier.check(f"Bearer {later}").reason is Refused.EXPIRED
    # An EC key's token, with the RSA key's id: the algorithm does not fit the key.
    es = jwt.encode(
        {"iss": ISSUER, "sub": ADAPTER, "aud": SHIPPED_AUDIENCE, "iat": 1, "exp": int(time.time()) + 60},
        ec.generate_private_key(ec.SECP256R1()),
        algorithm="ES256",
        headers={"kid": signer.kid},
    )
    assert verifier.check(f"Bearer {es}").reason is Refused.MALFORMED
    assert signer.reads == 1


def test_a_token_that_passed_is_checked_once_until_it_expires(signer, monkeypatch):
    verifier = Verifier(SHIPPED_AUDIENCE, frozenset(SHIPPED_SENDERS), signer.read)
    token = signer.token(exp=int(time.time()) + 3600)
    assert verifier.check(f"Bearer {token}") is None
    decoded = []
    monkeypatch.setattr(jwt, "decode", lambda *a, **k: decoded.append(1) or {})
    assert all(verifier.check(f"Bearer {token}") is None for _ in range(100))
    assert decoded == []


def test_auth_none_lets_anyone_through(cluster):
    settings = load_settings(auth="none", sweep_min_interval_seconds=0)
    client = create_app(Service(settings, cluster=cluster)).test_client()
    assert post(client, ping(at(0))).status_code == 503 and cluster.calls


def test_healthz_and_metrics_stay_open(client, cluster):
    assert client.get("/healthz").status_code == 200
    assert client.get("/metrics").status_code == 200
    assert cluster.calls == []


# -- sweeps coalesce ---------------------------------------------------------------------------


class BlockingPipeline:
    """Stands for the pipeline: each call counted, held until released."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = threading.Event()
        self.entered = threading.Event()

    def handle(self, intake, now, deadline=None) -> Outcome:
        self.calls += 1
        self.entered.set()
        assert self.release.wait(10)
        return Outcome(intake.attributes.id, note="swept")


def service_with(pipeline: BlockingPipeline, interval: float) -> Service:
    settings = load_settings(auth="none", sweep_min_interval_seconds=interval)
    service = Service(settings, cluster=RecordingCluster())
    service.pipeline = pipeline  # type: ignore[assignment]
    return service


def handle_ping(service: Service, name: str) -> Outcome:
    raw = ping(at(0), event_id=name)
    attributes = {k: v for k, v in raw.items() if k != "data"}
    return service.handle(attributes, json.dumps(raw["data"]).encode())


def test_concurrent_sweep_requests_run_one_sweep():
    pipeline = BlockingPipeline()
    service = service_with(pipeline, interval=0)
    results: dict[str, Outcome] = {}
    first = threading.Thread(target=lambda: results.setdefault("first", handle_ping(service, "first")))
    first.start()
    assert pipeline.entered.wait(10)
    others = [
        threading.Thread(target=lambda n=n: results.setdefault(n, handle_ping(service, n)))
        for n in (f"other-{i}" for i in range(8))
    ]
    for thread in others:
        thread.start()
    for thread in others:
        thread.join(10)
    pipeline.release.set()
    first.join(10)
    assert pipeline.calls == 1
    assert results["first"].note == "swept"
    notes = {results[f"other-{i}"].note for i in range(8)}
    assert notes == {"sweep not run: a sweep is already running in this instance"}
    # With no interval the next request after the sweep ended runs one.
    assert handle_ping(service, "after").note == "swept" and pipeline.calls == 2


def test_a_sweep_inside_the_interval_is_answered_with_a_note_over_http():
    pipeline = BlockingPipeline()
    pipeline.release.set()
    service = service_with(pipeline, interval=60)
    client = create_app(service).test_client()
    assert post(client, ping(at(0))).status_code == 200 and pipeline.calls == 1
    answer = post(client, ping(at(1)))
    assert answer.status_code == 200 and pipeline.calls == 1
    assert "under the 60s between sweeps" in answer.get_json()["note"]


def test_the_gate_opens_after_the_interval():
    clock = [0.0]
    gate = SweepGate(60, clock=lambda: clock[0])
    assert gate.enter() is None
    gate.leave()
    clock[0] = 59.9
    assert gate.enter() is not None
    clock[0] = 60.0
    assert gate.enter() is None
    assert gate.enter() == "a sweep is already running in this instance"
    gate.leave()


def test_keys_that_could_not_be_read_ask_for_a_retry_not_a_401(signer):
    """The first read fails (the API server is down): the token may well be good, so the answer
    is 503 (the source retries, where a 401 is dropped); the next read comes at most every
    RETRY_FAILED_READ_SECONDS, and once it succeeds the token passes."""
    clock = [0.0]
    failing = [True]

    def read() -> IssuerKeys:
        if failing[0]:
            signer.reads += 1
            raise ApiUnavailable("down")
        return signer.read()

    verifier = Verifier(SHIPPED_AUDIENCE, frozenset(SHIPPED_SENDERS), read, monotonic=lambda: clock[0])
    token = f"Bearer {signer.token()}"
    for _ in range(5):
        with pytest.raises(ApiUnavailable):
            verifier.check(token)
    assert signer.reads == 1
    clock[0] = 2.0
    failing[0] = False
    assert verifier.check(token) is None and signer.reads == 2
