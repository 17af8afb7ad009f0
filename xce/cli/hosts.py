"""`xce host ...`: list, show, open, close, drain."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import typer

from xce.cli.common import call_light, name_action, print_fields, print_json, print_table
from xce.client.readable import host_status, local_time

app = typer.Typer(no_args_is_help=True)
CONTROLLER = typer.Option(None, "--controller", help="controller URL (repeat for candidates)")


@app.command("list")
def list_(
    as_json: bool = typer.Option(False, "--json"), controller: list[str] = CONTROLLER
) -> None:
    """List hosts (bhosts style)."""
    hosts = call_light(lambda c: c.hosts(), controller)
    if as_json:
        print_json(hosts)
        return
    print_table(
        [
            "HOST_NAME",
            "STATUS",
            "ADMIN",
            "SLOTS",
            "RUN",
            "MEM_MB",
            "MEM_USED",
            "LOAD1",
            "RACK",
            "GROUP",
            "GRES_FREE",
        ],
        [
            [
                h["name"],
                host_status(h),
                h["admin"],
                h["slots"],
                h["slots_used"],
                h["memory_mb"],
                h["memory_used_mb"],
                f"{h['load'].get('load1', 0):.2f}" if h["load"] else None,
                h.get("rack"),
                h.get("group"),
                gres_summary(h.get("gres")),
            ]
            for h in hosts
        ],
    )


def gres_summary(gres: dict[str, Any] | None) -> str | None:
    """`gpu:1/2` per kind: free of total (None without devices)."""
    if not gres:
        return None
    return ",".join(f"{kind}:{g['free']}/{g['total']}" for kind, g in gres.items())


@app.command()
def show(
    name: str, as_json: bool = typer.Option(False, "--json"), controller: list[str] = CONTROLLER
) -> None:
    """Show one host, with its heartbeat timings and how it contains jobs."""
    record = call_light(lambda c: c.host(name), controller)
    if as_json:
        print_json(record)
    else:
        print_fields(readable_host(record))


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"


def readable_host(record: dict[str, Any]) -> dict[str, Any]:
    """The host view for people: containment as one line, liveness as sentences."""
    out = dict(record)
    out["status"] = host_status(record)
    for key in ("registered_at", "changed_at"):
        if key in out:
            out[key] = local_time(out[key])
    devices = out.pop("gres", None) or {}
    out["gres"] = {
        kind: f"{g['free']} free of {g['total']} (devices {', '.join(g['devices'])}"
        + (f"; in use {', '.join(g['used'])})" if g["used"] else ")")
        for kind, g in devices.items()
    }
    summary = out.pop("containment_summary", None)
    out["containment"] = summary or "unknown"
    if "worker_version" in out:
        out["worker_version"] = out["worker_version"] or "unknown (not registered since start)"
    live = out.pop("liveness", None) or {}
    if live:
        deadline = float(live["heartbeat_deadline_s"])
        fence = float(live["fence_timeout_s"])
        age = live.get("last_heartbeat_age_s")
        lines = {
            "last heartbeat": (
                f"{_seconds(age)} ago" if age is not None else "none since this controller started"
            ),
            "heartbeat deadline": f"{_seconds(deadline)} (unavailable after this silence)",
            "fence timeout": f"{_seconds(fence)} (its worker kills its jobs after this "
            "long without a controller)",
        }
        if live.get("jobs_requeued_at") is not None:
            at = time.strftime("%H:%M:%S", time.localtime(live["jobs_requeued_at"]))
            lines["jobs requeued"] = (
                f"in {_seconds(live['jobs_requeued_in_s'])} (at {at}) unless the host comes back"
            )
        else:
            lines["jobs requeued"] = f"after {_seconds(deadline + fence)} of silence"
        out["liveness"] = lines
    return out


def _action(action: str, past: str) -> Callable[..., None]:
    return name_action(
        "host",
        action,
        past,
        lambda c, name, reason: c.host_action(name, action, reason),
        with_reason=True,
    )


app.command("open")(_action("open", "opened"))
app.command("close")(_action("close", "closed"))
app.command("drain")(_action("drain", "draining"))
