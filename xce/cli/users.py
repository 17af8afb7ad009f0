"""`xce user add|passwd|list|del`: the configfile backend's users.

Through the controller's API by default (needs user:admin, except changing your own
password); with `--file PATH` the users file is edited directly (locked, atomic), which is
how a cluster gets its first admin before any controller runs. Passwords come from a hidden
prompt or stdin, never from the command line.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer

from xce.cli.common import call, fail, print_json, print_table

app = typer.Typer(no_args_is_help=True)
CONTROLLER = typer.Option(None, "--controller", help="controller URL (repeat for candidates)")
FILE = typer.Option(None, "--file", help="edit this users file directly instead of the API")
T = TypeVar("T")


def _offline(action: Callable[[Any], T], path: Path) -> T:
    from xce.auth.backends.configfile import UsersFile
    from xce.core.errors import XceError

    try:
        return action(UsersFile(path))
    except XceError as exc:
        fail(exc.message)
    except OSError as exc:
        fail(f"cannot edit {path}: {exc.strerror}")
    raise AssertionError("unreachable")


@app.command()
def add(
    name: str,
    group: list[str] = typer.Option([], "--group", "-g", help="a group (repeat)"),
    role: list[str] = typer.Option([], "--role", "-r", help="a direct role (repeat)"),
    file: Path = FILE,
    controller: list[str] = CONTROLLER,
) -> None:
    """Add a user; the password is asked for (or read from stdin)."""
    from xce.cli.session import read_secret

    password = read_secret("password", confirm=True)
    if len(password) < 8:
        fail("the password must have at least 8 characters")
    if file is not None:
        _offline(lambda u: u.add(name, password, tuple(group), tuple(role)), file)
    else:
        call(
            lambda c: c.add_user(
                {"user": name, "password": password, "groups": group, "roles": role}
            ),
            controller,
        )
    typer.echo(f"User <{name}> is added")


@app.command()
def passwd(
    name: str = typer.Argument(None, help="the user (default: you)"),
    file: Path = FILE,
    controller: list[str] = CONTROLLER,
) -> None:
    """Change a password (your own, or anyone's with user:admin)."""
    from xce.cli.session import read_secret

    if name is None and file is not None:
        fail("with --file, name the user")
    old: str | None = None
    if file is None:
        who = call(lambda c: c.whoami(), controller)
        name = name or who["user"]
        if "user:admin" not in who.get("permissions", []):
            old = read_secret("current password")  # your own, like passwd(1)
    password = read_secret("new password", confirm=True)
    if len(password) < 8:
        fail("the password must have at least 8 characters")
    if file is not None:
        _offline(lambda u: u.set_password(name, password), file)
        typer.echo(
            f"Password of <{name}> is changed (in the file only: tokens issued earlier "
            f"stay valid until `xce token revoke {name}`)"
        )
        return
    answer = call(lambda c: c.set_password(name, password, old), controller)
    typer.echo(
        f"Password of <{name}> is changed; the tokens issued to {name} until now are revoked"
    )
    if isinstance(answer, dict) and answer.get("session"):
        from xce.cli.identity import _saved

        _saved(answer["session"])  # your own: the controller's fresh token replaces yours


@app.command("list")
def list_(
    as_json: bool = typer.Option(False, "--json"),
    file: Path = FILE,
    controller: list[str] = CONTROLLER,
) -> None:
    """List users with their groups and roles (never their password hashes)."""
    if file is not None:
        entries = _offline(lambda u: u.load(), file)
        users = [entries[n].public() for n in sorted(entries)]
    else:
        users = call(lambda c: c.users(), controller)
    if as_json:
        print_json(users)
    else:
        print_table(
            ["USER", "GROUPS", "ROLES"],
            [[u["user"], ",".join(u["groups"]), ",".join(_roles(u))] for u in users],
        )


def _roles(user: dict[str, Any]) -> list[str]:
    """The roles a login of this user gets: the controller says (`effective_roles`, with
    the config's group map and default roles); a users file read with --file has no config,
    so its entries without roles of their own show the built-in default, `user`."""
    from xce.core.rbac import RoleMap

    if "effective_roles" in user:
        return list(user["effective_roles"])
    return list(user["roles"]) or list(RoleMap().default_roles)


@app.command("del")
def delete(name: str, file: Path = FILE, controller: list[str] = CONTROLLER) -> None:
    """Delete a user (through the API their tokens are revoked as well)."""
    if file is not None:
        _offline(lambda u: u.delete(name), file)
    else:
        call(lambda c: c.delete_user(name), controller)
    typer.echo(f"User <{name}> is deleted")
