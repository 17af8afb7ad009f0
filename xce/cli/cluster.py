"""`xce cluster status`: the controller candidates, which one is primary, replication lag.

The view comes from the primary's `GET /api/v1/cluster` (its `ha` part). When no primary
answers the API (a failover in progress, or only standbys up) the candidates' public
`/healthz` answers are shown instead and the exit code is 1; when nothing answers at all it
is one error line (exit 2), like every other command.

`--json` prints the same view as the table, in one shape for every case:
`{"source", "answering", "primary", "epoch", "mode", "degraded", "failover_timeout_s",
"candidates": [{"url", "rank", "role", "epoch", "seq", "lag_records", "reachable",
"error", "self"}], "standbys": [...], "history": [...]}`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import typer

from xce.cli.common import call, print_json, print_table

app = typer.Typer(no_args_is_help=True)
CONTROLLER = typer.Option(None, "--controller", help="controller URL (repeat for candidates)")
HEADERS = ["URL", "RANK", "ROLE", "EPOCH", "SEQ", "LAG", "REACHABLE"]


def view_from_cluster(info: dict[str, Any], answering: str,
                      controllers: list[str]) -> dict[str, Any]:
    """The status view from `GET /api/v1/cluster`; without `ha` (a controller that does not
    report it) the answering controller is the one row."""
    ha = info.get("ha")
    if not ha:
        listed = [c.rstrip("/") for c in info.get("controllers") or controllers]
        rank = listed.index(answering) if answering in listed else None
        role = info.get("role") or "primary"
        return {"source": "cluster", "answering": answering,
                "primary": answering if role == "primary" else None, "epoch": None,
                "mode": None, "degraded": None, "failover_timeout_s": None,
                "candidates": [{"url": answering, "rank": rank, "role": role, "epoch": None,
                                "seq": info.get("events_applied"), "lag_records": 0,
                                "reachable": True, "error": None, "self": True}],
                "standbys": [], "history": []}
    candidates = [{key: c.get(key) for key in ("url", "rank", "role", "epoch", "seq",
                                               "lag_records", "reachable", "error", "self")}
                  for c in ha.get("candidates") or []]
    me = next((c for c in candidates if c["self"]), None)
    if ha.get("role") == "primary" and me is not None:
        primary = me["url"]
    else:
        primary = next((c["url"] for c in candidates
                        if c["role"] == "primary" and c["reachable"]), None)
    return {"source": "cluster", "answering": answering, "primary": primary,
            "epoch": ha.get("epoch"), "mode": ha.get("mode"), "degraded": ha.get("degraded"),
            "failover_timeout_s": ha.get("failover_timeout_s"), "candidates": candidates,
            "standbys": list(ha.get("standbys") or []), "history": list(ha.get("history") or [])}


def view_from_health(answers: list[dict[str, Any] | str], controllers: list[str]
                     ) -> dict[str, Any]:
    """The status view from each candidate's `/healthz` (a dict, or why it did not answer).
    Lag is measured against the longest log that answered."""
    top = max((a.get("seq", 0) for a in answers if isinstance(a, dict)), default=0)
    candidates = []
    for rank, (url, answer) in enumerate(zip(controllers, answers, strict=True)):
        if isinstance(answer, dict):
            candidates.append({"url": url, "rank": rank, "role": answer.get("role"),
                               "epoch": answer.get("epoch"), "seq": answer.get("seq"),
                               "lag_records": max(top - int(answer.get("seq") or 0), 0),
                               "reachable": True, "error": None, "self": False})
        else:
            candidates.append({"url": url, "rank": rank, "role": None, "epoch": None,
                               "seq": None, "lag_records": None, "reachable": False,
                               "error": answer, "self": False})
    primary = next((c["url"] for c in candidates if c["role"] == "primary"), None)
    epochs = [c["epoch"] for c in candidates if c["epoch"] is not None]
    return {"source": "healthz", "answering": None, "primary": primary,
            "epoch": max(epochs) if epochs else None, "mode": None, "degraded": None,
            "failover_timeout_s": None, "candidates": candidates, "standbys": [],
            "history": []}


async def fetch_view(client: Any) -> dict[str, Any]:
    """Ask the primary; if none answers the API, ask every candidate's /healthz."""
    from xce.client import ApiError

    try:
        info = await client.cluster()
    except ApiError as exc:
        if exc.status != 0:
            raise
        results = await asyncio.gather(*(client.health(u) for u in client.controllers),
                                       return_exceptions=True)
        answers: list[dict[str, Any] | str] = [
            r if isinstance(r, dict) else getattr(r, "message", None) or str(r) or repr(r)
            for r in results]
        if not any(isinstance(a, dict) for a in answers):
            raise exc from None
        return view_from_health(answers, list(client.controllers))
    return view_from_cluster(info, client.base_url, list(client.controllers))


def _yes_no(value: Any) -> str:
    return "yes" if value else "no"


def summary_lines(view: dict[str, Any]) -> list[str]:
    """The lines under the table: primary and epoch, replication mode, standbys' lag."""
    lines = []
    epoch = f" (epoch {view['epoch']})" if view.get("epoch") is not None else ""
    lines.append(f"primary: {view.get('primary') or 'none answering'}{epoch}")
    if view["source"] == "healthz":
        lines.append("no primary answers the API: the candidates' /healthz is shown")
        return lines
    if view.get("mode"):
        state = ("DEGRADED (acknowledging without a standby until one catches up)"
                 if view.get("degraded") else "healthy")
        timeout = view.get("failover_timeout_s")
        after = f"; failover after {timeout:g} s" if isinstance(timeout, int | float) else ""
        lines.append(f"replication: {view['mode']}, {state}{after}")
    standbys = view.get("standbys") or []
    if standbys:
        parts = []
        for s in standbys:
            sync = "in sync" if s.get("in_sync") else "catching up"
            ack = s.get("last_ack_s")
            ack_text = f", last ack {ack:.1f} s ago" if isinstance(ack, int | float) else ""
            parts.append(f"{s.get('node')} lag {s.get('lag_records')} records, {sync}"
                         f"{ack_text}")
        lines.append("standbys: " + "; ".join(parts))
    elif len(view.get("candidates") or []) <= 1:
        lines.append("standbys: none (a single controller candidate)")
    else:
        lines.append("standbys: none connected")
    return lines


def print_view(view: dict[str, Any]) -> None:
    rows = [[c["url"], c["rank"], c["role"], c["epoch"], c["seq"], c["lag_records"],
             _yes_no(c["reachable"])] for c in view["candidates"]]
    print_table(HEADERS, rows)
    typer.echo("")
    for line in summary_lines(view):
        typer.echo(line)
    for c in view["candidates"]:
        if not c["reachable"] and c.get("error"):
            error = str(c["error"])
            typer.echo(f"unreachable: {c['url']}: "
                       f"{error if len(error) <= 120 else error[:117] + '...'}")


@app.command()
def status(as_json: bool = typer.Option(False, "--json"),
           controller: list[str] = CONTROLLER) -> None:
    """Controller candidates: role, epoch, log position, lag; the primary and replication.

    Exit code 1 when no primary answers (the candidates' /healthz is shown then)."""
    view = call(fetch_view, controller)
    if as_json:
        print_json(view)
    else:
        print_view(view)
    if view["source"] == "healthz":
        raise typer.Exit(1)
