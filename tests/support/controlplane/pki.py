"""Keys and certificates for a throwaway control plane, generated fresh for every start.

We make our own CA and serving certificate (rather than letting kube-apiserver self-sign)
so every client, including the Knative adapter later, can verify TLS with one CA file
instead of skipping verification. TLS keys are ECDSA P-256 because they are generated
in milliseconds; the service-account signing key is RSA, the key type kube-apiserver
documents for --service-account-signing-key-file.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Names the serving certificate is valid for: loopback, plus the in-cluster service
# names and the first IP of --service-cluster-ip-range, as on a real cluster.
SERVING_DNS = [
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
]
SERVING_IPS = ["127.0.0.1", "10.0.0.1"]


# What a CA's certificate may sign: certificates and CRLs (and digital signatures).
CA_KEY_USAGE = x509.KeyUsage(
    digital_signature=True,
    key_cert_sign=True,
    crl_sign=True,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    encipher_only=False,
    decipher_only=False,
)


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    sa_key: Path  # private RSA key; kube-apiserver derives the public half for verification


def _pem_key(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert(subject: str, public_key, issuer: x509.Name, signing_key, *, ca: bool):
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(CA_KEY_USAGE, critical=True)
    else:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(n) for n in SERVING_DNS]
                + [x509.IPAddress(ipaddress.ip_address(i)) for i in SERVING_IPS]
            ),
            critical=False,
        ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    return builder.sign(signing_key, hashes.SHA256())


def generate(directory: Path) -> Pki:
    """Write a CA, a serving cert/key signed by it and a service-account key into directory."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "podsweeper-test-ca")])
    ca = _cert("podsweeper-test-ca", ca_key.public_key(), ca_name, ca_key, ca=True)
    serving_key = ec.generate_private_key(ec.SECP256R1())
    serving = _cert("kube-apiserver", serving_key.public_key(), ca_name, ca_key, ca=False)
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    pki = Pki(
        directory / "ca.crt", directory / "apiserver.crt", directory / "apiserver.key", directory / "sa.key"
    )
    pki.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    pki.serving_cert.write_bytes(serving.public_bytes(serialization.Encoding.PEM))
    pki.serving_key.write_bytes(_pem_key(serving_key))
    pki.sa_key.write_bytes(_pem_key(sa_key))
    for path in (pki.serving_key, pki.sa_key):
        path.chmod(0o600)
    return pki
