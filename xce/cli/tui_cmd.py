"""`xce tui`: the full-screen console. Textual is imported only when the command runs.

The console connects with exactly the CLI's client settings (`client_settings`: candidates,
token, the CA file and client certificate of client.toml, the insecure switch), so a cluster
made by `xce init` (https:// with its own CA) works in the console as it does in the CLI.
"""

from __future__ import annotations

from typing import Any

import typer

from xce.cli.common import ClientSettings, async_client, client_settings, fail


def console_app(settings: ClientSettings, login: bool = False) -> Any:
    """The console for these settings (also what tests drive headless)."""
    from xce.console.app import XceTui

    return XceTui(
        settings.controllers, settings.token, login=login, client=async_client(settings, timeout=10)
    )


def register(app: typer.Typer) -> None:
    @app.command()
    def tui(
        controller: list[str] = typer.Option(
            None, "--controller", help="controller URL (repeat for the candidate list)"
        ),
        login: bool = typer.Option(False, "--login", help="show the login screen first"),
    ) -> None:
        """Open the full-screen console (jobs, queues, hosts, cluster)."""
        settings = client_settings(controller)
        from xce.core.errors import XceError

        try:
            console = console_app(settings, login)
        except XceError as exc:  # a CA file that cannot be read, plain http off loopback
            fail(exc.message)
        code = console.run()
        if console.return_code not in (0, None):
            fail(f"the console stopped (exit {console.return_code})", console.return_code or 1)
        raise typer.Exit(code or 0)
