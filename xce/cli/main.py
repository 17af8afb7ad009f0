"""The `xce` entry point: one executable, every role and every verb."""

from __future__ import annotations

import typer

from xce.cli import admin, hosts, jobs, queues, roles, tui_cmd

app = typer.Typer(
    name="xce",
    help="XCE cluster manager: controller, worker and the commands to drive them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
roles.register(app)
tui_cmd.register(app)
app.add_typer(jobs.app, name="job", help="Submit, list, show and control jobs.")
app.add_typer(queues.app, name="queue", help="List, create and switch queues.")
app.add_typer(hosts.app, name="host", help="List, show, open, close and drain hosts.")
app.add_typer(admin.app, name="admin", help="Offline maintenance: check and repair the WAL.")


def run() -> None:
    app()


if __name__ == "__main__":
    run()
