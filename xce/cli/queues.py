"""`xce queue ...`: list, show, create, open, close, activate, deactivate."""

from __future__ import annotations

from typing import Any

import typer

from xce.cli.common import call, call_light, name_action, print_fields, print_json, print_table

app = typer.Typer(no_args_is_help=True)
CONTROLLER = typer.Option(None, "--controller", help="controller URL (repeat for candidates)")


def _rows(queues: list[dict[str, Any]]) -> None:
    print_table(
        ["QUEUE_NAME", "PRIO", "STATUS", "PEND", "RUN", "SUSP", "HOSTS", "ON_HOST_FAILURE"],
        [[q["name"], q["priority"], q["status"], q["pending"], q["running"], q["suspended"],
          ",".join(q["hosts"]) or "all", q["on_host_failure"]] for q in queues],
    )


@app.command("list")
def list_(as_json: bool = typer.Option(False, "--json"),
          controller: list[str] = CONTROLLER) -> None:
    """List queues (bqueues style)."""
    queues = call_light(lambda c: c.queues(), controller)
    if as_json:
        print_json(queues)
    else:
        _rows(queues)


@app.command()
def show(name: str, as_json: bool = typer.Option(False, "--json"),
         controller: list[str] = CONTROLLER) -> None:
    """Show one queue: its state, hosts, plugins, limits and shares."""
    from urllib.parse import quote

    queue = call_light(lambda c: c.request("GET", f"/api/v1/queues/{quote(name, safe='')}"),
                       controller)
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
    body = {"name": name, "priority": priority, "description": description,
            "hosts": [h for h in hosts.split(",") if h], "on_host_failure": on_host_failure,
            "open": not closed, "active": not inactive}
    queue = call(lambda c: c.create_queue(body), controller)
    typer.echo(f"Queue <{queue['name']}> is created.")


def _action(action: str, past: str):  # type: ignore[no-untyped-def]
    return name_action("queue", action, past,
                       lambda c, name, _reason: c.queue_action(name, action))


app.command("open")(_action("open", "opened"))
app.command("close")(_action("close", "closed"))
app.command("activate")(_action("activate", "activated"))
app.command("deactivate")(_action("deactivate", "inactivated"))
