"""`xce rsv add|list|del`: advance reservations, like LSF's `brsvadd` / `brs` / `brsvdel`
(and Slurm's `scontrol create|show|delete reservation`).

Times: `now`, `+DURATION` from now (`+30m`, `+2h`, `+1d`, `+90s`), epoch seconds, a date or
time `YYYY-MM-DD[THH:MM[:SS]]` or `HH:MM` in the user's local time, as `--begin` and `xce
acct` read them (xce/core/timespec.py; acct's ages count back, these forward). Durations
are read like `--walltime` (minutes, H:MM, 90s, 2h). Listings print local times, as the
other listings do.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

import typer

from xce.cli.common import call_light, fail, print_json, print_table

app = typer.Typer(no_args_is_help=True)
CONTROLLER = typer.Option(None, "--controller", help="controller URL (repeat for candidates)")


def parse_moment(option: str, text: str, now: float) -> float:
    """A time in the user's local time (xce/core/timespec.py's rule, as `--begin` reads it);
    a one-line error naming `option` otherwise."""
    from xce.core.errors import InvalidRequest
    from xce.core.timespec import parse_time

    try:
        return parse_time(text, now, local=True, what=option)
    except InvalidRequest as e:
        fail(str(e))
        raise  # unreachable: fail exits


def _names(text: str | None) -> list[str]:
    return [w.strip() for w in (text or "").split(",") if w.strip()]


def _local(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at))


@app.command("add")
def add(
    name: str = typer.Argument(..., help="the reservation's name"),
    hosts: str = typer.Option(..., "--hosts", "-m", help="host names, comma-separated"),
    start: str = typer.Option(
        "now",
        "--start",
        "-b",
        help="now, +2h, epoch seconds, YYYY-MM-DD[THH:MM] or HH:MM (local time)",
    ),
    end: str = typer.Option(None, "--end", "-e", help="as --start; or give --duration"),
    duration: str = typer.Option(None, "--duration", "-d", help="minutes, H:MM, H:MM:SS, 90s, 2h"),
    slots: int = typer.Option(
        0, "--slots", "-n", help="slots reserved on each host (default: whole hosts)"
    ),
    users: str = typer.Option(
        None, "--users", "-u", help="users and @groups who may run in it, comma-separated"
    ),
    maintenance: bool = typer.Option(
        False, "--maintenance", help="for nobody: keep every job off the hosts"
    ),
    flags: str = typer.Option(
        None,
        "--flags",
        help="overlap (may share hosts and time), ignore_jobs (made even if running jobs "
        "will still be running in it)",
    ),
    description: str = typer.Option("", "--description"),
    as_json: bool = typer.Option(False, "--json"),
    controller: list[str] = CONTROLLER,
) -> None:
    """Reserve hosts (or slots on each) for a time window (brsvadd)."""
    from xce.cli.jobs import parse_walltime

    if (end is None) == (duration is None):
        fail("give exactly one of --end and --duration")
    if maintenance and users:
        fail("--maintenance is for nobody: give no --users")
    if not maintenance and not users:
        fail("give --users (names and @groups) or --maintenance")
    if slots < 0:
        fail("--slots may not be negative")
    now = time.time()
    begin = parse_moment("--start", start, now)
    body: dict[str, Any] = {
        "name": name,
        "hosts": _names(hosts),
        "start": begin,
        "slots": slots,
        "users": _names(users),
        "maintenance": maintenance,
        "flags": _names(flags),
        "description": description,
    }
    if end is not None:
        body["end"] = parse_moment("--end", end, now)
    else:
        body["duration_s"] = parse_walltime(duration)
    made = call_light(
        lambda c: c.request("POST", "/api/v1/reservations", json_body=body), controller
    )
    if as_json:
        print_json(made)
    else:
        typer.echo(
            f"Reservation {made['name']} is created "
            f"({_local(made['start'])} - {_local(made['end'])})"
        )


@app.command("list")
def list_(
    as_json: bool = typer.Option(False, "--json"), controller: list[str] = CONTROLLER
) -> None:
    """List reservations (brs): waiting, active and ended ones."""
    found = call_light(lambda c: c.request("GET", "/api/v1/reservations"), controller)[
        "reservations"
    ]
    if as_json:
        print_json(found)
        return
    print_table(
        ["RSVID", "STATE", "HOSTS", "SLOTS", "START", "END", "USERS", "FLAGS"],
        [
            [
                r["name"],
                r["state"],
                ",".join(r["hosts"]),
                r["slots"] or "all",
                _local(r["start"]),
                _local(r["end"]),
                "maintenance" if r["maintenance"] else ",".join(r["users"]),
                ",".join(r["flags"]) or "-",
            ]
            for r in found
        ],
    )


@app.command("del")
def delete(
    names: list[str] = typer.Argument(..., help="reservation names"),
    controller: list[str] = CONTROLLER,
) -> None:
    """Delete reservations (brsvdel); jobs that target one stay pending, saying so."""

    def run(client: Any) -> None:
        for name in names:
            client.request("DELETE", f"/api/v1/reservations/{quote(name, safe='')}")
            typer.echo(f"Reservation {name} is deleted")

    call_light(run, controller)
