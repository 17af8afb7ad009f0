"""The error hierarchy every layer speaks.

The API maps each class to one HTTP status and the CLI to one line of text, so a domain rule
that is broken surfaces the same way everywhere.
"""

from __future__ import annotations


class XceError(Exception):
    """Base of every expected error; `code` is the stable machine-readable name."""

    code = "error"
    http_status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def http_headers(self) -> dict[str, str]:
        """Headers the HTTP answer carries beside the JSON body (Retry-After, ...)."""
        return {}


class InvalidRequest(XceError):
    """The request is malformed or names impossible values."""

    code = "invalid_request"
    http_status = 400


class ConfigError(InvalidRequest):
    """A config file is unreadable or has a bad key; the message names file and key."""

    code = "config_error"


class Unauthorized(XceError):
    """No valid identity came with the request."""

    code = "unauthorized"
    http_status = 401


class Forbidden(XceError):
    """The identity is known but may not do this."""

    code = "forbidden"
    http_status = 403


class NotFound(XceError):
    """The named job, queue, host or file does not exist."""

    code = "not_found"
    http_status = 404


class Conflict(XceError):
    """The request is valid but the object's current state does not allow it."""

    code = "conflict"
    http_status = 409


class PayloadTooLarge(XceError):
    """The body or upload is bigger than the configured limit."""

    code = "payload_too_large"
    http_status = 413


class QuotaExceeded(PayloadTooLarge):
    """A per-user limit on stored bytes (staged uploads) would be passed."""

    code = "quota_exceeded"
    http_status = 413


class TooLarge(PayloadTooLarge):
    """A file that would pass one of the file store's limits (a per-file cap, the owner's
    upload quota, a job's outputs, the disk's reserve): refused from its Content-Length
    before its body is read, or cut off where a body of unknown length passes the limit.
    The message names the file, its size, the limit and the config key that sets it."""

    code = "too_large"
    http_status = 413


class DigestMismatch(InvalidRequest):
    """A file's body does not match the SHA-256 its sender declared: nothing was kept."""

    code = "digest_mismatch"


class RangeNotSatisfiable(XceError):
    """A download's Range asks for bytes the file does not have (or is malformed); the
    answer says the file's size, so a client resuming past the end learns it is done."""

    code = "range_not_satisfiable"
    http_status = 416

    def __init__(self, message: str, size: int) -> None:
        super().__init__(message)
        self.size = size

    @property
    def http_headers(self) -> dict[str, str]:
        return {"Content-Range": f"bytes */{self.size}"}


class Unavailable(XceError):
    """The controller cannot take writes right now (disk fault, not primary)."""

    code = "unavailable"
    http_status = 503


class Busy(Unavailable):
    """Every file-transfer slot stayed taken for as long as a request may wait: the client
    should come back after `retry_after_s` (other API requests are not affected)."""

    code = "busy"

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = max(1, retry_after_s)

    @property
    def http_headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


class NotPrimary(Unavailable):
    """This controller is not the primary (a standby, or a primary that lost its lease).

    Raised before any state changes, so a client may safely send the same request to the
    next candidate: the API marks the answer with `X-XCE-Not-Primary` for that reason.
    """

    code = "not_primary"
