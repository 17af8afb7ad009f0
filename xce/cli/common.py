"""What every CLI command shares: finding the controllers, the token, errors, tables.

Client settings come, in order, from: the command line (`--controller`), the environment
(`XCE_CONTROLLERS`, `XCE_TOKEN`, `XCE_CA_FILE`, ...), the token `xce login` saved (`token`
beside the client file), the user's client file (`XCE_CLIENT_CONFIG`, default
`~/.config/xce/client.toml`, written by `xce up`, whose `token_file` names a token), and last
the site's client file (`XCE_SITE_CONFIG`, default `/etc/xce/client.toml`, written by `xce
init --site-config`): it gives every account of a node the controllers and the cluster CA,
which the 0700 cluster directory cannot, and fills only what the user's own settings leave
unset. Errors are one line on stderr and a non-zero exit code, never a traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tomllib
from collections.abc import Awaitable, Callable, Iterator, Sequence
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


SITE_CONFIG = Path("/etc/xce/client.toml")


def site_config_path() -> Path | None:
    """The site's client file: `XCE_SITE_CONFIG`, default /etc/xce/client.toml; None when
    the variable is set but empty (no site file, e.g. for tests or a private setup)."""
    env = os.environ.get("XCE_SITE_CONFIG")
    if env is None:
        return SITE_CONFIG
    return Path(env).expanduser() if env else None


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
    # Where ca_file came from ("XCE_CA_FILE", "ca_file in PATH"), or why there is none: a
    # certificate that does not verify is then reported with the setting to change.
    ca_source: str = ""
    # File transfers fail after this long without a byte moving, never for their length
    # (`transfer_idle_timeout_s` in client.toml, `XCE_TRANSFER_IDLE_TIMEOUT_S`).
    transfer_idle_timeout_s: float = 60.0
    # Gets a fresh token when this one is missing, expiring or refused (`auth = "munge"`:
    # xce/cli/munge_login.py); None: the token is used as it is.
    renew: Callable[[], str] | None = None

    def ca_note(self) -> str:
        """The CA part of a TLS failure's one-line message (`xce.client.errors.ca_note`)."""
        from xce.client.errors import ca_note

        return ca_note(self.ca_file, self.ca_source)


# What the message is about, put before it (`jobs.txt:7: ` while `xce job submit --batch`
# reads that line): the checks a command shares with its batch form then name the line.
_ABOUT: list[str] = []


@contextlib.contextmanager
def about(where: str) -> Iterator[None]:
    """`fail` and `warn` messages inside this block start with `where`."""
    _ABOUT.append(where)
    try:
        yield
    finally:
        _ABOUT.pop()


def fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"xce: error: {''.join(_ABOUT)}{message}", err=True)
    raise typer.Exit(code)


def warn(message: str) -> None:
    typer.echo(f"xce: warning: {''.join(_ABOUT)}{message}", err=True)


def client_settings(controllers: Sequence[str] | None = None) -> ClientSettings:
    urls = list(controllers or [])
    token = os.environ.get("XCE_TOKEN") or None
    path = client_config_path()
    user_data = _read_client_file(path) or {}
    site_path = site_config_path()
    site_data = _read_client_file(site_path, site=True) if site_path is not None else {}
    # Key by key, the user's file wins; each value remembers its file (relative paths).
    origin = {key: site_path for key in site_data or {}} | {key: path for key in user_data}
    file_data: dict[str, Any] = {**(site_data or {}), **user_data}
    if not urls and os.environ.get("XCE_CONTROLLERS"):
        urls = [u.strip() for u in os.environ["XCE_CONTROLLERS"].split(",") if u.strip()]
    if not urls:
        urls = list(file_data.get("controllers", []))
    if not urls:
        from xce.config.ports import DEFAULT_PORT

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
    ca_file, cert_file, key_file = _tls_files(file_data, origin)
    if os.environ.get("XCE_CA_FILE"):
        source = "XCE_CA_FILE"
    elif ca_file is not None:
        source = f"ca_file in {origin['ca_file']}; XCE_CA_FILE overrides it"
    else:
        source = _no_ca(path, site_path, site_data)
    settings = ClientSettings(
        urls,
        token,
        ca_file,
        cert_file,
        key_file,
        insecure=_insecure(file_data),
        transfer_idle_timeout_s=_transfer_idle(file_data),
        ca_source=source,
    )
    if (auth := os.environ.get("XCE_AUTH") or file_data.get("auth")) is not None:
        from xce.cli.munge_login import attach  # `auth = "munge"`: tokens without passwords

        attach(settings, str(auth))
    return settings


def _read_client_file(path: Path, site: bool = False) -> dict[str, Any] | None:
    """A client file's table, {} when it does not exist. The user's own file must be
    readable; a site file this account may not read (it lies in a private 0700 cluster
    directory, e.g.) is skipped as None, and a TLS failure says so."""
    try:
        text = path.read_text()
    except (FileNotFoundError, NotADirectoryError):
        return {}
    except PermissionError:
        if site:
            return None
        fail(f"cannot read client config {path}: permission denied")
    except OSError as exc:
        fail(f"cannot read {'site ' if site else ''}client config {path}: {exc.strerror or exc}")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        fail(f"cannot read {'site ' if site else ''}client config {path}: {exc}")


def _no_ca(user: Path, site: Path | None, site_data: dict[str, Any] | None) -> str:
    """Where a CA file would have been found, for the message of a TLS failure."""
    if site is None:
        return f"ca_file in {user} or XCE_CA_FILE; XCE_SITE_CONFIG is empty"
    if site_data is None:
        return f"ca_file in {user} or XCE_CA_FILE; the site config {site} is not readable"
    return f"ca_file in {user} or {site}, or XCE_CA_FILE"


DEFAULT_SOCKET = "/run/xce/xce.sock"


def local_socket(file_data: dict[str, Any]) -> str | None:
    """The controller's local socket when this host has one: `XCE_SOCKET`, else `socket` in
    client.toml, else /run/xce/xce.sock. Used when no token is configured (and no
    controller was named on the command line): no login, no password."""
    import socket
    import stat

    path = os.environ.get("XCE_SOCKET") or str(file_data.get("socket") or DEFAULT_SOCKET)
    try:
        if not stat.S_ISSOCK(os.stat(path).st_mode):
            return None
    except OSError:
        return None
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # a socket left by a stopped
    try:  # controller is not one: the configured controllers are tried instead
        probe.connect(path)
    except OSError:
        return None
    finally:
        probe.close()
    return path


def _tls_files(
    data: dict[str, Any], origin: dict[str, Path | None]
) -> tuple[Path | None, Path | None, Path | None]:
    """ca_file, cert_file, key_file from the client files (each relative to the file that
    set it); XCE_CA_FILE wins."""
    out: list[Path | None] = []
    for key in ("ca_file", "cert_file", "key_file"):
        raw = data.get(key)
        base = origin.get(key) or Path("client.toml")
        if raw is not None and not isinstance(raw, str):
            fail(f"{base}: {key} must be a string path")
        out.append((base.parent / Path(raw).expanduser()) if raw else None)
    if os.environ.get("XCE_CA_FILE"):
        out[0] = Path(os.environ["XCE_CA_FILE"]).expanduser().resolve()
    return out[0], out[1], out[2]


def _transfer_idle(data: dict[str, Any]) -> float:
    from xce.client.transfer import DEFAULT_IDLE_TIMEOUT_S, IDLE_TIMEOUT_ENV, idle_timeout_setting

    try:
        if os.environ.get(IDLE_TIMEOUT_ENV):
            return idle_timeout_setting(os.environ[IDLE_TIMEOUT_ENV], IDLE_TIMEOUT_ENV)
        value = data.get("transfer_idle_timeout_s", DEFAULT_IDLE_TIMEOUT_S)
        return idle_timeout_setting(value, "transfer_idle_timeout_s in client.toml")
    except ValueError as exc:
        fail(str(exc))


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
        ca_note=settings.ca_note(),
        transfer_idle_timeout_s=settings.transfer_idle_timeout_s,
        **options,
    )


def call(fn: Callable[..., Awaitable[T]], controllers: Sequence[str] | None = None) -> T:
    """Run `fn(client)` against the cluster, turning API errors into one-line messages."""
    import asyncio

    settings = client_settings(controllers)

    async def main() -> T:
        async with async_client(settings) as client:
            return await fn(client)

    return _one_line_errors(lambda: _renewing(settings, lambda: asyncio.run(main())))


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
            ca_note=settings.ca_note(),
            transfer_idle_timeout_s=settings.transfer_idle_timeout_s,
        ) as client:
            return fn(client)

    return _one_line_errors(lambda: _renewing(settings, main))


def _renewing(settings: ClientSettings, run: Callable[[], T]) -> T:
    """`run()`, renewing the token first or on a 401 where `settings.renew` can."""
    if settings.renew is None:
        return run()
    from xce.cli.munge_login import run_renewing

    return run_renewing(settings, run)


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
