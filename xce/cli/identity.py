"""`xce login|logout|whoami` and `xce token create|revoke|rotate-key`."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import typer

from xce.cli.common import call, fail, print_json

CONTROLLER = typer.Option(None, "--controller", help="controller URL (repeat for candidates)")
token_app = typer.Typer(no_args_is_help=True)


def register(app: typer.Typer) -> None:
    @app.command()
    def login(
        user: str = typer.Argument(None, help="user name (asked when left out)"),
        device: bool = typer.Option(
            False,
            "--device",
            help="sign in with the OpenID Connect "
            "provider on another device (a code to enter; for SSH)",
        ),
        browser: bool = typer.Option(
            False,
            "--browser",
            help="sign in with the OpenID Connect provider in a browser on this machine",
        ),
        wait_s: int = typer.Option(
            300, "--timeout", help="--browser: seconds to wait for the browser's redirect"
        ),
        munge: bool = typer.Option(
            False,
            "--munge",
            help="log in as this account with a MUNGE credential from this node's munged "
            "(no password)",
        ),
        controller: list[str] = CONTROLLER,
    ) -> None:
        """Log in (user name and password, OIDC with --device/--browser, or MUNGE with
        --munge); saves the token (0600) for the CLI and TUI."""
        if device + browser + munge > 1:
            fail("--device, --browser and --munge are ways to sign in; pick one")
        if (device or browser or munge) and user:
            fail("the identity provider says who you are; leave out the user name")
        if munge:
            from xce.cli.munge_login import explicit_login

            _saved(explicit_login(controller))
            return
        if device:
            from xce.cli.oidc_login import device_login

            _saved(call(device_login, controller))
            return
        if browser:
            from xce.cli.oidc_browser import browser_login

            _saved(call(lambda c: browser_login(c, wait_s), controller))
            return
        from xce.cli.session import read_secret

        name = user or typer.prompt("user")
        password = read_secret("password")
        _saved(call(lambda c: c.login(name, password), controller))

    @app.command()
    def logout() -> None:
        """Forget the saved login token (it stays valid until it expires; `xce token revoke
        USER` ends every token of a user at once)."""
        from xce.cli.session import forget_token, login_token_path

        if forget_token():
            typer.echo(f"Logged out (removed {login_token_path()})")
        else:
            typer.echo("Not logged in")

    @app.command()
    def whoami(
        as_json: bool = typer.Option(False, "--json"), controller: list[str] = CONTROLLER
    ) -> None:
        """Who the controller thinks you are: user, groups, roles and permissions."""
        who = call(lambda c: c.whoami(), controller)
        if as_json:
            print_json(who)
            return
        typer.echo(f"user:        {who['user']} ({who['kind']})")
        typer.echo(f"groups:      {', '.join(who['groups']) or '-'}")
        typer.echo(f"roles:       {', '.join(who['roles']) or '-'}")
        typer.echo(f"permissions: {' '.join(who['permissions']) or '-'}")


def _saved(session: dict[str, Any]) -> None:
    """Save a login's token where the CLI and TUI read it, and say who logged in."""
    from xce.cli.session import save_token

    path = save_token(session["token"])
    hours = (session["expires_at"] - time.time()) / 3600
    typer.echo(
        f"Logged in as {session['user']} (roles {', '.join(session['roles'])}); "
        f"token saved in {path}, valid {hours:.1f} h"
    )
    if os.environ.get("XCE_TOKEN"):
        typer.echo(
            "note: XCE_TOKEN is set and wins over the saved token; unset it to use this login",
            err=True,
        )


@token_app.command("create")
def create(
    name: str = typer.Argument(..., help="the worker or standby name"),
    service: str = typer.Option(..., "--service", help="worker or standby"),
    ttl_days: int = typer.Option(0, "--ttl-days", help="lifetime (default: the cluster's)"),
    out: Path = typer.Option(None, "--out", help="write the token to this file (0600)"),
    controller: list[str] = CONTROLLER,
) -> None:
    """Create a long-lived service token (needs user:admin); put it in worker.token_file."""
    if service not in ("worker", "standby"):
        fail(f"--service must be worker or standby, got {service!r}")
    made = call(lambda c: c.service_token(name, service, ttl_days * 86400 or None), controller)
    if out is not None:
        from xce.auth.files import atomic_write

        atomic_write(out, (made["token"] + "\n").encode(), 0o600)
        typer.echo(f"Service token for {service} {name} written to {out}")
    else:
        typer.echo(made["token"])


@token_app.command("revoke")
def revoke(user: str, controller: list[str] = CONTROLLER) -> None:
    """Revoke every token issued to USER (or service NAME) until now."""
    call(lambda c: c.revoke(user), controller)
    typer.echo(f"Tokens of {user} are revoked; they must log in again")


@token_app.command("rotate-key")
def rotate_key(controller: list[str] = CONTROLLER) -> None:
    """Start signing with a new key; tokens signed with the old one stay valid until expiry."""
    rotated = call(lambda c: c.rotate_key(), controller)
    typer.echo(f"Signing key is now {rotated['kid']} (was {rotated['previous']})")
