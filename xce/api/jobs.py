"""Job routes: submit, list, show (with history), control, output tail and download, upload."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from xce.api.access import require_job, visible_owners
from xce.api.accounting import archived_job
from xce.api.audit import AUDIT_DETAIL, AUDIT_OBJECT
from xce.api.filesend import send_file
from xce.api.http import HA, HISTORY, SERVICE, TAILS, identity, json_response, query_int, read_body
from xce.api.queries import JobFilter, list_jobs
from xce.api.routes import Param, Route
from xce.api.transfers import body_chunks, declared, gate
from xce.api.views import array_view, job_view
from xce.controller.requests import SubmitRequest
from xce.controller.service import ControllerService
from xce.controller.tails import STREAMS
from xce.core.errors import InvalidRequest, NotFound
from xce.core.job_context import queue_for
from xce.core.model import JobState
from xce.core.rbac import IMPERSONATE, check_run_as, job_scope
from xce.core.state_base import parse_job_id
from xce.protocol.bodies import SubmitBody
from xce.protocol.schemas import JobView, TailView
from xce.store.replicated_names import not_here, upload_names


def _service(request: web.Request) -> ControllerService:
    return request.app[SERVICE]


async def submit(request: web.Request) -> web.Response:
    body = await read_body(request, SubmitBody)
    who = identity(request)
    user = body.user or who.name
    check_run_as(who.user, who.role, who.permissions, user)
    anyones = job_scope(who.permissions, "job:control") == "all"
    req = SubmitRequest.of(
        body,
        user=user,
        submit_host=submit_host_of(request),
        # Another's upload is their data: naming it as an input is reading it, which takes
        # user:impersonate (job:control:all only lets an operator delete it).
        uploads_of=None if IMPERSONATE in who.permissions else who.user,
        may_view_owner=visible_owners(request),  # a dependency shows its target's outcome
        privileged=anyones,
        groups=who.groups if user == who.user else (),
    )
    service = _service(request)
    job_id, repeat = await service.submit_keyed(req, idempotency_key(request))
    number = int(job_id)
    record = service.state.arrays.get(number) or service.state.jobs.get(job_id)
    queue = record.spec.queue if record is not None else req.body.queue
    answer: dict[str, Any] = {"job_id": job_id, "queue": queue}
    if body.qos and (mapped := queue_for(body.qos, service.state.queues)) is None:
        answer["warnings"] = [f"qos {body.qos!r} is not mapped to a queue here: ignored"]
    elif body.qos and mapped is not None and mapped.name != queue:
        answer["warnings"] = [
            f"qos {body.qos!r} maps to queue {mapped.name!r}, but the job went to {queue!r}"
        ]
    runs_as = f", runs as {user}" if user != who.user else ""
    request[AUDIT_DETAIL] = f"queue {queue}{runs_as}" + (" (a repeat)" if repeat else "")
    request[AUDIT_OBJECT] = f"job:{job_id}"
    response = json_response(answer, status=201)
    if repeat:
        response.headers["Idempotent-Replayed"] = "true"
    return response


@functools.cache
def _own_host() -> str:
    return socket.gethostname()


def submit_host_of(request: web.Request) -> str:
    """Where the submit came from, as the connection says, never as the body says: the job's
    `SLURM_SUBMIT_HOST` / `LSB_SUB_HOST` is something scripts trust (to copy results back),
    so a client must not be able to name a host it is not on. A caller on this host (the
    local socket, loopback) is this host's name; any other is its peer address (no reverse
    lookup on the submit path: a slow DNS would stall every submit)."""
    remote = request.remote or ""
    try:
        if not remote or ipaddress.ip_address(remote).is_loopback:
            return _own_host()
    except ValueError:
        return _own_host()  # not an IP address: a Unix socket's empty or path-like peer
    return remote


def idempotency_key(request: web.Request) -> str:
    """The `Idempotency-Key` header: up to 255 visible ASCII characters (or none)."""
    key = request.headers.get("Idempotency-Key", "").strip()
    if len(key) > 255 or not all(33 <= ord(c) < 127 for c in key):
        raise InvalidRequest("Idempotency-Key must be at most 255 visible ASCII characters")
    return key


async def list_(request: web.Request) -> web.Response:
    service = _service(request)
    states = frozenset(s.strip().upper() for s in request.query.get("state", "").split(",") if s)
    bad = states - {s.value for s in JobState}
    if bad:
        raise InvalidRequest(f"unknown job state {sorted(bad)[0]}")
    array = request.query.get("array")
    flt = JobFilter(
        states=states,
        user=request.query.get("user") or None,
        queue=request.query.get("queue") or None,
        host=request.query.get("host") or None,
        array=parse_job_id(array)[0] if array else None,
        visible=visible_owners(request),
    )
    offset = query_int(request, "offset", 0, 0, 2**31)
    limit = query_int(request, "limit", 1000, 1, 100000)
    rows, total = list_jobs(service.state, service.reasons, flt, offset, limit, service.clock())
    return json_response({"jobs": rows, "total": total, "offset": offset, "limit": limit})


async def show(request: web.Request) -> web.Response:
    service = _service(request)
    job_id = request.match_info["job_id"]
    try:
        require_job(request, job_id, "job:view")
    except NotFound:
        return await archived_job(request, job_id)  # purged by retention: its record
    number, index = parse_job_id(job_id)
    history = request.app[HISTORY]
    if index is None and number in service.state.arrays:
        array = service.state.arrays[number]
        view = array_view(array, service.state, service.reasons)
        view["history"] = history.array_entries(array)
        return json_response(view)
    job = service.state.job(job_id)
    view = job_view(
        job, service.reasons, service.clock(), full=True, predictions=service.predictions
    )
    view["history"] = history.job_entries(job)
    return json_response(view)


def _control(action: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        job_id = request.match_info["job_id"]
        require_job(request, job_id, "job:control")
        changed = await _service(request).control(job_id, action)
        return json_response({"action": action, "jobs": changed})

    handler.__name__ = f"job_{action}"
    return handler


async def list_files(request: web.Request) -> web.Response:
    """A job's output files with path (and `name`, the same), size and SHA-256. A file
    stored before digests were recorded has its digest taken now, once, in a transfer slot
    (it reads the whole file)."""
    service = _service(request)
    require_job(request, request.match_info["job_id"], "job:view")
    job = service.state.job(request.match_info["job_id"])
    files = await service.files.list_outputs(job.number, job.id)
    unknown = [f for f in files if f["sha256"] is None]
    if unknown:
        async with gate(request).slot(f"the files of job {job.id}"):
            for entry in unknown:
                with contextlib.suppress(NotFound):  # gone since the scan: left unknown
                    path = service.files.output_path(job.number, job.id, str(entry["path"]))
                    entry["sha256"] = await service.files.digest(path)
    if job.state.finished and (node := _ha(request)) is not None:
        missing = sorted(set(job.outputs) - {str(f["path"]) for f in files})
        if missing:  # never an empty (or partial) list for files stored elsewhere
            raise not_here(
                node,
                f"job {job.id}'s output {', '.join(missing[:5])}"
                + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""),
            )
    return json_response({"job_id": job.id, "files": files})


def _ha(request: web.Request) -> Any:
    """The HA node when this controller has other candidates (files may be elsewhere)."""
    node = request.app.get(HA)
    return node if node is not None and not getattr(node, "solo", True) else None


def not_returned(job: Any, name: str) -> str | None:
    """Why the worker did not return `name` (stdout, stderr or an output) of the job's last
    attempt, from its `output_problems` ("NAME: why"), or None."""
    prefix = f"{name}: "
    return next((p[len(prefix) :] for p in job.output_problems if p.startswith(prefix)), None)


def _output_path(request: web.Request, job: Any, rel: str) -> Path:
    """The output's path; a file the job's record names that is not here is a 503 naming
    the controller that has it (HA), not a 404; one the worker did not return (over a cap,
    unreadable) is a 404 that says why, not a bare "does not exist"."""
    service = _service(request)
    try:
        return service.files.output_path(job.number, job.id, rel)
    except NotFound:
        node = _ha(request)
        if node is not None and job.state.finished and rel in job.outputs:
            raise not_here(node, f"job {job.id}'s output {rel}") from None
        if (why := not_returned(job, rel)) is not None:
            raise NotFound(f"job {job.id}'s {rel} was not returned by its worker: {why}") from None
        raise


async def download(request: web.Request) -> web.StreamResponse:
    """An output file, whole or one byte range (xce/api/filesend.py), in a transfer slot."""
    service = _service(request)
    require_job(request, request.match_info["job_id"], "job:view")
    job = service.state.job(request.match_info["job_id"])
    rel = request.match_info["path"]
    path = _output_path(request, job, rel)
    async with gate(request).slot(f"output {rel} of job {job.id}"):
        return await send_file(request, await service.files.open(path))


TAIL_LIMIT = 256 * 1024
TAIL_MAX = 1024 * 1024


def _incomplete_char(data: bytes) -> tuple[int, int]:
    """(bytes of a UTF-8 character cut off at the end of `data`, bytes it still lacks)."""
    for i in range(1, min(3, len(data)) + 1):
        byte = data[-i]
        if byte & 0xC0 == 0x80:
            continue  # a continuation byte: look further back for the lead byte
        if byte < 0xC0:
            return 0, 0
        size = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
        return (i, size - i) if size > i else (0, 0)
    return 0, 0


def tail_window(
    first: int,
    end: int,
    requested: int | None,
    limit: int,
    running: bool,
    read: Callable[[int, int], bytes],
) -> dict[str, Any]:
    """Which bytes of a stream to answer with; `read(a, b)` returns bytes [a, b).

    The store holds bytes [first, end). With no `requested` offset the answer is the last
    `limit` bytes. Text is never cut inside a UTF-8 character: a start chosen here skips
    stray continuation bytes, and a character cut at the end is completed from what is
    held or, while the job runs, left for the next answer.
    """
    chosen = requested is None or requested < first
    if requested is None:
        start = max(first, end - limit)
    elif requested < first:
        start = first
    elif requested > end:
        # Ahead of what is held (say, a new controller whose workers have not sent yet):
        # keep the reader's place rather than send it back.
        start = requested if running else end
    else:
        start = requested
    stop = max(start, min(end, start + limit))
    data = read(start, stop) if stop > start else b""
    if chosen:
        skip = 0
        while skip < min(3, len(data)) and data[skip] & 0xC0 == 0x80:
            skip += 1
        start, data = start + skip, data[skip:]
    cut, missing = _incomplete_char(data)
    if cut:
        if stop + missing <= end:
            data += read(stop, stop + missing)
            stop += missing
        elif running:
            data, stop = data[:-cut], stop - cut
    return {
        "offset": start,
        "next_offset": start + len(data),
        "end": end,
        "truncated": (requested or 0) < first,
        "data": data.decode("utf-8", "replace"),
    }


def _file_window(path: Path | None, requested: int | None, limit: int) -> dict[str, Any]:
    if path is None:
        return tail_window(0, 0, requested, limit, False, lambda a, b: b"")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        return tail_window(0, size, requested, limit, False, lambda a, b: os.pread(fd, b - a, a))
    finally:
        os.close(fd)


async def tail(request: web.Request) -> web.Response:
    """`bpeek`: the latest output of a running job, or of the file a finished job left."""
    service = _service(request)
    job_id = request.match_info["job_id"]
    require_job(request, job_id, "job:view")
    stream = request.query.get("stream", "stdout")
    if stream not in STREAMS:
        raise InvalidRequest(f"query parameter stream must be stdout or stderr, got {stream!r}")
    offset = query_int(request, "offset", -1, 0, 2**62)
    requested = offset if offset >= 0 else None
    limit = query_int(request, "limit", TAIL_LIMIT, 1, TAIL_MAX)
    number, index = parse_job_id(job_id)
    if index is None and number in service.state.arrays:
        lowest = service.state.arrays[number].indices.first()
        raise InvalidRequest(
            f"job {job_id} is a job array: name one of its tasks, "
            f"e.g. {number}[{lowest[0] if lowest else 1}]"
        )
    job = service.state.job(job_id)
    running = job.state.active
    if running:
        first, held = request.app[TAILS].snapshot(job.id, job.attempt, stream)
        window = tail_window(
            first,
            first + len(held),
            requested,
            limit,
            True,
            lambda a, b: held[a - first : b - first],
        )
    else:
        # Only a finished attempt's file: a requeued job's is the earlier attempt's output.
        path: Path | None = None
        if job.state.finished:
            with contextlib.suppress(NotFound):
                path = _output_path(request, job, stream)
        window = await asyncio.to_thread(_file_window, path, requested, limit)
    return json_response(
        {
            "job_id": job.id,
            "stream": stream,
            "attempt": job.attempt,
            "state": job.state.value,
            "running": running,
            **window,
            # A finished job's stream the worker did not return: why the file is empty.
            **({"not_returned": why} if not running and (why := not_returned(job, stream)) else {}),
        }
    )


async def upload(request: web.Request) -> web.Response:
    """Stage an input file; it is the caller's, and counts against their upload quota
    until a job uses it (or upload_ttl_s passes and it is deleted)."""
    service = _service(request)
    owner = identity(request).user
    file = declared(request, "upload")
    service.files.check_upload_room(owner, file.size)  # 413 before the body is read (or waited for)
    async with gate(request).slot("upload"):
        stored = await service.files.save_upload(
            body_chunks(request, "upload", file),
            owner=owner,
            declared=file.size,
            sha256=file.expected if file.trailing else file.sha256,
        )
    # To the standbys (sync mode: before the answer), so a submit after a failover finds it.
    await service.files_replicated(
        service.ship_files([(name, "put") for name in upload_names(stored.upload_id)])
    )
    return json_response(
        {"upload_id": stored.upload_id, "size": stored.size, "sha256": stored.sha256}, status=201
    )


def _uploads_owner(request: web.Request) -> str | None:
    """Whose uploads the caller may see and delete: their own; None (all) for callers who
    control every job (admin, operator)."""
    who = identity(request)
    return None if job_scope(who.permissions, "job:control") == "all" else who.user


async def delete_upload(request: web.Request) -> web.Response:
    """Delete an upload no job has used yet; someone else's is a 404, as if absent."""
    service = _service(request)
    upload_id = request.match_info["upload_id"]
    gone = service.files.delete_upload(upload_id, _uploads_owner(request))
    service.ship_files([(name, "drop") for name in upload_names(upload_id)])
    return json_response({"upload_id": upload_id, "deleted": True, "size": gone.size})


async def list_uploads(request: web.Request) -> web.Response:
    """The caller's uploads no job has used yet, with their quota and when each expires."""
    service = _service(request)
    files = service.files
    who = identity(request).user
    owner = _uploads_owner(request)
    rows = [
        {
            "upload_id": k,
            "owner": u.owner,
            "size": u.size,
            "created": u.created,
            "expires": u.created + files.ttl_s,
        }
        for k, u in files.list_uploads(owner).items()
    ]
    return json_response(
        {
            "uploads": rows,
            "user": who,
            "used_bytes": files.usage(who),
            "quota_bytes": files.quota_bytes,
            "ttl_s": files.ttl_s,
        }
    )


_STATE = "(PEND|PSUSP|RUN|USUSP|SSUSP|DONE|EXIT)"
STATE_LIST = {"type": "string", "pattern": f"^({_STATE}(,{_STATE})*)?$"}
ROUTES = [
    Route(
        "POST",
        "/api/v1/jobs",
        submit,
        "Submit a job or job array",
        "job:submit",
        "jobs",
        body=SubmitBody,
        ok_status=201,
    ),
    Route(
        "GET",
        "/api/v1/jobs",
        list_,
        "List jobs with filters and paging",
        "job:view",
        "jobs",
        query=(
            Param("state", "comma-separated states, e.g. PEND,RUN", STATE_LIST),
            Param("user", "only this user's jobs; all: every user's (as bjobs -u all)"),
            Param("queue", "only this queue"),
            Param("host", "only jobs on this host"),
            Param("array", "only this array"),
            Param("offset", "rows to skip", {"type": "integer", "minimum": 0}),
            Param("limit", "rows to return", {"type": "integer", "minimum": 1, "maximum": 100000}),
        ),
    ),
    Route(
        "GET",
        "/api/v1/jobs/{job_id}",
        show,
        "Show one job, task or whole array",
        "job:view",
        "jobs",
        response=JobView,
    ),
    *[
        Route(
            "POST",
            f"/api/v1/jobs/{{job_id}}/{action}",
            _control(action),
            f"{action.capitalize()} a job, a task or every task of an array",
            "job:control",
            "jobs",
        )
        for action in ("stop", "resume", "requeue", "kill")
    ],
    Route(
        "GET",
        "/api/v1/jobs/{job_id}/tail",
        tail,
        "Latest stdout or stderr of a job (bpeek): live while it runs, else from its file",
        "job:view",
        "jobs",
        response=TailView,
        query=(
            Param(
                "stream", "stdout (default) or stderr", {"type": "string", "enum": list(STREAMS)}
            ),
            Param(
                "offset",
                "absolute byte offset to read from; none: the latest bytes",
                {"type": "integer", "minimum": 0, "maximum": 2**62},
            ),
            Param(
                "limit",
                f"most bytes to return (default {TAIL_LIMIT})",
                {"type": "integer", "minimum": 1, "maximum": TAIL_MAX},
            ),
        ),
    ),
    Route(
        "GET",
        "/api/v1/jobs/{job_id}/files",
        list_files,
        "List a job's output files",
        "job:view",
        "jobs",
    ),
    Route(
        "GET",
        "/api/v1/jobs/{job_id}/files/{path:.+}",
        download,
        "Download an output file (stdout, stderr or a declared output); Range: bytes=N- or "
        "N-M answers 206, X-XCE-SHA256 is the whole file's SHA-256",
        "job:view",
        "jobs",
        binary_response=True,
    ),
    Route(
        "POST",
        "/api/v1/uploads",
        upload,
        "Upload an input file (X-XCE-SHA256 optional: checked); returns its id and SHA-256",
        "job:submit",
        "jobs",
        raw_body=True,
        ok_status=201,
    ),
    Route(
        "GET",
        "/api/v1/uploads",
        list_uploads,
        "Uploads no job has used yet (yours; an admin's: everyone's), with your quota",
        "job:submit",
        "jobs",
    ),
    Route(
        "DELETE",
        "/api/v1/uploads/{upload_id}",
        delete_upload,
        "Delete an upload no job has used yet (your own; an admin: anyone's)",
        "job:submit",
        "jobs",
    ),
]
