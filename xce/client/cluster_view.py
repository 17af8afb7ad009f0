"""The cluster view shared by `xce cluster status` and the console's Cluster screen.

It comes from the primary's `GET /api/v1/cluster` (its `ha` part); when no primary answers
the API (a failover in progress, or only standbys up) it is built from the candidates'
public `/healthz` answers instead (`source` = "healthz"). One shape for every case:
`{"source", "answering", "primary", "epoch", "mode", "degraded", "failover_timeout_s",
"candidates": [{"url", "rank", "role", "epoch", "seq", "lag_records", "reachable",
"error", "self", "serving", "reason"}], "standbys": [...], "history": [...]}`. `serving`
says whether a candidate accepts writes now and `reason` why not (None where a controller
does not report it): a primary that holds its term may still refuse writes, e.g. while its
lease has lapsed.
"""

from __future__ import annotations

from typing import Any


def view_from_cluster(
    info: dict[str, Any], answering: str, controllers: list[str]
) -> dict[str, Any]:
    """The status view from `GET /api/v1/cluster`. Without `ha` (a controller that does not
    report it) the configured controllers are listed and only the answering one is known."""
    ha = info.get("ha")
    if not ha:
        listed = [c.rstrip("/") for c in info.get("controllers") or controllers]
        if answering not in listed:
            listed.insert(0, answering)
        role = info.get("role")
        # Only the answering controller is known; the others' state is not reported.
        rows = [
            {
                "url": url,
                "rank": rank,
                "role": role if url == answering else None,
                "epoch": None,
                "seq": None,
                "lag_records": None,
                "reachable": True if url == answering and info else None,
                "error": None,
                "self": url == answering,
                "serving": None,
                "reason": None,
            }
            for rank, url in enumerate(listed)
        ]
        return {
            "source": "cluster",
            "answering": answering,
            "primary": answering if role == "primary" else None,
            "epoch": None,
            "mode": None,
            "degraded": None,
            "failover_timeout_s": None,
            "candidates": rows,
            "standbys": [],
            "history": [],
        }
    candidates = []
    for c in ha.get("candidates") or []:
        row = {
            key: c.get(key)
            for key in (
                "url",
                "rank",
                "role",
                "epoch",
                "seq",
                "lag_records",
                "reachable",
                "error",
                "self",
                "serving",
                "reason",
            )
        }
        if not row["reachable"]:  # what the primary last heard is not known: no zeros
            row.update(role=None, epoch=None, seq=None, lag_records=None, serving=None)
        candidates.append(row)
    me = next((c for c in candidates if c["self"]), None)
    if ha.get("role") == "primary" and me is not None:
        primary = me["url"]
    else:
        primary = next(
            (c["url"] for c in candidates if c["role"] == "primary" and c["reachable"]), None
        )
    return {
        "source": "cluster",
        "answering": answering,
        "primary": primary,
        "epoch": ha.get("epoch"),
        "mode": ha.get("mode"),
        "degraded": ha.get("degraded"),
        "failover_timeout_s": ha.get("failover_timeout_s"),
        "candidates": candidates,
        "standbys": list(ha.get("standbys") or []),
        "history": list(ha.get("history") or []),
    }


def view_from_health(answers: list[dict[str, Any] | str], controllers: list[str]) -> dict[str, Any]:
    """The status view from each candidate's `/healthz` (a dict, or why it did not answer).
    Lag is measured against the longest log that answered."""
    top = max((a.get("seq", 0) for a in answers if isinstance(a, dict)), default=0)
    candidates = []
    for rank, (url, answer) in enumerate(zip(controllers, answers, strict=True)):
        if isinstance(answer, dict):
            candidates.append(
                {
                    "url": url,
                    "rank": rank,
                    "role": answer.get("role"),
                    "epoch": answer.get("epoch"),
                    "seq": answer.get("seq"),
                    "lag_records": max(top - int(answer.get("seq") or 0), 0),
                    "reachable": True,
                    "error": None,
                    "self": False,
                    "serving": answer.get("serving"),
                    "reason": answer.get("reason"),
                }
            )
        else:
            candidates.append(
                {
                    "url": url,
                    "rank": rank,
                    "role": None,
                    "epoch": None,
                    "seq": None,
                    "lag_records": None,
                    "reachable": False,
                    "error": answer,
                    "self": False,
                    "serving": None,
                    "reason": None,
                }
            )
    primary = next((c["url"] for c in candidates if c["role"] == "primary"), None)
    epochs = [c["epoch"] for c in candidates if c["epoch"] is not None]
    return {
        "source": "healthz",
        "answering": None,
        "primary": primary,
        "epoch": max(epochs) if epochs else None,
        "mode": None,
        "degraded": None,
        "failover_timeout_s": None,
        "candidates": candidates,
        "standbys": [],
        "history": [],
    }


async def probe_candidates(client: Any) -> dict[str, Any] | None:
    """The view from every candidate's /healthz, or None when none of them answers."""
    import asyncio  # a coroutine runs here, so the loop is loaded; `xce --help` needs not

    results = await asyncio.gather(
        *(client.health(u) for u in client.controllers), return_exceptions=True
    )
    answers: list[dict[str, Any] | str] = [
        r if isinstance(r, dict) else getattr(r, "message", None) or str(r) or repr(r)
        for r in results
    ]
    if not any(isinstance(a, dict) for a in answers):
        return None
    return view_from_health(answers, list(client.controllers))


async def fetch_view(client: Any) -> dict[str, Any]:
    """Ask the primary; if none answers the API, ask every candidate's /healthz."""
    from xce.client import ApiError

    try:
        info = await client.cluster()
    except ApiError as exc:
        if exc.status != 0:
            raise
        view = await probe_candidates(client)
        if view is None:
            raise exc from None
        return view
    return view_from_cluster(info, client.base_url, list(client.controllers))


def reachable_text(value: bool | None) -> str:
    """yes / no, or `-` where it is not known (a controller that does not report HA)."""
    return "-" if value is None else "yes" if value else "no"


def refusal_lines(view: dict[str, Any]) -> list[str]:
    """`writes refused by <url>: <why>` for each primary that says it does not serve writes
    now (its lease lapsed, a switchover is under way): the reason its clients get too."""
    return [
        f"writes refused by {c['url']}: {c.get('reason') or 'no reason given'}"
        for c in view["candidates"]
        if c.get("role") == "primary" and c.get("serving") is False
    ]


def summary_lines(view: dict[str, Any]) -> list[str]:
    """The lines under the table: primary and epoch, why it refuses writes (if it does),
    replication mode, standbys' lag."""
    lines = []
    if view["source"] == "healthz":
        seen = f" (newest epoch seen {view['epoch']})" if view.get("epoch") is not None else ""
        lines.append(f"primary: {view.get('primary') or 'none answering'}{seen}")
        lines.extend(refusal_lines(view))
        lines.append("no primary answers the API: the candidates' /healthz is shown")
        return lines
    epoch = f" (epoch {view['epoch']})" if view.get("epoch") is not None else ""
    lines.append(f"primary: {view.get('primary') or 'none answering'}{epoch}")
    lines.extend(refusal_lines(view))
    if not view.get("mode"):
        lines.append("replication: not reported by this controller")
        return lines
    if len(view.get("candidates") or []) <= 1:
        lines.append("replication: none (a single controller candidate)")
        return lines
    state = "DEGRADED (running async)" if view.get("degraded") else "healthy"
    refused = sum(1 for s in view.get("standbys") or [] if s.get("incompatible"))
    if refused:
        state += f", {refused} standby incompatible (not replicated to, not electable)"
    timeout = view.get("failover_timeout_s")
    after = f"; failover after {timeout:g} s" if isinstance(timeout, int | float) else ""
    lines.append(f"replication: {view['mode']}, {state}{after}")
    standbys = view.get("standbys") or []
    if standbys:
        parts = []
        for s in standbys:
            if s.get("incompatible"):
                parts.append(f"{s.get('node')} INCOMPATIBLE, not following: {s['incompatible']}")
                continue
            release = f" (xce {s['release']})" if s.get("release") else ""
            sync = ("in sync" if s.get("in_sync") else "catching up") + release
            ack = s.get("last_ack_s")
            ack_text = f", last ack {ack:.1f} s ago" if isinstance(ack, int | float) else ""
            parts.append(f"{s.get('node')} lag {s.get('lag_records')} records, {sync}{ack_text}")
        lines.append("standbys: " + "; ".join(parts))
    else:
        lines.append("standbys: none connected")
    return lines


def unreachable_lines(view: dict[str, Any], width: int = 120) -> list[str]:
    """`unreachable: <url>: <why>`, cut to `width` characters."""
    out = []
    for c in view["candidates"]:
        if not c["reachable"] and c.get("error"):
            error = str(c["error"])
            why = error if error.startswith(c["url"]) else f"{c['url']}: {error}"
            text = f"unreachable: {why}"
            out.append(text if len(text) <= width else text[: width - 3] + "...")
    return out
