"""The token `xce login` saves for the CLI (and the TUI): one 0600 file beside client.toml.

`login_token_path()` is `<client config folder>/token` (so `XCE_CLIENT_CONFIG` moves it too).
A saved token wins over the client file's `token_file` and loses to `XCE_TOKEN`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from xce.auth.files import atomic_write, private_dir
from xce.cli.common import client_config_path, fail


def login_token_path() -> Path:
    return client_config_path().parent / "token"


def saved_token() -> str | None:
    path = login_token_path()
    try:
        return path.read_text().strip() or None
    except FileNotFoundError:
        return None
    except OSError as exc:
        fail(f"cannot read the saved token {path}: {exc.strerror}")
    return None


def save_token(token: str) -> Path:
    path = login_token_path()
    try:
        private_dir(path.parent)
        atomic_write(path, (token + "\n").encode(), 0o600)
    except OSError as exc:
        # The folder of a client file this user does not own (XCE_CLIENT_CONFIG naming a
        # site-wide file, say): one line naming it, not a traceback.
        fail(
            f"cannot save the login token as {path}: {exc.strerror} (it goes beside the client "
            f"settings file {client_config_path()}; XCE_CLIENT_CONFIG moves both, "
            "XCE_SITE_CONFIG names a site-wide file)"
        )
    return path


def forget_token() -> bool:
    path = login_token_path()
    if path.exists():
        path.unlink()
        return True
    return False


def read_secret(prompt: str, confirm: bool = False) -> str:
    """A password from the terminal (hidden) or, when stdin is not a terminal, its first
    line; never from the command line, where `ps` and shell history would show it."""
    if sys.stdin.isatty():
        value = typer.prompt(prompt, hide_input=True, confirmation_prompt=confirm)
    else:
        value = sys.stdin.readline().rstrip("\n")
    if not value:
        fail("no password given (type it at the prompt or pipe it on stdin)")
    return value
