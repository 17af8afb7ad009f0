"""The `xce` entry point: one executable, every role and every verb."""

from __future__ import annotations

import typer

from xce.cli import acct, admin, cluster, hosts, identity, jobs, queues, roles, tls, tui_cmd, users
from xce.cli import init as init_cli
from xce.cli import simulate as simulate_cli

app = typer.Typer(
    name="xce",
    help="XCE cluster manager: controller, worker and the commands to drive them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from xce import __version__

        typer.echo(f"xce {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                 help="Print the version and exit."),
) -> None:
    """XCE cluster manager: controller, worker and the commands to drive them."""


roles.register(app)
simulate_cli.register(app)
init_cli.register(app)
tui_cmd.register(app)
acct.register(app, jobs.app)
app.add_typer(jobs.app, name="job", help="Submit, list, show and control jobs.")
app.add_typer(queues.app, name="queue", help="List, create and switch queues.")
app.add_typer(hosts.app, name="host", help="List, show, open, close and drain hosts.")
app.add_typer(cluster.app, name="cluster",
              help="Controller candidates: which is primary, epochs, replication lag.")
app.add_typer(admin.app, name="admin",
              help="Maintenance: check and repair the WAL; read the audit log; switchover.")
identity.register(app)
app.add_typer(users.app, name="user", help="Add, list, delete users; change passwords.")
app.add_typer(identity.token_app, name="token",
              help="Service and join tokens, revocation, key rotation.")
app.add_typer(tls.app, name="tls", help="Create the cluster CA and TLS certificates.")


def run() -> None:
    app()


if __name__ == "__main__":
    run()
