"""The cluster PKI: file modes, certificate contents, and real TLS handshakes on 127.0.0.1."""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from xce.auth.pki import (
    CertPair,
    PkiError,
    client_ssl_context,
    create_ca,
    issue_certificate,
    load_ca,
    server_ssl_context,
)
from xce.config.settings import TlsSettings


def _cert(pair: CertPair) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pair.cert_path.read_bytes())


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, CertPair]:
    base = tmp_path_factory.mktemp("pki")
    ca = create_ca(base / "ca")
    other = create_ca(base / "other", name="Someone else's CA")
    return {
        "ca": ca,
        "other": other,
        "server": issue_certificate(ca, base, "controller", ["localhost", "127.0.0.1", "::1"]),
        "worker": issue_certificate(ca, base, "worker1", ["127.0.0.1"], client=True),
        "stranger": issue_certificate(other, base / "o", "stranger", ["127.0.0.1"], client=True),
        "expired": issue_certificate(
            ca,
            base,
            "old",
            ["127.0.0.1"],
            client=True,
            valid_days=1,
            not_before=dt.datetime.now(dt.UTC) - dt.timedelta(days=3),
        ),
    }


def test_keys_are_private_and_ca_is_a_ca(pki: dict[str, CertPair]) -> None:
    for pair in pki.values():
        assert stat.S_IMODE(pair.key_path.stat().st_mode) == 0o600
    ca = _cert(pki["ca"])
    basic = ca.extensions.get_extension_for_class(x509.BasicConstraints).value
    usage = ca.extensions.get_extension_for_class(x509.KeyUsage).value
    assert basic.ca and usage.key_cert_sign and usage.crl_sign
    assert load_ca(pki["ca"].cert_path.parent) == pki["ca"]


def test_leaf_has_sans_and_usages(pki: dict[str, CertPair]) -> None:
    server = _cert(pki["server"])
    san = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    eku = server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    worker_eku = (
        _cert(pki["worker"]).extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    )
    assert ExtendedKeyUsageOID.CLIENT_AUTH in list(worker_eku)
    assert not server.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_load_ca_names_missing_file(tmp_path: Path) -> None:
    with pytest.raises(PkiError, match=r"ca\.pem"):
        load_ca(tmp_path)


def test_no_tls_means_no_context() -> None:
    assert server_ssl_context(TlsSettings()) is None
    assert client_ssl_context(TlsSettings()) is None
    with pytest.raises(PkiError, match="require_client_cert"):
        server_ssl_context(TlsSettings(), require_client_cert=True)


async def _handshake(
    server: ssl.SSLContext, client: ssl.SSLContext, host: str = "127.0.0.1"
) -> bytes:
    """Serve one TLS echo on 127.0.0.1 and return what the client read back."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(await reader.readexactly(4))
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()

    srv = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=server)
    port = srv.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client, server_hostname=host
        )
        writer.write(b"ping")
        await writer.drain()
        data = await reader.readexactly(4)
        writer.close()
        return data
    finally:
        srv.close()
        await srv.wait_closed()


def _tls(pki: dict[str, CertPair], me: str | None, ca: str = "ca") -> TlsSettings:
    pair = pki[me] if me else None
    return TlsSettings(
        pair.cert_path if pair else None, pair.key_path if pair else None, pki[ca].cert_path
    )


async def test_client_verifies_server_against_cluster_ca(pki: dict[str, CertPair]) -> None:
    server = server_ssl_context(_tls(pki, "server"))
    assert server is not None
    good = client_ssl_context(_tls(pki, None))
    assert good is not None and good.minimum_version >= ssl.TLSVersion.TLSv1_2
    assert await _handshake(server, good) == b"ping"
    wrong_ca = client_ssl_context(_tls(pki, None, ca="other"))
    assert wrong_ca is not None
    with pytest.raises(ssl.SSLCertVerificationError):
        await _handshake(server, wrong_ca)
    with pytest.raises(ssl.SSLCertVerificationError, match=r"(?i)hostname|ip address"):
        await _handshake(server, good, host="elsewhere.example")


async def test_mutual_tls_requires_a_cluster_client_cert(pki: dict[str, CertPair]) -> None:
    server = server_ssl_context(_tls(pki, "server"), require_client_cert=True)
    assert server is not None
    worker = client_ssl_context(_tls(pki, "worker"))
    assert worker is not None
    assert await _handshake(server, worker) == b"ping"
    for bad in (
        client_ssl_context(_tls(pki, None)),
        client_ssl_context(_tls(pki, "stranger")),
        client_ssl_context(_tls(pki, "expired")),
    ):
        assert bad is not None
        with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
            await _handshake(server, bad)


async def test_expired_server_certificate_is_refused(pki: dict[str, CertPair]) -> None:
    server = server_ssl_context(_tls(pki, "expired"))
    client = client_ssl_context(_tls(pki, None))
    assert server is not None and client is not None
    with pytest.raises(ssl.SSLCertVerificationError, match="expired"):
        await _handshake(server, client)


def test_tls_config_keys(tmp_path: Path) -> None:
    from xce.config.loader import parse_config
    from xce.core.errors import ConfigError

    files = {"cert_file": "c.pem", "key_file": "c.key", "ca_file": "ca.pem"}
    cfg = parse_config(
        {"tls": {**files, "require_client_cert": "workers", "insecure": False}}, tmp_path / "x.toml"
    )
    assert cfg.tls.require_client_cert == "workers" and cfg.tls.ca_file == tmp_path / "ca.pem"
    assert (
        parse_config({"tls": {**files, "require_client_cert": True}}).tls.require_client_cert
        == "all"
    )
    for bad, message in [
        ({**files, "require_client_cert": "some"}, "tls.require_client_cert must be"),
        ({"require_client_cert": "all"}, "tls.require_client_cert needs tls.cert_file"),
        ({"insecure": "yes"}, "tls.insecure must be a bool"),
        ({"cert_file": "c.pem"}, "tls.cert_file and tls.key_file must be given together"),
        ({"ca_fiel": "x"}, "unknown key tls.ca_fiel"),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_config({"tls": bad})
