"""`xce init` (a new cluster directory, or a node joining one) and `xce token join`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from xce.client import XceClient
    from xce.setup.initdir import InitResult
    from xce.setup.siteconfig import SiteConfig

from xce.cli.common import call, fail
from xce.cli.identity import token_app  # `xce token join` sits beside create/revoke


def _print_created(result: InitResult, site: SiteConfig | None) -> None:
    d = result.cluster_dir
    first = result.controllers[0]
    typer.echo(f"Created cluster directory {d} (mode 0700)")
    typer.echo(f"  config:        {result.config}")
    typer.echo(f"  controllers:   {', '.join(result.controllers)}")
    typer.echo(f"  CA:            {d / 'tls' / 'ca.pem'} (sha256:{result.ca_sha256})")
    typer.echo(f"  admin token:   {result.admin_token_file} (0600)")
    typer.echo(f"  CLI settings:  export XCE_CLIENT_CONFIG={result.client_config}")
    typer.echo(f"  systemd units: {', '.join(str(u) for u in result.units)}")
    if site is not None:
        typer.echo(f"  site config:   {site.path} (0644: controllers and CA for every account)")
        if site.ca_file is not None:
            typer.echo(f"  public CA:     {site.ca_file} (0644, the certificate only)")
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
    also = f" --site-config {site.path}" if site is not None else ""
    typer.echo(
        f"  xce init {d} --join {first} --token {result.join_token.token} "
        f"--ca-hash sha256:{result.ca_sha256}{also}"
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
        site_config: Path = typer.Option(
            None,
            "--site-config",
            help="also write this site-wide client file (clients read /etc/xce/client.toml) "
            "with the controllers and a public copy of the CA beside it, for every account",
        ),
        munge_key: bool = typer.Option(
            False, "--munge-key", help="also make a MUNGE key for a site without one (0400)"
        ),
        munge_key_file: str = typer.Option(
            "/etc/munge/munge.key", "--munge-key-file", help="where --munge-key writes it"
        ),
    ) -> None:
        """Create a cluster directory (config, CA, certificates, admin, units), or with
        --join prepare a worker or standby from a one-time join token."""
        from xce.core.errors import XceError

        site: SiteConfig | None = None
        try:
            if site_config is not None:  # refused before anything is made, not after
                from xce.setup.siteconfig import check_site_path

                check_site_path(site_config, directory)
            if munge_key:  # xce/cli/munge_login.py; refused before anything is made
                from xce.cli.munge_login import check_key_path, write_key

                check_key_path(munge_key_file, joining=bool(join))
            if join:
                if not token:
                    fail("--join needs --token (create one with `xce token join`)")
                from xce.setup.joinclient import join_cluster

                joined = join_cluster(directory, join, token, ca_hash, name, hosts)
                site = _site(site_config, joined.cluster_dir, joined.controllers)
                typer.echo(f"Prepared {joined.role} {joined.name} in {joined.cluster_dir}")
                typer.echo(f"  config:       {joined.config}")
                typer.echo(f"  controllers:  {', '.join(joined.controllers)}")
                typer.echo(f"  systemd unit: {joined.unit}")
                if site is not None:
                    typer.echo(f"  site config:  {site.path} (0644, for every account)")
                typer.echo(f"Start it: xce {joined.role} --config {joined.config}")
                _closed_note(site)
                return
            if token or ca_hash:
                fail("--token and --ca-hash are for --join")
            from xce.setup.initdir import default_hosts, init_cluster

            result = init_cluster(
                directory, list(hosts or default_hosts()), port, listen, allow_root_jobs, admin
            )
            site = _site(site_config, result.cluster_dir, result.controllers)
        except XceError as exc:
            _password_kept(directory)
            fail(exc.message)
        except OSError as exc:
            _password_kept(directory)
            fail(f"cannot write {exc.filename or directory}: {exc.strerror or exc}")
        _print_created(result, site)
        if munge_key:
            write_key(munge_key_file)
        from xce.auth.bootstrap import password_shown

        password_shown(result.cluster_dir)
        _closed_note(site)
        if result.admin_user == "root" and not allow_root_jobs:
            typer.echo(
                "note: jobs run as their submitter's account, and this cluster refuses "
                "jobs as root: submit as another user (`xce user add NAME`, `xce login "
                "NAME`), or give --admin NAME / --allow-root-jobs to init",
                err=True,
            )


def _site(path: Path | None, cluster_dir: Path, controllers: tuple[str, ...]) -> SiteConfig | None:
    """Write the site-wide client file when asked, with the CA of an https cluster."""
    if path is None:
        return None
    from xce.setup.siteconfig import write_site_config

    ca = cluster_dir / "tls" / "ca.pem"
    return write_site_config(path, cluster_dir, controllers, ca if ca.is_file() else None)


def _closed_note(site: SiteConfig | None) -> None:
    if site is not None and site.closed:
        closed = ", ".join(str(d) for d in site.closed)
        typer.echo(
            f"note: other accounts cannot enter {closed}, so they cannot read {site.path}: "
            "give the folder o+x or put the site config elsewhere",
            err=True,
        )


def _password_kept(directory: Path) -> None:
    """After a failed init: where the admin password went if it was already made."""
    from xce.auth.bootstrap import PASSWORD_FILE, pending_password

    cluster_dir = directory.expanduser().resolve()
    if pending_password(cluster_dir) is not None:
        typer.echo(
            f"xce init: the new admin password is kept in {cluster_dir / PASSWORD_FILE} "
            "(mode 0600)",
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
    # The new node's directory: where the controller's own cluster directory is (the same
    # layout on every node), as the controller says; DIR from one that does not say.
    directory = answer.get("cluster_dir") or "DIR"
    typer.echo(
        f"Join token for a {answer['role']} (single use, expires "
        f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(answer['expires_at']))}):"
    )
    typer.echo(
        f"  xce init {directory} --join {url} --token {answer['token']} "
        f"--ca-hash sha256:{answer['ca_sha256']}"
    )
