"""`xce host ...`: list, show, open, close, drain."""

from __future__ import annotations

import typer

from xce.cli.common import call, name_action, print_json, print_table, show_record

app = typer.Typer(no_args_is_help=True)
CONTROLLER = typer.Option(None, "--controller", help="controller URL (repeat for candidates)")


@app.command("list")
def list_(as_json: bool = typer.Option(False, "--json"),
          controller: list[str] = CONTROLLER) -> None:
    """List hosts (bhosts style)."""
    hosts = call(lambda c: c.hosts(), controller)
    if as_json:
        print_json(hosts)
        return
    print_table(
        ["HOST_NAME", "STATUS", "ADMIN", "SLOTS", "RUN", "MEM_MB", "MEM_USED", "LOAD1", "RACK",
         "GROUP"],
        [[h["name"], h["status"], h["admin"], h["slots"], h["slots_used"], h["memory_mb"],
          h["memory_used_mb"], f"{h['load'].get('load1', 0):.2f}" if h["load"] else None,
          h.get("rack"), h.get("group")] for h in hosts],
    )


@app.command()
def show(name: str, as_json: bool = typer.Option(False, "--json"),
         controller: list[str] = CONTROLLER) -> None:
    """Show one host."""
    show_record(call(lambda c: c.host(name), controller), as_json)


def _action(action: str, past: str):  # type: ignore[no-untyped-def]
    return name_action("host", action, past,
                       lambda c, name, reason: c.host_action(name, action, reason),
                       with_reason=True)


app.command("open")(_action("open", "opened"))
app.command("close")(_action("close", "closed"))
app.command("drain")(_action("drain", "draining"))
