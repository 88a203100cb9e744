"""Test and laptop PKI: a CA, a server certificate and client certificates, as PEM files.

``magnetar cluster up --secure`` and the TLS tests use it. Keys are EC P-256; a server
certificate carries ``localhost``, ``127.0.0.1`` and any other names given as subject alternative
names (hostname verification checks those, never the CN); a client certificate's CN is the role
the ``tls`` authentication provider gives it. Not a production CA: no revocation, no intermediates.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CERT_VALIDITY_DAYS = 825  # what browsers and most TLS stacks accept for a leaf certificate


@dataclass(frozen=True)
class Issued:
    cert_path: str
    key_path: str


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Magnetar")])


def _write(path: str, data: bytes, private: bool = False) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    with os.fdopen(os.open(path, flags, 0o600 if private else 0o644), "wb") as handle:
        handle.write(data)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class CertificateAuthority:
    def __init__(self, common_name: str = "Magnetar test CA") -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        self.cert = (
            x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(_name(common_name))
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=CERT_VALIDITY_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(self.key, hashes.SHA256())
        )

    def write(self, cert_path: str) -> str:
        _write(cert_path, self.cert.public_bytes(serialization.Encoding.PEM))
        return cert_path

    def issue(self, common_name: str, cert_path: str, key_path: str, *, server_names: tuple[str, ...] = (),
              client: bool = False) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        builder = (
            x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(self.cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=CERT_VALIDITY_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.CLIENT_AUTH] if client else [ExtendedKeyUsageOID.SERVER_AUTH,
                                                                  ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        )
        if server_names:
            alternatives: list[x509.GeneralName] = []
            for name in server_names:
                try:
                    alternatives.append(x509.IPAddress(ipaddress.ip_address(name)))
                except ValueError:
                    alternatives.append(x509.DNSName(name))
            builder = builder.add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        _write(cert_path, cert.public_bytes(serialization.Encoding.PEM))
        _write(key_path, _key_pem(key), private=True)
        return Issued(cert_path, key_path)


def make_pki(directory: str, *, client_roles: tuple[str, ...] = ("admin",),
             server_names: tuple[str, ...] = ("localhost", "127.0.0.1")) -> dict[str, str]:
    """``ca.cert.pem``, ``broker.cert.pem``/``broker.key-pk8.pem`` and ``<role>.cert.pem``/
    ``<role>.key-pk8.pem`` per client role, in ``directory``; returns name → path."""
    ca = CertificateAuthority()
    paths = {"ca": ca.write(os.path.join(directory, "ca.cert.pem"))}
    broker = ca.issue("broker", os.path.join(directory, "broker.cert.pem"),
                      os.path.join(directory, "broker.key-pk8.pem"), server_names=server_names)
    paths["broker_cert"], paths["broker_key"] = broker.cert_path, broker.key_path
    for role in client_roles:
        issued = ca.issue(role, os.path.join(directory, f"{role}.cert.pem"),
                          os.path.join(directory, f"{role}.key-pk8.pem"), client=True)
        paths[f"{role}_cert"], paths[f"{role}_key"] = issued.cert_path, issued.key_path
    return paths
