"""`xce admin ...`: offline maintenance of a controller's state directory, the audit log,
each user's usage of the controller's file store, and handing the primary role over
(switchover)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xce.client import XceClient

from pathlib import Path

import typer

from xce.cli.common import fail

app = typer.Typer(no_args_is_help=True)
STATE_DIR = typer.Option(..., "--state-dir", help="the controller's state directory")


@app.command("wal-check")
def wal_check(state_dir: Path = STATE_DIR) -> None:
    """Verify checkpoints and every WAL record; exit 1 if the log is damaged, 2 if a newer
    build wrote it (this build cannot judge it)."""
    from xce.store.repair import check

    if not state_dir.is_dir():
        fail(f"{state_dir} is not a directory")
    report = check(state_dir)
    for line in report.checkpoints or ["no checkpoints"]:
        typer.echo(f"checkpoint  {line}")
    typer.echo(f"segments    {report.segments}")
    for line in report.newer:
        typer.echo(f"NEWER       {line}")
    if report.newer:
        raise typer.Exit(2)  # not damage: a newer build's state
    if report.corruption is not None:
        typer.echo(f"DAMAGED     {report.corruption.message}")
        raise typer.Exit(1)
    typer.echo(f"records     {report.records} (last {report.last_seq})")
    typer.echo(f"torn tail   {report.torn or 'none'}")
    typer.echo("ok")


@app.command("wal-repair")
def wal_repair(
    state_dir: Path = STATE_DIR,
    yes: bool = typer.Option(False, "--yes", help="really cut the log"),
) -> None:
    """Cut the WAL at its first damaged record (drops everything after it; the removed
    segments are kept beside the log as *.broken files)."""
    from xce.core.errors import XceError
    from xce.store.repair import check, repair

    report = check(state_dir)
    if report.newer:
        fail(f"{report.newer[0]}; nothing was cut")
    if report.corruption is not None and not yes:
        typer.echo(report.corruption.message)
        fail("this drops every record after the damage; run again with --yes to do it")
    try:
        for line in repair(state_dir):
            typer.echo(line)
    except XceError as exc:
        fail(exc.message)


@app.command("audit")
def audit(
    user: str = typer.Option(None, "--user", "-u", help="only this user's actions"),
    action: str = typer.Option(None, "--action", "-a", help="action or prefix (job, job.kill)"),
    obj: str = typer.Option(None, "--object", "-o", help="one object, e.g. job:17"),
    outcome: str = typer.Option(None, "--outcome", help="ok, denied or failed"),
    offset: int = typer.Option(0, "--offset"),
    limit: int = typer.Option(100, "--limit"),
    as_json: bool = typer.Option(False, "--json"),
    controller: list[str] = typer.Option(None, "--controller", help="controller URL"),
) -> None:
    """Read the audit log (needs cluster:admin): who did what to which object."""
    import time

    from xce.cli.common import call, print_json, print_table

    page = call(
        lambda c: c.audit(
            user=user, action=action, object=obj, outcome=outcome, offset=offset, limit=limit
        ),
        controller,
    )
    if as_json:
        print_json(page)
        return
    print_table(
        ["TIME", "USER", "ACTION", "OBJECT", "OUTCOME", "FROM", "DETAIL"],
        [
            [
                time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["ts"])),
                r["user"],
                r["action"],
                r["object"],
                r["outcome"],
                r["remote"],
                r["detail"],
            ]
            for r in page["records"]
        ],
    )
    shown = len(page["records"])
    if page["total"] > offset + shown:
        typer.echo(f"({shown} of {page['total']}; --offset {offset + shown} for more)", err=True)


@app.command("files")
def files(
    user: str = typer.Option(None, "--user", "-u", help="only this user"),
    as_json: bool = typer.Option(False, "--json"),
    controller: list[str] = typer.Option(None, "--controller", help="controller URL"),
) -> None:
    """What each user's uploads and job files hold on the controller, against the quota
    (needs file:admin), largest first."""
    from xce.cli.common import call, print_json, print_table
    from xce.store.room import amount

    page = call(lambda c: c.file_usage(user), controller)
    if as_json:
        print_json(page)
        return
    print_table(
        ["USER", "FILES", "BYTES", "SIZE", "QUOTA", "USED"],
        [
            [
                r["user"],
                r["files"],
                r["bytes"],
                amount(r["bytes"]),
                amount(r["quota_bytes"]),
                f"{r['used_pct']:.1f}%",
            ]
            for r in page["users"]
        ],
    )


@app.command("switchover")
def switchover(
    to: str = typer.Option(
        None,
        "--to",
        help="the standby to hand over to (its URL in "
        "cluster.controllers); default: any caught-up standby",
    ),
    controller: list[str] = typer.Option(
        None, "--controller", help="controller URL (repeat for candidates)"
    ),
) -> None:
    """Hand the primary role to a caught-up standby, losing nothing (needs cluster:admin).

    Writes pause while the standby takes the last records; clients follow the new primary.
    Waits until the new primary answers as primary and prints its epoch."""
    import asyncio
    import time

    from xce.cli.common import call
    from xce.client import ApiError

    async def run(client: XceClient) -> tuple[dict[str, Any], dict[str, Any] | None]:
        answer = await client.switchover(to)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                health = await client.health(answer["primary"])
            except ApiError:
                health = {}
            if health.get("role") == "primary":
                return answer, health
            await asyncio.sleep(0.2)
        return answer, None

    answer, health = call(run, controller)
    if health is None:
        typer.echo(
            f"Primary role handed from {answer['previous']} to {answer['primary']} "
            f"(epoch {answer['epoch']} ended)"
        )
        fail(f"{answer['primary']} does not answer as primary yet; see xce cluster status")
    typer.echo(
        f"Primary role moved from {answer['previous']} to {answer['primary']} "
        f"(epoch {health.get('epoch', answer['epoch'])})"
    )


@app.command("selfcheck", hidden=True)
def selfcheck_command() -> None:
    """Load every bundled data file (schemas, templates, stylesheets); exit 1 if one fails."""
    from xce.cli.selfcheck import selfcheck

    selfcheck()
