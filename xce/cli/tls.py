"""`xce tls ...`: create the cluster CA and the certificates of controllers and workers.

`init` makes (or reuses) the CA in DIR and issues `controller.pem` for the given host names
and addresses, plus one client certificate per `--worker` (or one shared `worker.pem`), then
prints the `[tls]` lines to paste into each role's config. `issue` adds one more certificate
later from the same CA. Keys are written 0600; copy ca.key nowhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from xce.auth.pki import CertPair

from xce.cli.common import fail

app = typer.Typer(no_args_is_help=True)
DIR = typer.Option(..., "--dir", help="where ca.pem, ca.key and the certificates go")


def _ca(directory: Path, name: str) -> CertPair:
    from xce.auth.pki import create_ca, load_ca

    if (directory / "ca.pem").exists() or (directory / "ca.key").exists():
        typer.echo(f"using the existing CA in {directory}")
        return load_ca(directory)
    typer.echo(f"created CA {directory / 'ca.pem'}")
    return create_ca(directory, name)


@app.command()
def init(
    directory: Path = DIR,
    hosts: list[str] = typer.Option(
        ..., "--host", help="controller host name or IP address (repeat)"
    ),
    workers: list[str] = typer.Option(
        None, "--worker", help="a worker host name: one client cert each"
    ),
    ca_name: str = typer.Option("XCE cluster CA", "--ca-name"),
) -> None:
    """Create the cluster CA (unless DIR has one) and controller and worker certificates."""
    from xce.auth.pki import issue_certificate
    from xce.core.errors import XceError

    try:
        ca = _ca(directory, ca_name)
        controller = issue_certificate(ca, directory, "controller", hosts, client=True)
        typer.echo(f"issued {controller.cert_path} for {', '.join(hosts)}")
        issued = []
        for name in workers or ["worker"]:
            pair = issue_certificate(ca, directory, name, [name], client=True)
            issued.append(pair)
            typer.echo(f"issued {pair.cert_path} (client certificate for worker {name})")
    except (XceError, OSError) as exc:
        fail(str(exc))
    d = directory.resolve()
    typer.echo(f"""
# controller config:
[tls]
cert_file = "{d / "controller.pem"}"
key_file = "{d / "controller.key"}"
ca_file = "{d / "ca.pem"}"
# require_client_cert = "workers"   # mutual TLS for worker routes

# worker config ({issued[0].cert_path.stem}):
[tls]
cert_file = "{issued[0].cert_path}"
key_file = "{issued[0].key_path}"
ca_file = "{d / "ca.pem"}"

# CLI (~/.config/xce/client.toml): ca_file = "{d / "ca.pem"}\"""")


@app.command()
def issue(
    directory: Path = DIR,
    name: str = typer.Option(..., "--name", help="file name stem: NAME.pem, NAME.key"),
    hosts: list[str] = typer.Option(..., "--host", help="host name or IP address (repeat)"),
    client: bool = typer.Option(False, "--client", help="also valid as a client certificate"),
) -> None:
    """Issue one more certificate from the CA in DIR."""
    from xce.auth.pki import issue_certificate, load_ca
    from xce.core.errors import XceError

    try:
        pair = issue_certificate(load_ca(directory), directory, name, hosts, client=client)
    except (XceError, OSError) as exc:
        fail(str(exc))
    typer.echo(f"issued {pair.cert_path} and {pair.key_path}")
