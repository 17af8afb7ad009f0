"""`xce job modify` (bmod / scontrol update job) and `xce job priority` (sprio).

Registered on the `job` group by xce/cli/jobs.py; the controller validates everything
(xce/controller/modify.py), so a refusal prints its one-line message.
"""

from __future__ import annotations

from typing import Any

import typer

from xce.cli.common import call_light, fail, print_json, print_table
from xce.client.errors import job_path

CONTROLLER = typer.Option(None, "--controller", help="controller URL (repeat for candidates)")
_NONE = ("none", "")


def modify(
    job_id: str = typer.Argument(..., help="a job, or a whole array by its number"),
    priority: int = typer.Option(None, "--priority", help="0..max; users: at most the default"),
    queue: str = typer.Option(None, "--queue", "-q"),
    walltime: str = typer.Option(
        None, "--walltime", "-W", help="minutes, H:MM[:SS], 90s, 2h; none clears (admins)"
    ),
    slots: int = typer.Option(None, "--slots", "-n"),
    memory: int = typer.Option(None, "--mem", "-M", help="memory in MB"),
    resources: str = typer.Option(None, "--resources", "-R", help="none clears"),
    dependency: str = typer.Option(None, "--dependency", "-d", help="none clears"),
    name: str = typer.Option(None, "--name", "-J"),
    hold: bool = typer.Option(False, "--hold", help="hold the pending job (PSUSP)"),
    release: bool = typer.Option(False, "--release", help="release a held job"),
    defer: bool = typer.Option(
        False, "--defer", help="skip the check that a registered host can run it"
    ),
    as_json: bool = typer.Option(False, "--json"),
    controller: list[str] = CONTROLLER,
) -> None:
    """Change a pending job (priority, queue, walltime, slots, memory, -R, dependency, name,
    hold) or a running one (name; walltime by operators and admins)."""
    from xce.cli.jobs import parse_walltime

    body: dict[str, Any] = {}
    for key, value in (
        ("priority", priority),
        ("queue", queue),
        ("slots", slots),
        ("memory_mb", memory),
        ("name", name),
    ):
        if value is not None:
            body[key] = value
    if hold and release:
        fail("give --hold or --release, not both", 2)
    if hold or release:
        body["hold"] = hold
    if walltime is not None:
        body["walltime_s"] = None if walltime.lower() in _NONE else parse_walltime(walltime)
    for key, text in (("resources", resources), ("dependency", dependency)):
        if text is not None:
            body[key] = None if text.lower() in _NONE else text
    if not body:
        fail("nothing to modify: give at least one option (see --help)", 2)
    if defer:
        body["defer"] = True
    result = call_light(
        lambda c: c.request("PATCH", f"/api/v1/jobs/{job_path(job_id)}", json_body=body), controller
    )
    if as_json:
        print_json(result)
    elif result.get("changed"):
        typer.echo(f"Parameters of job <{job_id}> are being changed.")
    else:
        typer.echo(f"Job <{job_id}> already had those parameters.")


def priority(
    user: str = typer.Option(None, "--user", "-u"),
    queue: str = typer.Option(None, "--queue", "-q"),
    as_json: bool = typer.Option(False, "--json"),
    controller: list[str] = CONTROLLER,
) -> None:
    """Each pending job's multifactor priority and its factors (like sprio)."""
    params = {k: v for k, v in (("user", user), ("queue", queue)) if v}
    result = call_light(lambda c: c.request("GET", "/api/v1/priority", params=params), controller)
    if as_json:
        print_json(result)
        return
    w = result["weights"]
    typer.echo(
        f"weights: queue {w['queue']:g}, job {w['job']:g}, age {w['age']:g}, "
        f"fairshare {w['fairshare']:g}, size {w['size']:g}"
    )
    rows = [
        [
            r["job_id"],
            r["user"],
            r["queue"],
            r["order"],
            f"{r['priority']:.1f}",
            r["job_priority"],
            *(f"{r['factors'][k]:.4f}" for k in ("queue", "job", "age", "fairshare", "size")),
        ]
        for r in result["jobs"]
    ]
    print_table(
        [
            "JOBID",
            "USER",
            "QUEUE",
            "ORDER",
            "PRIORITY",
            "NICE",
            "QUEUE_F",
            "JOB_F",
            "AGE_F",
            "FAIRSHARE_F",
            "SIZE_F",
        ],
        rows,
    )
