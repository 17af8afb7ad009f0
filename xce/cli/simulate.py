"""`xce simulate TRACE.swf --policy easy [--policy fairshare,backfill] [--detail] [--csv F]
[--chart]`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from xce.cli.common import fail
from xce.sched.sim.swf import CHOICES

HELP = (
    "Replay a workload trace through the scheduler in virtual time and print metrics "
    "(average and median wait, average bounded slowdown with tau 10 s, utilisation, "
    "makespan); several --policy options are compared side by side.\n\n"
    "How the SWF trace is read (Parallel Workloads Archive conventions):\n\n"
    + "\n\n".join(f"- {choice}" for choice in CHOICES)
)


def register(app: typer.Typer) -> None:
    app.command("simulate", help=HELP)(simulate_command)


def simulate_command(
    trace: Path = typer.Argument(..., help="SWF trace (18 fields, ';' comments, .gz allowed)"),
    policy: list[str] = typer.Option(
        ["easy"],
        "--policy",
        "-p",
        help="fcfs, first-fit, easy, fairshare, fairshare-group, predictive, or a "
        "comma-separated plugin list such as 'fairshare,pack'; repeat to compare policies",
    ),
    hosts: int = typer.Option(1, "--hosts", help="identical hosts to simulate"),
    slots: int = typer.Option(
        0,
        "--slots",
        help="slots per host (default: the trace's MaxProcs, else "
        "MaxNodes, else its largest job, / hosts)",
    ),
    gpus_per_host: int = typer.Option(
        0,
        "--gpus-per-host",
        help="GPUs of each host (jobs ask theirs in the trace's "
        "optional 19th field or with --gpus-per-job)",
    ),
    gpus_per_job: int = typer.Option(
        0, "--gpus-per-job", help="GPUs every job of the trace asks (unless its 19th field says)"
    ),
    half_life: float = typer.Option(
        3600.0, "--half-life", help="fairshare usage half-life, seconds"
    ),
    no_estimate: str = typer.Option(
        "runtime",
        "--no-estimate",
        help="a job without a requested time: 'runtime' (its run time is its estimate, the "
        "usual convention) or 'infinite' (no limit)",
    ),
    detail: bool = typer.Option(
        False, "--detail", help="also break wait and slowdown down by job size and run time"
    ),
    csv_path: Path | None = typer.Option(
        None, "--csv", metavar="FILE", help="write each job's submit, start and end times"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the metrics as JSON"),
    chart: bool = typer.Option(
        False,
        "--chart",
        help="also draw each policy's queue length and utilisation over virtual time, "
        "side by side, at the terminal's size",
    ),
    reservation: list[str] = typer.Option(
        [],
        "--reservation",
        "-r",
        metavar="FROM-TO[@HOST,...][/SLOTS]",
        help="a maintenance reservation, seconds after the first submit: no job runs into "
        "it on those hosts (all by default; whole hosts unless SLOTS); repeatable",
    ),
) -> None:
    from xce.sched.sim.inputs import parse_reservation, plugins_for
    from xce.sched.sim.simulate import simulate
    from xce.sched.sim.swf import NO_ESTIMATE, SwfError, read_swf

    if hosts < 1:
        fail("--hosts must be at least 1")
    if chart and as_json:
        fail("--json and --chart are one output each: choose one", 2)
    if gpus_per_host < 0 or gpus_per_job < 0:
        fail("--gpus-per-host and --gpus-per-job must be 0 or more")
    if no_estimate not in NO_ESTIMATE:
        fail(f"--no-estimate must be one of {', '.join(NO_ESTIMATE)}, got {no_estimate!r}")
    for name in policy:
        try:
            plugins_for(name)
        except ValueError as exc:
            fail(str(exc))
    try:
        loaded = read_swf(trace, no_estimate)
    except OSError as exc:
        fail(f"cannot read {trace}: {exc.strerror or exc}")
    except SwfError as exc:
        fail(f"{trace}: {exc}")
    if gpus_per_job:
        import dataclasses

        loaded.jobs = [
            j if j.gpus else dataclasses.replace(j, gpus=gpus_per_job) for j in loaded.jobs
        ]
    per_host = (
        slots or (loaded.max_procs or max((j.procs for j in loaded.jobs), default=1)) // hosts
    )
    if per_host < 1:
        fail("--slots must be at least 1")
    origin = loaded.jobs[0].submit if loaded.jobs else 0.0
    try:
        reservations = [
            parse_reservation(text, i + 1, origin, hosts) for i, text in enumerate(reservation)
        ]
    except ValueError as exc:
        fail(str(exc))
    handle = None
    if csv_path is not None:
        try:
            handle = csv_path.open("w", newline="", encoding="utf-8")
        except OSError as exc:
            fail(f"cannot write {csv_path}: {exc.strerror or exc}")
    results = []
    try:
        for name in policy:
            with _progress(
                name,
                sum(
                    1
                    for j in loaded.jobs
                    if j.procs <= per_host * hosts
                    and j.gpus <= gpus_per_host
                    and not (j.gpus and j.procs > per_host)
                ),
            ) as tick:
                result = simulate(
                    loaded.jobs,
                    hosts,
                    per_host,
                    name,
                    half_life,
                    loaded.skipped,
                    progress=tick,
                    gpus_per_host=gpus_per_host,
                    reservations=reservations,
                )
            results.append(result)
            if handle is not None:
                result.write_csv(handle, header=len(results) == 1)
    finally:
        if handle is not None:
            handle.close()
    metrics = [r.metrics() for r in results]
    if detail:
        for m, r in zip(metrics, results, strict=True):
            m["by_size"] = r.detail()
            m["by_run_time"] = r.detail_by_run_time()
    if as_json:
        typer.echo(json.dumps(metrics[0] if len(metrics) == 1 else metrics, indent=2))
        return
    _print_table(metrics, hosts, per_host, gpus_per_host)
    if detail:
        for m in metrics:
            _print_breakdown(f"{m['policy']}: by job size (slots)", "size", m["by_size"])
            _print_breakdown(f"{m['policy']}: by run time", "run_time", m["by_run_time"])
    if chart:
        _draw(results)


# (unit, seconds) for the time axis: the largest whose span reads as more than a few of them
_UNITS = (("days", 86400.0), ("hours", 3600.0), ("minutes", 60.0))


def _draw(results: list[Any]) -> None:
    """Each policy's queue length and utilisation over virtual time, two line charts side
    by side at the terminal's size (xce/cli/report_chart.py), colour only on a terminal."""
    import shutil

    from xce.cli import report_chart

    series = {r.policy: r.series() for r in results}
    span = max((s.times[-1] for s in series.values() if s.times), default=0.0)
    unit, seconds = next(((u, n) for u, n in _UNITS if span >= 4 * n), ("seconds", 1.0))

    def lines(values: str, scale: float) -> dict[str, tuple[list[float], list[float]]]:
        return {
            policy: ([t / seconds for t in s.times], [v * scale for v in getattr(s, values)])
            for policy, s in series.items()
        }

    x_label = f"{unit} after the first submit"
    size = shutil.get_terminal_size()
    try:
        text = report_chart.series_text(
            [
                ("queued jobs", x_label, lines("queued", 1.0)),
                ("utilisation %", x_label, lines("utilisation", 100.0)),
            ],
            size.columns,
            size.lines - 2,
            sys.stdout.isatty(),
            y_max=(None, 100.0),
        )
    except ImportError as exc:
        fail(f"--chart needs {exc.name or 'plotext'} installed")
    typer.echo("")
    sys.stdout.write(text)


def _print_breakdown(title: str, key: str, rows: list[dict[str, Any]]) -> None:
    typer.echo(f"\n{title}")
    typer.echo(
        f"{'class':<10} {'jobs':>8} {'avg wait s':>12} {'median s':>10} {'max wait s':>12} "
        f"{'avg bsld':>9}"
    )
    for row in rows:
        typer.echo(
            f"{row[key]:<10} {row['jobs']:>8} {row['avg_wait_s']:>12.1f} "
            f"{row['median_wait_s']:>10.1f} {row['max_wait_s']:>12.1f} "
            f"{row['avg_bounded_slowdown']:>9.3f}"
        )


def _print_table(metrics: list[dict[str, Any]], hosts: int, per_host: int, gpus: int = 0) -> None:
    def policy(m: dict[str, Any]) -> str:
        return f"{m['policy']} ({', '.join(m['plugins']) or 'defaults'})"

    rows: list[tuple[str, list[str]]] = [
        ("policy", [policy(m) for m in metrics]),
        (
            "cluster",
            [
                f"{hosts} host(s) x {per_host} slots" + (f" and {gpus} GPUs" if gpus else "")
                for _ in metrics
            ],
        ),
        (
            "jobs",
            [
                f"{m['jobs']} ({m['skipped']} skipped, {m['killed']} killed at their "
                "requested time)"
                for m in metrics
            ],
        ),
        ("avg wait", [f"{m['avg_wait_s']:.1f} s" for m in metrics]),
        ("median wait", [f"{m['median_wait_s']:.1f} s" for m in metrics]),
        ("avg bsld", [f"{m['avg_bounded_slowdown']:.3f} (tau 10 s)" for m in metrics]),
        ("utilisation", [f"{100 * m['utilisation']:.1f} %" for m in metrics]),
        ("makespan", [f"{m['makespan_s']:.0f} s" for m in metrics]),
        (
            "simulated",
            [
                f"{m['passes']} passes in {m['sim_seconds']:.2f} s ({m['jobs_per_s']:.0f} jobs/s)"
                for m in metrics
            ],
        ),
    ]
    if len(metrics) == 1:
        for name, (value,) in rows:
            typer.echo(f"{name:<12} {value}")
        return
    widths = [max(len(values[i]) for _, values in rows) for i in range(len(metrics))]
    for name, values in rows:
        typer.echo(
            f"{name:<12} "
            + "  ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip()
        )


class _progress:
    """A rich progress bar on a terminal (stderr), nothing otherwise."""

    def __init__(self, policy: str, total: int) -> None:
        self.policy, self.total = policy, total
        self.bar: Any = None

    def __enter__(self) -> Any:
        if not sys.stderr.isatty():
            return None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

        self.bar = Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self.bar.start()
        task = self.bar.add_task(f"simulating {self.policy}", total=self.total)
        return lambda done: self.bar.update(task, completed=done)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()
