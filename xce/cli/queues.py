"""`xce queue ...`: list, show, create, modify, delete, open, close, activate, deactivate."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

from xce.cli.common import (
    call,
    call_light,
    fail,
    name_action,
    print_fields,
    print_json,
    print_table,
)

app = typer.Typer(no_args_is_help=True)
CONTROLLER = typer.Option(None, "--controller", help="controller URL (repeat for candidates)")


_LIMIT_WORDS = (
    ("max_running", "run"),
    ("max_running_per_user", "run/user"),
    ("max_slots", "slots"),
    ("max_walltime_s", "wall"),
    ("max_memory_mb", "mem"),
    ("default_walltime_s", "def-wall"),
    ("default_memory_mb", "def-mem"),
)


def _limits(q: dict[str, Any]) -> str:
    words = [
        f"{label}<={q[key]}" if key.startswith("max") else f"{label}={q[key]}"
        for key, label in _LIMIT_WORDS
        if q.get(key) is not None
    ]
    if q.get("users"):
        words.append("users=" + ",".join(q["users"]))
    if q.get("preempt"):
        words.append(
            f"preempt={','.join(q['preempt'])}:{q.get('preempt_mode', 'suspend')}"
            + (f"/{q['preempt_min_run_s']}s" if q.get("preempt_min_run_s") else "")
        )
    return " ".join(words) or "-"


def _rows(queues: list[dict[str, Any]]) -> None:
    print_table(
        [
            "QUEUE_NAME",
            "PRIO",
            "STATUS",
            "PEND",
            "RUN",
            "SUSP",
            "HOSTS",
            "ON_HOST_FAILURE",
            "PLUGINS",
            "LIMITS",
        ],
        [
            [
                q["name"],
                q["priority"],
                q["status"],
                q["pending"],
                q["running"],
                q["suspended"],
                ",".join(q["hosts"]) or "all",
                q["on_host_failure"],
                ",".join(q.get("plugins") or []) or "fcfs",
                _limits(q),
            ]
            for q in queues
        ],
    )


@app.command("list")
def list_(
    as_json: bool = typer.Option(False, "--json"), controller: list[str] = CONTROLLER
) -> None:
    """List queues (bqueues style)."""
    queues = call_light(lambda c: c.queues(), controller)
    if as_json:
        print_json(queues)
    else:
        _rows(queues)


@app.command()
def show(
    name: str, as_json: bool = typer.Option(False, "--json"), controller: list[str] = CONTROLLER
) -> None:
    """Show one queue: its state, hosts, plugins, limits and shares."""
    from urllib.parse import quote

    queue = call_light(
        lambda c: c.request("GET", f"/api/v1/queues/{quote(name, safe='')}"), controller
    )
    if as_json:
        print_json(queue)
        return
    out = dict(queue)
    out["hosts"] = out.get("hosts") or "all"
    out["plugins"] = out.get("plugins") or "default (fcfs, first-fit)"
    for key in ("max_running", "max_running_per_user"):
        out[key] = out.get(key) or "no limit"
    out["shares"] = out.get("shares") or "1 each"
    print_fields(out)


@app.command()
def create(
    name: str,
    priority: int = typer.Option(0, "--priority", "-p"),
    hosts: str = typer.Option("", "--hosts", help="comma-separated host names (default all)"),
    description: str = typer.Option("", "--description"),
    on_host_failure: str = typer.Option("requeue", "--on-host-failure", help="requeue or exit"),
    closed: bool = typer.Option(False, "--closed", help="create closed"),
    inactive: bool = typer.Option(False, "--inactive", help="create inactive"),
    controller: list[str] = CONTROLLER,
) -> None:
    """Create a queue."""
    body = {
        "name": name,
        "priority": priority,
        "description": description,
        "hosts": [h for h in hosts.split(",") if h],
        "on_host_failure": on_host_failure,
        "open": not closed,
        "active": not inactive,
    }
    queue = call(lambda c: c.create_queue(body), controller)
    typer.echo(f"Queue <{queue['name']}> is created.")


def _number(option: str, text: str | None) -> int | None:
    """A limit's value: a positive integer, or `none` to clear it."""
    if text is None or text.lower() == "none":
        return None
    try:
        value = int(text)
    except ValueError:
        fail(f"{option} takes a positive integer or none, got {text!r}", 2)
    if value < 1:
        fail(f"{option} takes a positive integer or none, got {text!r}", 2)
    return value


def _names(text: str) -> list[str]:
    return [] if text.lower() in ("", "none", "all") else [n for n in text.split(",") if n]


LIMIT = "a positive integer, or none to clear it"


@app.command()
def modify(
    name: str,
    priority: int | None = typer.Option(None, "--priority", "-p"),
    hosts: str | None = typer.Option(
        None, "--hosts", help="comma-separated host names or @groups; all for every host"
    ),
    description: str | None = typer.Option(None, "--description"),
    on_host_failure: str | None = typer.Option(None, "--on-host-failure", help="requeue or exit"),
    plugins: str | None = typer.Option(
        None, "--plugins", help="comma-separated scheduler plugins; none: fcfs"
    ),
    shares: str | None = typer.Option(None, "--shares", help="user=N,@group=M; none clears"),
    users: str | None = typer.Option(
        None, "--users", help="who may submit: names and @groups; all: anyone"
    ),
    max_running: str | None = typer.Option(None, "--max-running", help=LIMIT),
    max_running_per_user: str | None = typer.Option(None, "--max-running-per-user", help=LIMIT),
    max_slots: str | None = typer.Option(None, "--max-slots", help="per job: " + LIMIT),
    max_walltime: str | None = typer.Option(
        None, "--max-walltime", help="seconds per job: " + LIMIT
    ),
    default_walltime: str | None = typer.Option(
        None, "--default-walltime", help="seconds, for jobs without -W: " + LIMIT
    ),
    max_memory: str | None = typer.Option(None, "--max-memory", help="MB per job: " + LIMIT),
    default_memory: str | None = typer.Option(
        None, "--default-memory", help="MB, for jobs without --mem: " + LIMIT
    ),
    preempt: str | None = typer.Option(
        None, "--preempt", help="queues whose jobs this one preempts; none"
    ),
    preempt_mode: str | None = typer.Option(None, "--preempt-mode", help="suspend or requeue"),
    preempt_min_run: int | None = typer.Option(
        None, "--preempt-min-run", help="seconds a job runs before it may be preempted (again)"
    ),
    controller: list[str] = CONTROLLER,
) -> None:
    """Change a queue's settings (like `scontrol update partition`); its jobs keep theirs."""
    body: dict[str, Any] = {}
    for key, value in (
        ("priority", priority),
        ("description", description),
        ("on_host_failure", on_host_failure),
        ("preempt_mode", preempt_mode),
        ("preempt_min_run_s", preempt_min_run),
    ):
        if value is not None:
            body[key] = value
    for key, text in (
        ("hosts", hosts),
        ("plugins", plugins),
        ("users", users),
        ("preempt", preempt),
    ):
        if text is not None:
            body[key] = _names(text)
    if shares is not None:
        pairs = [p.split("=", 1) for p in _names(shares)]
        if any(len(p) != 2 for p in pairs):
            fail(f"--shares takes user=N,@group=M, got {shares!r}", 2)
        try:
            body["shares"] = {who: float(n) for who, n in pairs}
        except ValueError:
            fail(f"--shares takes numbers, got {shares!r}", 2)
    for key, option, text in (
        ("max_running", "--max-running", max_running),
        ("max_running_per_user", "--max-running-per-user", max_running_per_user),
        ("max_slots", "--max-slots", max_slots),
        ("max_walltime_s", "--max-walltime", max_walltime),
        ("default_walltime_s", "--default-walltime", default_walltime),
        ("max_memory_mb", "--max-memory", max_memory),
        ("default_memory_mb", "--default-memory", default_memory),
    ):
        if text is not None:
            body[key] = _number(option, text)
    if not body:
        fail("nothing to change: give at least one option (see xce queue modify --help)", 2)
    call(lambda c: c.request("PATCH", f"/api/v1/queues/{name}", json=body), controller)
    typer.echo(f"Queue <{name}> is modified.")


@app.command()
def delete(name: str, controller: list[str] = CONTROLLER) -> None:
    """Delete a queue no pending, running or suspended job is in."""
    call(lambda c: c.request("DELETE", f"/api/v1/queues/{name}"), controller)
    typer.echo(f"Queue <{name}> is deleted.")


def _action(action: str, past: str) -> Callable[..., None]:
    return name_action("queue", action, past, lambda c, name, _reason: c.queue_action(name, action))


app.command("open")(_action("open", "opened"))
app.command("close")(_action("close", "closed"))
app.command("activate")(_action("activate", "activated"))
app.command("deactivate")(_action("deactivate", "inactivated"))
