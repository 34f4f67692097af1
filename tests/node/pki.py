"""The node's own CA and its certificates, made fresh for every node.

The control plane's CA key is not kept on disk (tests/support/controlplane/pki.py generates it in
memory), so the node brings a CA of its own and kube-apiserver is told to trust it for the node
(the `apiserver_args` of RealNode):

- `--client-ca-file`: the kubelet authenticates to the API server with a client certificate
  `CN=system:node:<name>, O=system:nodes` (what a kubeadm node's kubelet presents), so the Node
  authorizer and the NodeRestriction admission plugin treat it as that node and nothing more.
- `--kubelet-certificate-authority`: kube-apiserver verifies the kubelet's serving certificate
  (IP SAN = the node's address) when it fetches pods/log, exec, ...
- `--kubelet-client-certificate/-key`: kube-apiserver's identity towards the kubelet, which the
  kubelet authenticates by the same CA and authorizes by a SubjectAccessReview (RBAC:
  system:kubelet-api-admin, bound by RealNode.start).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.support.controlplane.pki import CA_KEY_USAGE

APISERVER_KUBELET_CLIENT = "podsweeper-apiserver-kubelet-client"


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _write(directory: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> KeyPair:
    pair = KeyPair(directory / f"{stem}.crt", directory / f"{stem}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pair.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    pair.key.chmod(0o600)
    return pair


class NodeCa:
    """A CA (ECDSA P-256, two days) whose key stays in memory; it signs the node's certificates."""

    def __init__(self, directory: Path, name: str = "podsweeper-node-ca"):
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = _name(name)
        self._cert = (
            self._builder(self._name, self._key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(CA_KEY_USAGE, critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.cert = directory / "node-ca.crt"
        self.cert.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def _builder(self, subject: x509.Name, public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
        now = datetime.datetime.now(datetime.UTC)
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._name)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
        )

    def issue(
        self,
        stem: str,
        common_name: str,
        *,
        organization: str | None = None,
        server: bool = False,
        ips: tuple[str, ...] = (),
        dns: tuple[str, ...] = (),
    ) -> KeyPair:
        """A leaf certificate and key under `stem`.crt/.key: client auth, or server auth for
        the given IP and DNS names."""
        key = ec.generate_private_key(ec.SECP256R1())
        builder = self._builder(_name(common_name, organization), key.public_key()).add_extension(
            x509.BasicConstraints(ca=False, path_length=None), critical=True
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName(n) for n in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
                ),
                critical=False,
            ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        else:
            builder = builder.add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
            )
        return _write(self.directory, stem, builder.sign(self._key, hashes.SHA256()), key)
