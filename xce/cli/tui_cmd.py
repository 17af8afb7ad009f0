"""`xce tui`: the full-screen console. Textual is imported only when the command runs."""

from __future__ import annotations

import typer

from xce.cli.common import client_settings, fail


def register(app: typer.Typer) -> None:
    @app.command()
    def tui(
        controller: list[str] = typer.Option(
            None, "--controller", help="controller URL (repeat for the candidate list)"),
        login: bool = typer.Option(False, "--login", help="show the login screen first"),
    ) -> None:
        """Open the full-screen console (jobs, queues, hosts, cluster)."""
        settings = client_settings(controller)
        from tui.app import XceTui

        app = XceTui(settings.controllers, settings.token, login=login)
        code = app.run()
        if app.return_code not in (0, None):
            fail(f"the console stopped (exit {app.return_code})", app.return_code or 1)
        raise typer.Exit(code or 0)
