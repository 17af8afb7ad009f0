"""What each user's files hold on the controller: `GET /api/v1/files/usage` (`file:admin`).

The controller's disk holds the uploads, job inputs and returned outputs of every user, and
also the WAL: a full disk stops every write of the cluster. Each user's files count against
one quota (`[controller] upload_quota_mb`, xce/store/files.py); this is the admin's view of
who holds what against it (`xce admin files`). Only admins see it: it names every user
that stores anything.
"""

from __future__ import annotations

from aiohttp import web

from xce.api.http import SERVICE, json_response
from xce.api.routes import Param, Route


async def file_usage(request: web.Request) -> web.Response:
    """Every user holding files (or the one named by `user`), largest first."""
    files = request.app[SERVICE].files
    only = request.query.get("user") or None
    held = files.holdings()
    if only is not None:
        held = {only: held[only]} if only in held else {}
    quota = files.quota_bytes
    rows = [
        {
            "user": user,
            "files": h.files,
            "bytes": h.bytes,
            "quota_bytes": quota,
            "used_pct": round(100.0 * h.bytes / quota, 1) if quota else 0.0,
        }
        for user, h in sorted(held.items(), key=lambda kv: (-kv[1].bytes, kv[0]))
    ]
    if only is not None and not rows:  # a user with nothing here: zeros, not a 404
        rows = [{"user": only, "files": 0, "bytes": 0, "quota_bytes": quota, "used_pct": 0.0}]
    return json_response({"users": rows, "quota_bytes": quota})


_ROW = {
    "type": "object",
    "properties": {
        "user": {"type": "string"},
        "files": {"type": "integer"},
        "bytes": {"type": "integer"},
        "quota_bytes": {"type": "integer"},
        "used_pct": {"type": "number"},
    },
    "required": ["user", "files", "bytes", "quota_bytes", "used_pct"],
}

ROUTES = [
    Route(
        "GET",
        "/api/v1/files/usage",
        file_usage,
        "What each user's uploads and job files hold on the controller, against the quota",
        "file:admin",
        "files",
        query=(Param("user", "only this user"),),
        response={
            "type": "object",
            "properties": {
                "users": {"type": "array", "items": _ROW},
                "quota_bytes": {"type": "integer"},
            },
            "required": ["users", "quota_bytes"],
        },
    ),
]
