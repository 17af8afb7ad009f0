"""What every CLI command shares: finding the controllers, the token, errors, tables.

Client settings come, in order, from: the command line (`--controller`), the environment
(`XCE_CONTROLLERS`, `XCE_TOKEN`), the token `xce login` saved (`token` beside the client
file), the client file (`XCE_CLIENT_CONFIG`, default `~/.config/xce/client.toml`, written by
`xce up`, whose `token_file` names a token). Errors are one line on stderr and a non-zero
exit code, never a traceback.
"""

from __future__ import annotations

import json
import os
import sys
import tomllib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import typer

T = TypeVar("T")


def client_config_path() -> Path:
    env = os.environ.get("XCE_CLIENT_CONFIG")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "xce" / "client.toml"


@dataclass
class ClientSettings:
    controllers: list[str]
    token: str | None
    # TLS: the cluster CA that https:// controllers must chain to, an optional client
    # certificate, and the development switch that allows http:// off loopback.
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    insecure: bool = False


def fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"xce: error: {message}", err=True)
    raise typer.Exit(code)


def client_settings(controllers: Sequence[str] | None = None) -> ClientSettings:
    urls = list(controllers or [])
    token = os.environ.get("XCE_TOKEN") or None
    file_data: dict[str, Any] = {}
    path = client_config_path()
    if path.exists():
        try:
            file_data = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            fail(f"cannot read client config {path}: {exc}")
    if not urls and os.environ.get("XCE_CONTROLLERS"):
        urls = [u.strip() for u in os.environ["XCE_CONTROLLERS"].split(",") if u.strip()]
    if not urls:
        urls = list(file_data.get("controllers", []))
    if not urls:
        from xce.config.settings import DEFAULT_PORT

        urls = [f"http://127.0.0.1:{DEFAULT_PORT}"]
    if token is None:
        from xce.cli.session import saved_token

        token = saved_token()
    if token is None and file_data.get("token_file"):
        token_path = Path(str(file_data["token_file"])).expanduser()
        try:
            token = token_path.read_text().strip() or None
        except OSError as exc:
            fail(f"cannot read token file {token_path}: {exc.strerror}")
    if token is None and not controllers and (local := local_socket(file_data)) is not None:
        urls = [f"unix:{local}"]  # on the controller's host: the kernel says who we are
    ca_file, cert_file, key_file = _tls_files(file_data, path)
    return ClientSettings(urls, token, ca_file, cert_file, key_file, insecure=_insecure(file_data))


DEFAULT_SOCKET = "/run/xce/xce.sock"


def local_socket(file_data: dict[str, Any]) -> str | None:
    """The controller's local socket when this host has one: `XCE_SOCKET`, else `socket` in
    client.toml, else /run/xce/xce.sock. Used when no token is configured (and no
    controller was named on the command line): no login, no password."""
    import stat

    path = os.environ.get("XCE_SOCKET") or str(file_data.get("socket") or DEFAULT_SOCKET)
    try:
        return path if stat.S_ISSOCK(os.stat(path).st_mode) else None
    except OSError:
        return None


def _tls_files(data: dict[str, Any], path: Path) -> tuple[Path | None, Path | None, Path | None]:
    """ca_file, cert_file, key_file from client.toml (relative to it); XCE_CA_FILE wins."""
    out: list[Path | None] = []
    for key in ("ca_file", "cert_file", "key_file"):
        raw = data.get(key)
        if raw is not None and not isinstance(raw, str):
            fail(f"{path}: {key} must be a string path")
        out.append((path.parent / Path(raw).expanduser()) if raw else None)
    if os.environ.get("XCE_CA_FILE"):
        out[0] = Path(os.environ["XCE_CA_FILE"]).expanduser().resolve()
    return out[0], out[1], out[2]


def _insecure(data: dict[str, Any]) -> bool:
    env = os.environ.get("XCE_INSECURE", "").strip().lower()
    return env in ("1", "true", "yes") or data.get("insecure") is True


def async_client(settings: ClientSettings, **options: Any) -> Any:
    """The failover-aware `XceClient` with exactly the CLI's settings (candidates, token, CA
    file, client certificate, insecure switch): the console builds its client here too."""
    from xce.auth.contexts import client_ssl_context
    from xce.client.http import XceClient

    return XceClient(
        settings.controllers,
        settings.token,
        ssl_context=client_ssl_context(settings),
        insecure=settings.insecure,
        **options,
    )


def call(fn: Callable[..., Awaitable[T]], controllers: Sequence[str] | None = None) -> T:
    """Run `fn(client)` against the cluster, turning API errors into one-line messages."""
    import asyncio

    settings = client_settings(controllers)

    async def main() -> T:
        async with async_client(settings) as client:
            return await fn(client)

    return _one_line_errors(lambda: asyncio.run(main()))


def call_light(fn: Callable[[Any], T], controllers: Sequence[str] | None = None) -> T:
    """Like `call`, for one-shot commands: `fn(client)` gets the blocking `LightClient`
    (standard library only), so the command starts without asyncio and aiohttp."""
    from xce.auth.contexts import client_ssl_context
    from xce.client.light import LightClient

    settings = client_settings(controllers)

    def main() -> T:
        with LightClient(
            settings.controllers,
            settings.token,
            ssl_context=client_ssl_context(settings),
            insecure=settings.insecure,
        ) as client:
            return fn(client)

    return _one_line_errors(main)


def _one_line_errors(run: Callable[[], T]) -> T:
    from xce.client.errors import ApiError
    from xce.core.errors import XceError

    try:
        return run()
    except ApiError as exc:
        fail(exc.message, 2 if exc.status == 0 else 1)
    except XceError as exc:
        fail(exc.message)
    except OSError as exc:
        fail(str(exc))
    raise AssertionError("unreachable")


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A plain aligned table like bjobs/squeue print: no colour, safe to pipe."""
    cells = [[("-" if v is None or v == "" else str(v)) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, value in enumerate(row):
            widths[i] = max(widths[i], len(value))
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in cells:
        lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    sys.stdout.write("\n".join(lines) + "\n")


def show_record(record: dict[str, Any], as_json: bool) -> None:
    """What every `show` prints: the JSON document, or its fields one per line."""
    if as_json:
        print_json(record)
    else:
        print_fields(record)


def print_fields(record: dict[str, Any]) -> None:
    """`key: value` lines, nested mappings indented, lists comma-separated, multi-line text
    indented below its key; empty values shown as `-`."""
    for key, value in record.items():
        if isinstance(value, dict) and value:
            typer.echo(f"{key}:")
            for k, v in value.items():
                typer.echo(f"  {k}: {_plain(v)}")
        elif isinstance(value, str) and "\n" in value.strip():
            typer.echo(f"{key}:")
            for line in value.rstrip("\n").split("\n"):
                typer.echo(f"  | {line}")
        else:
            text = _plain(value)
            typer.echo(f"{key}:{text}" if text.startswith("\n") else f"{key}: {text}")


def _plain(value: Any) -> str:
    if value in (None, "", [], {}):
        return "-"
    if isinstance(value, list | tuple) and any(" " in str(v) or isinstance(v, dict) for v in value):
        return "".join(f"\n  {_plain(v)}" for v in value)
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def name_action(
    noun: str,
    action: str,
    past: str,
    send: Callable[[Any, str, str], Awaitable[Any]],
    with_reason: bool = False,
) -> Callable[..., None]:
    """A `xce <noun> <action> NAME...` command: `send(client, name, reason)` for each name."""
    controller_option = typer.Option(
        None, "--controller", help="controller URL (repeat for candidates)"
    )

    def run_all(names: list[str], reason: str, controller: list[str] | None) -> None:
        async def run(client: Any) -> None:
            for name in names:
                await send(client, name, reason)

        call(run, controller)
        for name in names:
            typer.echo(f"{noun.capitalize()} <{name}> is {past}")

    def command_with_reason(
        names: list[str] = typer.Argument(...),
        reason: str = typer.Option("", "--reason", "-r"),
        controller: list[str] = controller_option,
    ) -> None:
        run_all(names, reason, controller)

    def command_plain(
        names: list[str] = typer.Argument(...),
        controller: list[str] = controller_option,
    ) -> None:
        run_all(names, "", controller)

    # two signatures because typer reads the options from the parameters
    command: Callable[..., None] = command_with_reason if with_reason else command_plain
    command.__doc__ = f"{action.capitalize()} {noun}s."
    return command
