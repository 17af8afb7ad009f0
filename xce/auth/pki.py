"""A small cluster PKI: one CA, and server/client certificates it signs, plus the SSL contexts
every XCE role builds from `[tls]`.

Why its own CA: an air-gapped cluster has no public CA to lean on, and the operator should not
need openssl incantations. `xce tls init` (and `xce init`) call `create_ca` once
and `issue_certificate` per controller/worker; every node then trusts exactly that CA.

Promises:
- keys are EC P-256, written PKCS#8 PEM, unencrypted, with mode 0600 from the moment the file
  exists (created with O_EXCL-free `os.open(..., 0o600)` then replaced atomically);
- the CA has basicConstraints CA:TRUE, pathlen 0, keyUsage keyCertSign + cRLSign;
- leaf certificates carry every host as a SAN (IP addresses as IP SANs, the rest as DNS names),
  serverAuth always, clientAuth too when `client=True`, and basicConstraints CA:FALSE;
- contexts speak TLS 1.2 or newer only; clients verify the server's chain and host name.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from xce.auth.contexts import (  # noqa: F401  (re-exported: callers import them from here)
    PkiError,
    _load_ca,
    _load_chain,
    client_ssl_context,
)
from xce.config.settings import TlsSettings

CA_CERT = "ca.pem"
CA_KEY = "ca.key"
CA_VALID_DAYS = 3650
LEAF_VALID_DAYS = 825


@dataclass(frozen=True)
class CertPair:
    """Paths of a PEM certificate and its PEM private key."""

    cert_path: Path
    key_path: Path


def _write_private(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that it is never readable by others, not even briefly."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _write_public(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def create_ca(
    out_dir: Path, name: str = "XCE cluster CA", *, valid_days: int = CA_VALID_DAYS
) -> CertPair:
    """Create a self-signed CA in `out_dir` (ca.pem, ca.key 0600), overwriting any old one."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    pair = CertPair(out_dir / CA_CERT, out_dir / CA_KEY)
    _write_private(pair.key_path, _key_pem(key))
    _write_public(pair.cert_path, cert.public_bytes(serialization.Encoding.PEM))
    return pair


def load_ca(dir: Path) -> CertPair:
    """The CA in `dir`; raises PkiError naming the missing file."""
    pair = CertPair(Path(dir) / CA_CERT, Path(dir) / CA_KEY)
    for path in (pair.cert_path, pair.key_path):
        if not path.is_file():
            raise PkiError(f"CA file {path} not found (create it with `xce tls init`)")
    return pair


def _read_ca(ca: CertPair) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    try:
        cert = x509.load_pem_x509_certificate(ca.cert_path.read_bytes())
        key = serialization.load_pem_private_key(ca.key_path.read_bytes(), password=None)
    except (OSError, ValueError) as exc:
        raise PkiError(f"cannot read CA {ca.cert_path} / {ca.key_path}: {exc}") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise PkiError(f"CA key {ca.key_path} is not an EC key")
    return cert, key


def _san(hosts: list[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def issue_certificate(
    ca: CertPair,
    out_dir: Path,
    name: str,
    hosts: list[str],
    client: bool = False,
    *,
    valid_days: int = LEAF_VALID_DAYS,
    not_before: dt.datetime | None = None,
) -> CertPair:
    """Sign a certificate for `name` with SANs `hosts`; writes <name>.pem and <name>.key (0600).

    serverAuth is always present (a worker may also serve one day); `client=True` adds
    clientAuth so the certificate works for mutual TLS. `not_before` (default: now minus a few
    minutes of clock skew) and `valid_days` exist so tests can mint expired certificates."""
    if not hosts:
        raise PkiError(f"certificate {name!r} needs at least one host name or address")
    ca_cert, ca_key = _read_ca(ca)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    start = not_before or (_now() - dt.timedelta(minutes=5))
    usages = [ExtendedKeyUsageOID.SERVER_AUTH]
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + dt.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=True,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(_san(hosts), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pair = CertPair(out_dir / f"{name}.pem", out_dir / f"{name}.key")
    _write_private(pair.key_path, _key_pem(key))
    _write_public(pair.cert_path, cert.public_bytes(serialization.Encoding.PEM))
    return pair


def server_ssl_context(
    tls: TlsSettings, require_client_cert: bool = False
) -> ssl.SSLContext | None:
    """The listener's context, or None when `[tls]` has no cert_file (plain HTTP).

    Client certificates (checked against tls.ca_file): required in the handshake when
    `require_client_cert` or `tls.require_client_cert == "all"`; asked for but optional with
    "workers" (xce/api/mtls.py then demands one on worker routes; a certificate that is
    offered must still verify); not asked for otherwise."""
    require = require_client_cert or tls.require_client_cert == "all"
    optional = tls.require_client_cert == "workers"
    if tls.cert_file is None or tls.key_file is None:
        if require or optional:
            raise PkiError("tls.require_client_cert needs tls.cert_file and tls.key_file")
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # no system CAs: only the cluster CA counts
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(ctx, tls)
    if require or optional:
        if tls.ca_file is None:
            raise PkiError(
                "tls.require_client_cert needs tls.ca_file to verify client certificates"
            )
        _load_ca(ctx, tls.ca_file)
        ctx.verify_mode = ssl.CERT_REQUIRED if require else ssl.CERT_OPTIONAL
    return ctx
