"""`xce acct` (sacct), `xce report` (sreport / bacct -u) and `xce job eff` (seff).

All three read the controller's accounting store through `/api/v1/accounting/...` with the
light client (`call_light`: standard library HTTP, no asyncio or aiohttp) and take the CLI's
fast path (`xce/cli/fast.py`; `acct` and `report` are top-level verbs, `FAST_VERBS` in
`xce/cli/main.py`), so they start like `xce job list` instead of building the Typer tree; times
(`-S`, `-E`: epoch seconds, `2026-12-01[T08:00]`, `2026-12`, `HH:MM` or an age such as `30d`)
are read in the user's local time, as sacct reads them, and sent as epoch seconds
(xce/core/timespec.py, the rule `--begin` and `xce rsv` follow).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import typer

from xce.cli.common import call_light, fail, print_json

CONTROLLER = typer.Option(None, "--controller", help="controller URL (repeat for candidates)")


def _hms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = round(seconds)
    days, s = divmod(s, 86400)
    text = f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{days}-{text}" if days else text


def _when(at: float | None) -> str:
    return "-" if at is None else time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at))


def _size(n: float | None) -> str:
    if not n:
        return "0"
    for unit in ("B", "K", "M", "G", "T"):
        if n < 1024 or unit == "T":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.2f}{unit}"
        n /= 1024
    return str(n)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _exit(r: dict[str, Any]) -> str:
    if r.get("exit_code") is None and r.get("exit_signal") is None:
        return "-"
    return (
        f"{r.get('exit_code') if r.get('exit_code') is not None else '-'}:"
        f"{r.get('exit_signal') or 0}"
    )


# sacct-like column names -> (header, value of a record)
COLUMNS: dict[str, tuple[str, Any]] = {
    "jobid": ("JobID", lambda r: r["job_id"]),
    "attempt": ("Attempt", lambda r: r["attempt"]),
    "jobname": ("JobName", lambda r: r["name"]),
    "user": ("User", lambda r: r["user"]),
    "group": ("Group", lambda r: r["grp"]),
    "queue": ("Queue", lambda r: r["queue"]),
    "state": ("State", lambda r: r["state"]),
    "exitcode": ("ExitCode", _exit),
    "reason": ("Reason", lambda r: r["reason"]),
    "submit": ("Submit", lambda r: _when(r["submit_time"])),
    "eligible": ("Eligible", lambda r: _when(r.get("eligible_time"))),
    "start": ("Start", lambda r: _when(r["start_time"])),
    "end": ("End", lambda r: _when(r["end_time"])),
    "wait": ("Wait", lambda r: _hms(r["wait_s"])),
    "elapsed": ("Elapsed", lambda r: _hms(r["wall_s"])),
    "nodelist": ("NodeList", lambda r: r["hosts"]),
    "alloccpus": ("AllocCPUS", lambda r: r["req_slots"]),
    "allocgpus": ("AllocGPUS", lambda r: r.get("req_gpus") or 0),
    "reqmem": ("ReqMem", lambda r: f"{r['req_memory_mb']}M" if r["req_memory_mb"] else "-"),
    "timelimit": ("Timelimit", lambda r: _hms(r["req_walltime_s"])),
    "totalcpu": ("TotalCPU", lambda r: _hms(r["cpu_user_s"] + r["cpu_system_s"])),
    "usercpu": ("UserCPU", lambda r: _hms(r["cpu_user_s"])),
    "systemcpu": ("SystemCPU", lambda r: _hms(r["cpu_system_s"])),
    "maxrss": ("MaxRSS", lambda r: _size(r["max_rss_bytes"])),
    "cpueff": ("CPUEff", lambda r: _pct(r["cpu_eff"])),
    "memeff": ("MemEff", lambda r: _pct(r["mem_eff"])),
    "resources": ("Resources", lambda r: r["resources"]),
    # the granted GPUs' mean utilisation and memory peak, through NVML
    "gpuutil": (
        "GPUUtil",
        lambda r: "-" if r.get("gpu_util_pct") is None else f"{r['gpu_util_pct']:.1f}%",
    ),
    "gpumem": (
        "GPUMem",
        lambda r: "-" if r.get("gpu_mem_peak_bytes") is None else _size(r["gpu_mem_peak_bytes"]),
    ),
}
DEFAULT_FORMAT = (
    "jobid,jobname,user,queue,state,exitcode,end,elapsed,alloccpus,totalcpu,maxrss,cpueff"
)


def _params(
    user: str | None,
    group: str | None,
    queue: str | None,
    state: str | None,
    since: str | None,
    until: str | None,
    job: str | None = None,
    host: str | None = None,
    name: str | None = None,
    submit_time: bool = False,
) -> dict[str, str]:
    raw = {
        "user": user,
        "group": group,
        "queue": queue,
        "state": state,
        "since": _moment("-S", since),
        "until": _moment("-E", until),
        "job": job,
        "host": host,
        "name": name,
        "time": "submit" if submit_time else None,
    }
    return {k: v for k, v in raw.items() if v}


def _moment(option: str, text: str | None) -> str | None:
    """`-S`/`-E` read in the user's local time, as sacct reads them (xce/core/timespec.py),
    sent as epoch seconds (the API would read a date in UTC); a bad one is a one-line error."""
    if not text:
        return None
    from xce.core.errors import InvalidRequest
    from xce.core.timespec import parse_time

    try:
        return repr(parse_time(text, time.time(), local=True, past=True, what=option))
    except InvalidRequest as e:
        fail(str(e))
        raise  # unreachable: fail exits


def _fetch(client: Any, params: dict[str, str], limit: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    cursor = None
    while len(rows) < limit:
        page = {**params, "limit": str(min(10_000, limit - len(rows)))}
        if cursor:
            page["next"] = cursor
        found = client.request("GET", "/api/v1/accounting/jobs", params=page)
        rows += found["jobs"]
        cursor = found.get("next")
        if not cursor:
            break
    return rows


def acct(
    user: str = typer.Option(None, "--user", "-u", help="users (comma-separated)"),
    group: str = typer.Option(None, "--group", "-g", help="groups (comma-separated)"),
    queue: str = typer.Option(None, "--queue", "-q", help="queues (comma-separated)"),
    state: str = typer.Option(None, "--state", "-s", help="DONE, EXIT, REQUEUED"),
    since: str = typer.Option(
        None,
        "--starttime",
        "-S",
        help="from (epoch, 2026-12-01[T08:00] or HH:MM local time, 2026-12 or 30d)",
    ),
    until: str = typer.Option(None, "--endtime", "-E", help="before (same forms as -S)"),
    job: str = typer.Option(None, "--jobs", "-j", help="a job, task or array id"),
    host: str = typer.Option(None, "--host", help="only attempts on this host"),
    name: str = typer.Option(None, "--name", help="only jobs of this name"),
    submit_time: bool = typer.Option(
        False, "--submit-time", help="-S/-E bound the submit time, not the end time"
    ),
    fmt: str = typer.Option(
        DEFAULT_FORMAT, "--format", "-o", help=f"columns: {', '.join(COLUMNS)}"
    ),
    limit: int = typer.Option(100_000, "--limit", help="most records to show"),
    noheader: bool = typer.Option(False, "--noheader", "-n", help="leave out the header line"),
    parsable: bool = typer.Option(
        False, "--parsable", "-P", help="cells separated by |, without padding (sacct -P)"
    ),
    as_json: bool = typer.Option(False, "--json"),
    controller: list[str] = CONTROLLER,
) -> None:
    """Finished jobs from the accounting store, like sacct (every attempt, kept after the
    cluster purged the job)."""
    columns = [c.strip().lower() for c in fmt.split(",") if c.strip()]
    unknown = [c for c in columns if c not in COLUMNS]
    if unknown:
        fail(f"unknown --format column {unknown[0]!r} (use {', '.join(COLUMNS)})")
    if limit < 1:
        fail("--limit must be at least 1")
    _json_alone(as_json, noheader, parsable)
    params = _params(user, group, queue, state, since, until, job, host, name, submit_time)
    rows = call_light(lambda c: _fetch(c, params, limit), controller)
    if as_json:
        print_json({"jobs": rows})
        return
    headers = [COLUMNS[c][0] for c in columns]
    cells = [[COLUMNS[c][1](r) for c in columns] for r in rows]
    from xce.cli.fields import table  # here: `xce job eff` (registered with jobs) needs none

    sys.stdout.write(table(headers, cells, header=not noheader, parsable=parsable))


def _json_alone(as_json: bool, noheader: bool, parsable: bool) -> None:
    """--json is a document of its own: the table options do not apply to it."""
    if as_json and (noheader or parsable):
        fail("--json takes no --noheader or --parsable", 2)


def report(
    by: str = typer.Option("user", "--by", "-b", help="user, group, queue, host, day, month"),
    user: str = typer.Option(None, "--user", "-u", help="users (comma-separated)"),
    group: str = typer.Option(None, "--group", "-g", help="groups (comma-separated)"),
    queue: str = typer.Option(None, "--queue", "-q", help="queues (comma-separated)"),
    since: str = typer.Option("30d", "--starttime", "-S", help="from (default: 30d ago)"),
    until: str = typer.Option(None, "--endtime", "-E", help="before (default: now)"),
    noheader: bool = typer.Option(
        False, "--noheader", "-n", help="leave out the title and header lines"
    ),
    parsable: bool = typer.Option(
        False, "--parsable", "-P", help="cells separated by |, without padding or title"
    ),
    as_json: bool = typer.Option(False, "--json"),
    chart: bool = typer.Option(
        False, "--chart", help="draw the rows: bars over time (day, month), else one per key"
    ),
    as_csv: bool = typer.Option(False, "--csv", help="the rows as CSV, for a spreadsheet"),
    controller: list[str] = CONTROLLER,
) -> None:
    """Core-hours, jobs, wait and efficiency per user, group, queue, host, day or month,
    like sreport cluster/user and LSF bacct -u."""
    _json_alone(as_json, noheader, parsable)
    if sum((as_json, chart, as_csv)) > 1:
        fail("--json, --chart and --csv are one output each: choose one", 2)
    if (chart or as_csv) and (noheader or parsable):
        fail("--chart and --csv take no --noheader or --parsable", 2)
    params = {**_params(user, group, queue, None, since, until), "by": by}
    data = call_light(
        lambda c: c.request("GET", "/api/v1/accounting/summary", params=params), controller
    )
    if as_json:
        print_json(data)
        return
    if as_csv or chart:
        _draw(by, data, chart)
        return
    if not (noheader or parsable):  # the title line is for people, not for parsers
        typer.echo(_title(by, data))
    from xce.cli.fields import table

    text = table(
        [
            by.upper(),
            "JOBS",
            "ATTEMPTS",
            "DONE",
            "EXIT",
            "CORE-HOURS",
            "CPU-HOURS",
            "AVG-WAIT",
            "MAX-WAIT",
            "CPU-EFF",
            "MEM-EFF",
        ],
        [
            [
                r["key"],
                r["jobs"],
                r["attempts"],
                r["done"],
                r["exited"],
                f"{r['core_hours'] or 0:.2f}",
                f"{r['cpu_hours'] or 0:.2f}",
                _hms(r["avg_wait_s"]),
                _hms(r["max_wait_s"]),
                _pct(r["cpu_eff"]),
                _pct(r["mem_eff"]),
            ]
            for r in data["rows"]
        ],
        header=not noheader,
        parsable=parsable,
    )
    sys.stdout.write(text)


def _title(by: str, data: dict[str, Any]) -> str:
    return (
        f"Usage by {by}, {_when(data.get('since'))} - "
        f"{_when(data.get('until')) if data.get('until') else 'now'} (UTC)"
    )


def _draw(by: str, data: dict[str, Any], chart: bool) -> None:
    """--csv, or --chart at the terminal's size (xce/cli/report_chart.py)."""
    import shutil

    from xce.cli import report_chart

    if not chart:
        sys.stdout.write(report_chart.csv_text(by, data["rows"]))
        return
    size = shutil.get_terminal_size()
    try:
        text = report_chart.chart_text(
            by, data["rows"], size.columns, size.lines - 2, sys.stdout.isatty()
        )
    except ImportError as exc:
        fail(f"--chart needs {exc.name or 'plotext'} installed (or use --csv)")
    typer.echo(_title(by, data))
    sys.stdout.write(text)


def eff(
    job_id: str, as_json: bool = typer.Option(False, "--json"), controller: list[str] = CONTROLLER
) -> None:
    """CPU and memory efficiency of a finished job, like seff (each attempt, each task)."""
    rows = call_light(lambda c: _fetch(c, {"job": job_id}, 100_000), controller)
    if not rows:
        fail(f"job {job_id} has no accounting record (not finished, or unknown)")
    if as_json:
        print_json({"jobs": rows})
        return
    for i, r in enumerate(rows):
        if i:
            typer.echo("")
        core_wall = r["req_slots"] * r["wall_s"]
        cpu = r["cpu_user_s"] + r["cpu_system_s"]
        typer.echo(f"Job ID: {r['job_id']}")
        typer.echo(f"Attempt: {r['attempt']}")
        typer.echo(f"User/Group: {r['user']}/{r['grp'] or '-'}")
        code = f" (exit code {_exit(r)})" if _exit(r) != "-" else ""
        typer.echo(f"State: {r['state']}{code}" + (f", {r['reason']}" if r["reason"] else ""))
        typer.echo(f"Host(s): {r['hosts'] or '-'}")
        typer.echo(f"Cores: {r['req_slots']}")
        if r.get("req_gpus"):
            typer.echo(f"GPUs: {r['req_gpus']} ({_hms(r['req_gpus'] * r['wall_s'])} GPU-walltime)")
            if r.get("gpu_util_pct") is not None:  # NVML's figures, where it was present
                typer.echo(
                    f"GPU Utilization: {r['gpu_util_pct']:.1f}% (mean), GPU memory "
                    f"peak {_size(r.get('gpu_mem_peak_bytes'))}"
                )
        typer.echo(f"CPU Utilized: {_hms(cpu)}")
        typer.echo(f"CPU Efficiency: {_pct(r['cpu_eff'])} of {_hms(core_wall)} core-walltime")
        typer.echo(f"Job Wall-clock time: {_hms(r['wall_s'])}")
        typer.echo(f"Memory Utilized: {_size(r['max_rss_bytes'])}")
        if r["req_memory_mb"]:
            typer.echo(
                f"Memory Efficiency: {_pct(r['mem_eff'])} of "
                f"{_size(r['req_memory_mb'] * 1024 * 1024)}"
            )
        else:
            typer.echo("Memory Efficiency: - (no memory requested)")


def register(app: typer.Typer) -> None:
    """`xce acct` and `xce report`; `xce job eff` is registered by xce/cli/jobs.py."""
    app.command("acct")(acct)
    app.command("report")(report)
