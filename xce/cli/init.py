"""`xce init` (a new cluster directory, or a node joining one) and `xce token join`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from xce.client import XceClient
    from xce.setup.initdir import InitResult

from xce.cli.common import call, fail
from xce.cli.identity import token_app  # `xce token join` sits beside create/revoke


def _print_created(result: InitResult) -> None:
    d = result.cluster_dir
    first = result.controllers[0]
    typer.echo(f"Created cluster directory {d} (mode 0700)")
    typer.echo(f"  config:        {result.config}")
    typer.echo(f"  controllers:   {', '.join(result.controllers)}")
    typer.echo(f"  CA:            {d / 'tls' / 'ca.pem'} (sha256:{result.ca_sha256})")
    typer.echo(f"  admin token:   {result.admin_token_file} (0600)")
    typer.echo(f"  CLI settings:  export XCE_CLIENT_CONFIG={result.client_config}")
    typer.echo(f"  systemd units: {', '.join(str(u) for u in result.units)}")
    typer.echo("")
    typer.echo(
        f"Admin user '{result.admin_user}', password (shown only this once, stored as a "
        "scrypt hash):"
    )
    typer.echo(f"  {result.admin_password}")
    typer.echo("  (for `xce login`; the CLI settings above use the admin token instead)")
    typer.echo("")
    typer.echo("Start this node:  xce up --state-dir " + str(d))
    typer.echo(
        "  or with systemd: cp " + str(d / "systemd") + "/xce-{controller,worker}.service"
        " /etc/systemd/system/ && systemctl enable --now xce-controller xce-worker"
    )
    hours = (result.join_token.expires_at - time.time()) / 3600
    typer.echo(
        f"Join a worker (token valid {hours:.0f} h, single use; more with `xce token join`):"
    )
    typer.echo(
        f"  xce init /etc/xce --join {first} --token {result.join_token.token} "
        f"--ca-hash sha256:{result.ca_sha256}"
    )


def register(app: typer.Typer) -> None:
    @app.command()
    def init(
        directory: Path = typer.Argument(..., help="the cluster directory to create"),
        hosts: list[str] = typer.Option(
            None,
            "--host",
            help="controller host name or address (repeat; default: this "
            "host's FQDN); the first is the primary",
        ),
        port: int = typer.Option(6820, "--port", help="controller port"),
        listen: str = typer.Option("0.0.0.0", "--listen", help="controller listen address"),
        join: str = typer.Option(
            None, "--join", help="join the cluster at this controller URL instead of creating one"
        ),
        token: str = typer.Option(None, "--token", help="the one-time join token"),
        ca_hash: str = typer.Option(
            None, "--ca-hash", help="sha256:... of the cluster CA (printed with the token)"
        ),
        name: str = typer.Option(
            None, "--name", help="this node's name when joining (default: the host name)"
        ),
        allow_root_jobs: bool = typer.Option(
            False, "--allow-root-jobs", help="let jobs submitted by root run as root (trials only)"
        ),
        admin: str = typer.Option(
            None,
            "--admin",
            help="the first admin's login name (default: you; its jobs run as that OS account)",
        ),
    ) -> None:
        """Create a cluster directory (config, CA, certificates, admin, units), or with
        --join prepare a worker or standby from a one-time join token."""
        from xce.core.errors import XceError

        try:
            if join:
                if not token:
                    fail("--join needs --token (create one with `xce token join`)")
                from xce.setup.joinclient import join_cluster

                joined = join_cluster(directory, join, token, ca_hash, name, hosts)
                typer.echo(f"Prepared {joined.role} {joined.name} in {joined.cluster_dir}")
                typer.echo(f"  config:       {joined.config}")
                typer.echo(f"  controllers:  {', '.join(joined.controllers)}")
                typer.echo(f"  systemd unit: {joined.unit}")
                typer.echo(f"Start it: xce {joined.role} --config {joined.config}")
                return
            if token or ca_hash:
                fail("--token and --ca-hash are for --join")
            from xce.setup.initdir import default_hosts, init_cluster

            result = init_cluster(
                directory, list(hosts or default_hosts()), port, listen, allow_root_jobs, admin
            )
        except XceError as exc:
            fail(exc.message)
        except OSError as exc:
            fail(f"cannot write {directory}: {exc.strerror or exc}")
        _print_created(result)
        if result.admin_user == "root" and not allow_root_jobs:
            typer.echo(
                "note: jobs run as their submitter's account, and this cluster refuses "
                "jobs as root: submit as another user (`xce user add NAME`, `xce login "
                "NAME`), or give --admin NAME / --allow-root-jobs to init",
                err=True,
            )


@token_app.command("join")
def token_join(
    role: str = typer.Option("worker", "--role", help="worker or standby"),
    ttl: float = typer.Option(24.0, "--ttl-hours", help="hours until it expires"),
    controller: list[str] = typer.Option(
        None, "--controller", help="controller URL (repeat for candidates)"
    ),
) -> None:
    """Create a one-time join token (admin) and print the command a new node runs."""
    from xce.cli.common import client_settings

    async def run(client: XceClient) -> dict[str, Any]:
        return await client.request(
            "POST", "/api/v1/join/tokens", json={"role": role, "ttl_s": ttl * 3600}
        )

    answer = call(run, controller)
    url = client_settings(controller).controllers[0]
    typer.echo(
        f"Join token for a {answer['role']} (single use, expires "
        f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(answer['expires_at']))}):"
    )
    typer.echo(
        f"  xce init /etc/xce --join {url} --token {answer['token']} "
        f"--ca-hash sha256:{answer['ca_sha256']}"
    )
