"""`xce cluster status`: the controller candidates, which one is primary, replication lag.

The view comes from the primary's `GET /api/v1/cluster` (its `ha` part). When no primary
answers the API (a failover in progress, or only standbys up) the candidates' public
`/healthz` answers are shown instead and the exit code is 1; when nothing answers at all it
is one error line (exit 2), like every other command.

`--json` prints the same view as the table, in one shape for every case:
`{"source", "answering", "primary", "epoch", "mode", "degraded", "failover_timeout_s",
"candidates": [{"url", "rank", "role", "epoch", "seq", "lag_records", "reachable",
"error", "self"}], "standbys": [...], "history": [...]}`.
"""

from __future__ import annotations

from typing import Any

import typer

from xce.cli.common import call, print_json, print_table
from xce.client.cluster_view import fetch_view, reachable_text, summary_lines, unreachable_lines

app = typer.Typer(no_args_is_help=True)
CONTROLLER = typer.Option(None, "--controller", help="controller URL (repeat for candidates)")
HEADERS = ["URL", "RANK", "ROLE", "EPOCH", "SEQ", "LAG", "REACHABLE"]


def print_view(view: dict[str, Any]) -> None:
    rows = [
        [
            c["url"],
            c["rank"],
            c["role"],
            c["epoch"],
            c["seq"],
            c["lag_records"],
            reachable_text(c["reachable"]),
        ]
        for c in view["candidates"]
    ]
    print_table(HEADERS, rows)
    typer.echo("")
    for line in summary_lines(view):
        typer.echo(line)
    for line in unreachable_lines(view):
        typer.echo(line)


@app.command()
def status(
    as_json: bool = typer.Option(False, "--json"), controller: list[str] = CONTROLLER
) -> None:
    """Controller candidates: role, epoch, log position, lag; the primary and replication.

    Exit code 1 when no primary answers (the candidates' /healthz is shown then)."""
    view = call(fetch_view, controller)
    if as_json:
        print_json(view)
    else:
        print_view(view)
    if view["source"] == "healthz":
        raise typer.Exit(1)
