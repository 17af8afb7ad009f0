"""Tokens without passwords on MUNGE sites: the CLI logs in with a credential from munged.

Where the site's or the user's client file says `auth = "munge"` (or `XCE_AUTH=munge`), a
command that has no token, or whose saved token is about to expire or is refused (401), asks
the node's munged for a credential (`xce.auth.munge.login_credential`), trades it for a token
at `POST /api/v1/auth/munge` and saves it where `xce login` does (`xce.cli.session`), then
goes on; the user types nothing. `xce login --munge` does the same on request.

Why a setting and no detection: a node may run munged for another scheduler (a Slurm site
trying XCE), and guessing from the socket would cost every command a round trip to a
controller that has no MUNGE backend, and hide why a command was refused. An admin who sets
`auth = "munge"` in the site's client file says this cluster's users come in this way.

What is never replaced: `XCE_TOKEN`, a client file's `token_file` (an admin's choice), and a
saved token of another user name (a password login, e.g. `xce login admin`): that one
expires with its usual message. On the controller's host with its local socket, the kernel
already vouches for the user, and MUNGE is not asked.

The hot path costs nothing new: `client_settings` only notes how to renew (`attach`), and a
token's expiry is read from its claims (no signature check: the controller checks) just
before the command runs; libmunge and ctypes are loaded only when a credential is made.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from xce.cli.common import ClientSettings

T = TypeVar("T")
MODES = ("munge", "token")  # `auth` in client.toml: MUNGE when needed, or tokens only
RENEW_BEFORE_S = 120.0  # renew a token that expires this soon, so a command does not outlive it
TIMEOUT_S = 10.0  # the login's own requests: a controller that does not answer fails fast


def attach(settings: ClientSettings, mode: str) -> None:
    """Called by `client_settings` when `auth` (or `XCE_AUTH`) is set: where MUNGE may get
    this command its token, set `settings.renew` (run by `run_renewing`)."""
    from xce.cli.common import fail

    if mode not in MODES:
        fail(
            f"auth in the client file (or XCE_AUTH) must be one of {', '.join(MODES)}, got {mode!r}"
        )
    if mode != "munge" or os.environ.get("XCE_TOKEN"):
        return
    if settings.controllers[0].startswith("unix:"):
        return  # the controller's local socket: the kernel says who we are
    if settings.token is not None:
        from xce.cli.session import saved_token

        if settings.token != saved_token():
            return  # token_file: the admin's choice
    settings.renew = partial(renew, settings, munge_socket())


def run_renewing(settings: ClientSettings, run: Callable[[], T]) -> T:
    """`run()` with a token MUNGE got where the saved one is missing or about to expire, and
    once more with a fresh one when the controller refuses the token (401 `unauthorized`).

    A missing token that MUNGE cannot get now is not yet an error: the command may need
    none (`xce login NAME`); should the controller refuse it, the MUNGE failure is the
    message. A controller that cannot be reached fails at once, as the command would."""
    from xce.client.errors import ApiError
    from xce.core.errors import XceError

    renew_token = settings.renew
    if renew_token is None:
        return run()
    failure: Exception | None = None
    fresh = False
    if _stale(settings.token):
        try:
            settings.token, fresh = renew_token(), True
        except ApiError as exc:
            if exc.status == 0:
                raise
            failure = exc
        except XceError as exc:
            failure = exc
    try:
        return run()
    except ApiError as exc:
        if exc.status != 401 or exc.code != "unauthorized":
            raise
        if failure is not None:
            raise failure from None
        if fresh:
            raise  # a token MUNGE got a moment ago is refused: another would be too
    settings.token = renew_token()
    return run()


def renew(settings: ClientSettings, socket: str | None) -> str:
    """A fresh token from MUNGE for this uid, saved for the next commands. Refuses to replace
    a saved token of another user name (see the module docstring)."""
    from xce.core.errors import XceError

    if settings.token is not None and _claims(settings.token).get("sub") != _me():
        raise XceError(
            "the saved token is not this account's (a password login?) and MUNGE may not "
            "replace it; run xce login again, or xce logout to use MUNGE"
        )
    session = login(settings, socket)
    from xce.cli.session import save_token

    with contextlib.suppress(OSError):  # a read-only home: this command still has its token
        save_token(session["token"])
    return str(session["token"])


def explicit_login(controllers: list[str] | None) -> dict[str, Any]:
    """`xce login --munge`: a session from MUNGE whatever `auth` says; errors are one line."""
    from xce.cli.common import _one_line_errors, client_settings

    settings = client_settings(controllers)
    socket = munge_socket()
    return _one_line_errors(lambda: login(settings, socket))


def munge_socket() -> str | None:
    """munged's socket on this node: `XCE_MUNGE_SOCKET`, else libmunge's default (None).
    An environment variable rather than a client file key: packaged munged listens where
    libmunge looks, so only unusual nodes (and tests) need it, and the CLI reads it without
    parsing anything."""
    from xce.cli.common import fail

    value = os.environ.get("XCE_MUNGE_SOCKET") or None
    if value is not None and not value.startswith("/"):
        fail(f"XCE_MUNGE_SOCKET must be an absolute path, got {value!r}")
    return value


def login(settings: ClientSettings, socket: str | None) -> dict[str, Any]:
    """Ask the controller what to put in a credential, make one, and trade it for a session
    (`{"token", "expires_at", "user", "roles", ...}`). Raises `ApiError` / `XceError`."""
    from xce.auth import munge
    from xce.auth.contexts import client_ssl_context
    from xce.client.light import LightClient
    from xce.core.errors import XceError

    with LightClient(
        settings.controllers,
        None,  # no token: the login routes need none, and a stale one would be refused
        timeout=TIMEOUT_S,
        ssl_context=client_ssl_context(settings),
        insecure=settings.insecure,
        ca_note=settings.ca_note(),
    ) as client:
        info = client.request("GET", "/api/v1/auth/munge")
        audience = info.get("audience") if isinstance(info, dict) else None
        if not isinstance(audience, str):
            raise XceError("the controller's answer to GET /api/v1/auth/munge has no audience")
        try:
            credential = munge.login_credential(audience, socket)
        except munge.MungeError as exc:
            where = socket or munge.DEFAULT_SOCKET
            raise XceError(f"MUNGE login failed: {exc.message} (munged at {where})") from None
        session: dict[str, Any] = client.request(
            "POST", "/api/v1/auth/munge", json_body={"credential": credential}
        )
        return session


def _stale(token: str | None) -> bool:
    """No token, or one whose `exp` claim is within `RENEW_BEFORE_S` (or unreadable)."""
    if token is None:
        return True
    exp = _claims(token).get("exp")
    return not isinstance(exp, int | float) or exp - time.time() < RENEW_BEFORE_S


def _claims(token: str) -> dict[str, Any]:
    """A JWT's claims, unverified ({} when it is not one): only to decide when to renew."""
    try:
        part = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    except (IndexError, ValueError):
        return {}
    return claims if isinstance(claims, dict) else {}


def _me() -> str | None:
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return None


def check_key_path(path: str, joining: bool = False) -> None:
    """`xce init --munge-key`, before anything is made: a key already there is kept, and a
    node joining a cluster takes the cluster's key rather than making its own."""
    from xce.cli.common import fail

    if joining:
        fail("--munge-key makes a new site key; a joining node gets a copy of the cluster's")
    if os.path.lexists(path):
        fail(
            f"{path} exists: a MUNGE key is never replaced (every node must hold the same "
            "one); copy it to the other nodes, or remove it first to make a new one"
        )


def write_key(path: str) -> None:
    """`xce init --munge-key`: a new MUNGE key for a site without one, and what comes next."""
    import typer

    from xce.auth.munge import create_key
    from xce.cli.common import fail

    try:
        owner = create_key(path)
    except FileExistsError:
        check_key_path(path)
        raise
    except OSError as exc:
        fail(f"cannot write the MUNGE key {path}: {exc.strerror or exc}")
    typer.echo(f"  MUNGE key:     {path} (0400, owner {owner}; copy it to every node)")
    typer.echo(
        '  MUNGE logins:  start munged on every node, add [[auth.backend]] type = "munge" '
        'to the config, and auth = "munge" to the site\'s client file'
    )
