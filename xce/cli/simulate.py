"""`xce simulate TRACE.swf --policy fcfs|first-fit|easy|fairshare|PLUGIN,...`."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from xce.cli.common import fail


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate_command)


def simulate_command(
    trace: Path = typer.Argument(..., help="SWF trace (18 fields, ';' comments, .gz allowed)"),
    policy: str = typer.Option("easy", "--policy", "-p",
                               help="fcfs, first-fit, easy, fairshare, fairshare-group, or "
                                    "a comma-separated plugin list such as 'fairshare,pack'"),
    hosts: int = typer.Option(1, "--hosts", help="identical hosts to simulate"),
    slots: int = typer.Option(0, "--slots",
                              help="slots per host (default: the trace's MaxProcs / hosts, "
                                   "else its largest job)"),
    half_life: float = typer.Option(3600.0, "--half-life",
                                    help="fairshare usage half-life, seconds"),
    as_json: bool = typer.Option(False, "--json", help="print the metrics as JSON"),
) -> None:
    """Replay a workload trace through the scheduler in virtual time and print metrics."""
    from xce.sched.simulate import simulate
    from xce.sched.swf import SwfError, read_swf

    if hosts < 1:
        fail("--hosts must be at least 1")
    try:
        loaded = read_swf(trace)
    except OSError as exc:
        fail(f"cannot read {trace}: {exc.strerror or exc}")
    except SwfError as exc:
        fail(f"{trace}: {exc}")
    per_host = slots or (loaded.max_procs or max((j.procs for j in loaded.jobs), default=1)) \
        // hosts
    if per_host < 1:
        fail("--slots must be at least 1")
    try:
        result = simulate(loaded.jobs, hosts, per_host, policy, half_life, loaded.skipped)
    except ValueError as exc:
        fail(str(exc))
    metrics = result.metrics()
    if as_json:
        typer.echo(json.dumps(metrics, indent=2))
        return
    rows = [
        ("policy", f"{policy} (plugins: {', '.join(result.plugins) or 'defaults'})"),
        ("cluster", f"{hosts} host(s) x {per_host} slots"),
        ("jobs", f"{metrics['jobs']} ({metrics['skipped']} skipped, {metrics['killed']} "
                 "killed at their requested time)"),
        ("avg wait", f"{metrics['avg_wait_s']:.1f} s"),
        ("avg bsld", f"{metrics['avg_bounded_slowdown']:.3f} (tau 10 s)"),
        ("utilisation", f"{100 * metrics['utilisation']:.1f} %"),
        ("makespan", f"{metrics['makespan_s']:.0f} s"),
        ("simulated", f"{metrics['passes']} passes in {metrics['sim_seconds']:.2f} s "
                      f"({metrics['jobs_per_s']:.0f} jobs/s)"),
    ]
    for name, value in rows:
        typer.echo(f"{name:<12} {value}")
