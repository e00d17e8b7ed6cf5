"""Issue a CA and certificates signed by it, with `cryptography`.

ECDSA P-256 keys: handshakes are several times cheaper than RSA-2048, which matters when
kube-apiserver opens new connections to the webhook. Every function returns PEM bytes so the
same code serves files on disk (local cluster, `python -m certs`) and Secrets (in-cluster).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
LEAF_DAYS = 365
# Backdate so a clock a little behind the issuer's still accepts the certificate.
CLOCK_SKEW = dt.timedelta(minutes=5)


@dataclass(frozen=True)
class KeyPair:
    cert_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    @property
    def private_key(self) -> ec.EllipticCurvePrivateKey:
        key = serialization.load_pem_private_key(self.key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("only ECDSA keys are supported; re-issue the CA with `python -m certs`")
        return key


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    """ECDSA keys sign; only a CA signs certificates and revocation lists."""
    return x509.KeyUsage(
        digital_signature=True,
        key_cert_sign=ca,
        crl_sign=ca,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        encipher_only=False,
        decipher_only=False,
    )


def issue_ca(common_name: str = "priogate-ca", days: int = CA_DAYS) -> KeyPair:
    key = _new_key()
    now = dt.datetime.now(dt.UTC)
    name = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def issue_leaf(
    ca: KeyPair,
    common_name: str,
    *,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    organizations: Sequence[str] = (),
    server: bool = True,
    client: bool = False,
    days: int = LEAF_DAYS,
) -> KeyPair:
    """A serving and/or client certificate signed by `ca`. Go ignores the CN for host names, so
    every name the certificate must answer for goes into the SANs."""
    if not server and not client:
        raise ValueError("a certificate must be for serving, for clients, or both")
    key = _new_key()
    now = dt.datetime.now(dt.UTC)
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    )
    ca_cert = ca.certificate
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, organizations))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(min(now + dt.timedelta(days=days), ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()), critical=False
        )
    )
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca.private_key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def has_client_auth(cert_pem: bytes) -> bool:
    """True when the certificate may authenticate a client: no extended key usage, or one that
    lists clientAuth (OpenSSL checks it when a server verifies a client's certificate)."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return True
    return ExtendedKeyUsageOID.CLIENT_AUTH in usages


def expires_within(cert_pem: bytes, window: dt.timedelta) -> bool:
    """True when the certificate is due for renewal (used by rotation)."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    return cert.not_valid_after_utc - dt.datetime.now(dt.UTC) < window
