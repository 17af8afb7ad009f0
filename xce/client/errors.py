"""`ApiError`, shared by the async client and the light one-shot client (no aiohttp here)."""

from __future__ import annotations

import json
from urllib.parse import quote


class ApiError(Exception):
    """A JSON error from the controller, or no controller reachable (status 0)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def job_path(job_id: str) -> str:
    """Job ids like `17[5]` are quoted so brackets survive the URL."""
    return quote(job_id, safe="")


def ca_note(ca_file: object | None, source: str) -> str:
    """What a TLS failure's message says of the CA: the file tried and the setting that named
    it, or that none was configured and where one would go, so that the fix is in the line.

    `source` is the setting: "XCE_CA_FILE", "ca_file in /etc/xce/client.toml", "[tls]
    ca_file in /var/lib/xce/xce.toml" (without a CA: where it was looked for)."""
    if ca_file is None:
        where = f" ({source})" if source else " (ca_file)"
        return f"no CA file was configured{where}, so only the system's CAs were trusted"
    return f"CA file tried: {ca_file} ({source or 'ca_file'})"


def default_ca_note(ssl_context: object | None) -> str:
    """The CA note of a client whose caller did not describe its CA (tests, tools)."""
    if ssl_context is None:
        return ca_note(None, "")
    return "CA: the ca_file of this client's TLS settings"


def tls_error(where: str, exc: BaseException, note: str) -> ApiError:
    """A TLS failure (`CERTIFICATE_VERIFY_FAILED`, a host name that does not match, ...) as
    one line: whom it was with, why, and the CA `note` (see `ca_note`)."""
    reason = " ".join(str(exc).split()) or type(exc).__name__
    return ApiError(0, "tls_error", f"TLS handshake with {where} failed: {reason}; {note}")


def not_primary_reason(url: str, body: bytes | str) -> str:
    """`URL: why` from a candidate's 503 not_primary answer (its JSON error message; the
    primary of a term that may not write now says why, e.g. its lease lapsed)."""
    try:
        message = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = ""
    return f"{url}: {str(message)[:300] or 'not the primary'}"


def no_controller(tried: str, last: object, refusals: list[str]) -> str:
    """The message when no candidate took a request: why each one that answered refused it
    (a primary that may not write says why), then what the others' connections did."""
    if refusals:
        said = "; ".join(refusals)
        others = f"; the others did not answer ({last})" if last is not None else ""
        return f"no controller takes this now (tried {tried}): {said}{others}"
    return f"no controller answered (tried {tried}): {last}"
