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


class Unavailable(XceError):
    """The controller cannot take writes right now (disk fault, not primary)."""

    code = "unavailable"
    http_status = 503


class NotPrimary(Unavailable):
    """This controller is not the primary (a standby, or a primary that lost its lease).

    Raised before any state changes, so a client may safely send the same request to the
    next candidate: the API marks the answer with `X-XCE-Not-Primary` for that reason.
    """

    code = "not_primary"
