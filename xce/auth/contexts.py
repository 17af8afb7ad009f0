"""The TLS contexts a client builds (the CLI, the console, workers), without the PKI's
certificate-making half: `xce job list` must not pay for importing `cryptography`.

`client_ssl_context` takes anything with `ca_file`, `cert_file` and `key_file` attributes
(`xce.config.loader.TlsSettings`, the CLI's `ClientSettings`).
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

from xce.core.errors import InvalidRequest


class PkiError(InvalidRequest):
    """A CA or certificate file is missing or unreadable; the message names the file."""

    code = "tls_config"


def _load_chain(ctx: ssl.SSLContext, tls: Any) -> None:
    try:
        ctx.load_cert_chain(str(tls.cert_file), str(tls.key_file))
    except (OSError, ssl.SSLError) as exc:
        raise PkiError(
            f"cannot load tls.cert_file {tls.cert_file} / tls.key_file {tls.key_file}: {exc}"
        ) from exc


def _load_ca(ctx: ssl.SSLContext, ca_file: Path, source: str = "tls.ca_file") -> None:
    try:
        ctx.load_verify_locations(cafile=str(ca_file))
    except (OSError, ssl.SSLError) as exc:
        raise PkiError(f"cannot load the CA file {ca_file} ({source}): {exc}") from exc


def client_ssl_context(tls: Any) -> ssl.SSLContext | None:
    """The context for https:// controllers, or None when tls.ca_file is unset (then https://
    URLs fall back to the system trust store and plain http:// needs no context at all).

    The server must chain to tls.ca_file and match the host name; when cert_file/key_file are
    set they are presented as the client certificate (mutual TLS for workers). A CA file that
    cannot be loaded is named with the setting it came from (`tls.ca_source`, where the
    settings say, as the CLI's do: ca_file in which file, or XCE_CA_FILE)."""
    if tls.ca_file is None:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # no system CAs: only the cluster CA counts
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = True
    ctx.verify_mode = ssl.CERT_REQUIRED
    _load_ca(ctx, tls.ca_file, getattr(tls, "ca_source", "") or "tls.ca_file")
    if tls.cert_file is not None and tls.key_file is not None:
        _load_chain(ctx, tls)
    return ctx
