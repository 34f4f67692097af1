"""One CA + serving certificate for the training operator's admission webhooks, shared by all runs.

The operator's certificate rotator (always on in v1.9.4) reads the Secret
`training-operator-webhook-cert`, but its webhook server serves the files in the hard-coded
directory /tmp/k8s-webhook-server/serving-certs, which every run on the machine shares. If each
run let its rotator invent a CA, parallel runs would overwrite each other's files and their API
servers would reject the served certificate. So every run uses this one long-lived pair: it is
generated once (under a lock) in the cache, pre-filled into each run's Secret (the rotator keeps
a valid pair) and written to the shared directory only when the files there differ.

The rotator checks that the CA verifies for the name `training-operator-ca` and the serving
certificate for `training-operator.<namespace>.svc`; the API server calls the webhook on
https://127.0.0.1, so the serving certificate also carries that IP.
"""

from __future__ import annotations

import datetime
import fcntl
import ipaddress
import os
from pathlib import Path

from tests.support.controlplane.build import cache_root

CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")  # pkg/cert/cert.go in v1.9.4
CA_NAME = "training-operator-ca"
FILES = ("ca.crt", "ca.key", "tls.crt", "tls.key")


# cryptography (the integration extra) is imported where it is used, not with the module: the
# unit rung imports the world's modules (its docs check reads the controllers tests) on the
# [test] extra alone.


def _pem_key(key) -> bytes:
    # PKCS#1 ("RSA PRIVATE KEY"), the form the rotator itself writes and parses.
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def generate(ca_name: str, dns_names: list[str], valid_for: datetime.timedelta) -> dict[str, bytes]:
    """A CA and a serving pair for `dns_names`, localhost and 127.0.0.1 (PEM; PKCS#1 keys)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_name)])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_subject)
        .issuer_name(ca_subject)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + valid_for)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(ca_name)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])]))
        .issuer_name(ca_subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + valid_for)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    *(x509.DNSName(name) for name in dict.fromkeys([*dns_names, "localhost"])),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                ]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return {
        "ca.crt": ca.public_bytes(serialization.Encoding.PEM),
        "ca.key": _pem_key(ca_key),
        "tls.crt": cert.public_bytes(serialization.Encoding.PEM),
        "tls.key": _pem_key(key),
    }


def _generate(namespace: str, service: str) -> dict[str, bytes]:
    """The training operator's pair: the names its certificate rotator checks, ten years."""
    return generate(CA_NAME, [f"{service}.{namespace}.svc"], datetime.timedelta(days=3650))


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_bytes(data)
    tmp.chmod(0o600 if path.name.endswith(".key") else 0o644)
    tmp.replace(path)


def shared_pair(namespace: str = "kubeflow", service: str = "training-operator") -> dict[str, bytes]:
    """The cached CA + serving pair (generated on first use), also installed in CERT_DIR."""
    store = cache_root() / f"world-webhook-cert-{service}.{namespace}"
    store.mkdir(parents=True, exist_ok=True)
    with (store / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not all((store / name).exists() for name in FILES):
            for name, data in _generate(namespace, service).items():
                _write_atomically(store / name, data)
        pair = {name: (store / name).read_bytes() for name in FILES}
        CERT_DIR.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            target = CERT_DIR / name
            if not target.exists() or target.read_bytes() != pair[name]:
                _write_atomically(target, pair[name])
    return pair
