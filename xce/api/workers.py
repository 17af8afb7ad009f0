"""Worker protocol routes: register, heartbeat (alone or relayed in batches), desired-state
long-poll, files, finish."""

from __future__ import annotations

import logging
from typing import Any

import msgspec
from aiohttp import web

from xce.api.auth import runtime
from xce.api.filesend import not_modified, send_file
from xce.api.http import (
    GATEWAY,
    HA,
    SERVICE,
    TAILS,
    identity,
    json_response,
    parse_json_text,
    query_int,
    read_body,
)
from xce.api.routes import Param, Route
from xce.api.transfers import body_chunks, declared, gate
from xce.controller.requests import FinishReport, WorkerInfo
from xce.controller.service import ControllerService
from xce.controller.shareusage import ShareReport
from xce.controller.workers import KeyHolder, WorkerGateway
from xce.core.errors import Conflict, Forbidden, InvalidRequest, NotFound, XceError
from xce.core.gres import host_pairs
from xce.core.model import JobRecord
from xce.core.state_base import parse_job_id
from xce.core.versions import VersionSkew
from xce.protocol import decoding
from xce.protocol.relay_keys import answer_proof
from xce.protocol.worker import (
    Finished,
    Heartbeat,
    Register,
    RelayedHeartbeats,
    registration_refusal,
)
from xce.store.files import safe_relative_path
from xce.store.replicated_names import not_here, output_name, outputs_name

log = logging.getLogger("xce.api")


def _check_versions(raw: bytes) -> None:
    """Raise `VersionSkew` if a registration body that did not decode names a protocol or
    release this controller refuses."""
    try:
        loose = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return
    if isinstance(loose, dict):
        why = registration_refusal(loose.get("protocol"), loose.get("release"))
        if why is not None:
            raise VersionSkew(why)


def _gateway(request: web.Request) -> WorkerGateway:
    return request.app[GATEWAY]


async def register(request: web.Request) -> web.Response:
    try:
        body = await read_body(request, Register)
    except InvalidRequest:
        # A newer worker's body may hold fields this build does not know: its versions
        # say why more clearly than the first unknown field does.
        _check_versions(await request.read())
        raise
    why = registration_refusal(body.protocol, body.release)
    if why is not None:
        raise VersionSkew(why)
    who = identity(request)
    bound = who.host
    if bound is not None and body.host != bound:
        raise Forbidden(f"this worker token is bound to host {bound}, not {body.host}")
    info = WorkerInfo(
        body.host,
        body.slots,
        body.memory_mb,
        tuple(sorted(body.attributes.items())),
        tuple(body.containment.items()),  # in the worker's order, for display
        gres=host_pairs(body.gres),
        task_address=body.task_address or "",
        release=body.release,
    )
    holder = None  # an identity without a token (a local socket's peer): no end to the key
    if who.issued_at is not None and who.expires_at is not None:
        holder = KeyHolder(who.user, who.issued_at, who.expires_at)
    return json_response(await _gateway(request).register(info, holder))


async def _take_heartbeat(app: web.Application, host: str, body: Heartbeat) -> dict[str, Any]:
    gateway = app[GATEWAY]
    shares = [ShareReport(**msgspec.structs.asdict(item)) for item in body.shares]
    result = await gateway.heartbeat(host, list(body.running), body.load, shares)
    # New stdout/stderr bytes of running jobs: kept in memory for the tail route only.
    outputs = [msgspec.to_builtins(item) for item in body.running if item.output is not None]
    app[TAILS].accept_reports(host, outputs, gateway.owns)
    return result


async def heartbeat(request: web.Request) -> web.Response:
    body = await read_body(request, Heartbeat)
    return json_response(await _take_heartbeat(request.app, request.match_info["host"], body))


async def relayed_heartbeats(request: web.Request) -> web.Response:
    """Many hosts' heartbeats in one request, from a relay (Slurm's tree fan-out of node
    messages): one request, parse and answer instead of one per host. Each is checked by
    the relay key of its host's registration (xce/protocol/relay_keys.py) and taken as if
    it had come alone, and answered in its own entry, in order, with a proof its host
    checks: one host's refusal never refuses the others'."""
    body = await read_body(request, RelayedHeartbeats)
    gateway = request.app[GATEWAY]
    revoked = runtime(request).tokens.revocations.revoked
    answers: list[dict[str, Any]] = []
    for entry in body.heartbeats:
        try:
            key = gateway.relayed(entry.host, entry.seq, entry.heartbeat, entry.mac, revoked)
            heartbeat = decoding.decode(entry.heartbeat.encode(), Heartbeat, parse_json_text)
            answer = await _take_heartbeat(request.app, entry.host, heartbeat)
        except XceError as exc:
            error = {"code": exc.code, "message": exc.message}
            answers.append({"host": entry.host, "status": exc.http_status, "error": error})
        except Exception:  # one host's fault must not cost the others their answers
            log.exception("relayed heartbeat of host %s failed", entry.host)
            error = {"code": "internal", "message": "internal error"}
            answers.append({"host": entry.host, "status": 500, "error": error})
        else:
            proof = answer_proof(key, entry.host, entry.seq, answer)
            answers.append({"host": entry.host, "status": 200, "answer": answer, "proof": proof})
    return json_response({"answers": answers})


async def assignments(request: web.Request) -> web.Response:
    version = query_int(request, "version", -1, -1, 2**62)
    timeout = query_int(request, "timeout", 0, 0, 60)
    host = request.match_info["host"]
    gateway = _gateway(request)
    if version < 0 or timeout == 0:
        return json_response(await gateway.durable_assignments(host))
    return json_response(await gateway.wait_assignments(host, version, timeout))


def _owned(request: web.Request) -> JobRecord:
    gateway = _gateway(request)
    attempt = query_int(request, "attempt", -1, 0, 2**31)
    host, job_id = request.match_info["host"], request.match_info["job_id"]
    job = gateway.owns(host, job_id, attempt)
    if job is None:
        raise Conflict(f"job {job_id} attempt {attempt} is not running on host {host}")
    return job


async def fetch_input(request: web.Request) -> web.StreamResponse:
    """An input of a job this host runs, whole or one byte range, in a transfer slot; 304
    (no slot taken) when `If-None-Match` names its SHA-256: the worker's copy is current."""
    service: ControllerService = request.app[SERVICE]
    job = _owned(request)
    rel = request.match_info["path"]
    try:
        path = service.files.input_path(job.number, rel)
    except NotFound:
        node = request.app.get(HA)
        if node is not None and not getattr(node, "solo", True) and rel in job.spec.inputs:
            raise not_here(node, f"input {rel} of job {job.id}") from None
        raise
    opened = await service.files.open(path)
    unchanged = not_modified(request, opened, "input")  # no body: no transfer slot
    if unchanged is not None:
        return unchanged
    try:
        async with gate(request).slot(f"input {rel} of job {job.id}"):
            return await send_file(request, opened, "input")
    except BaseException:
        opened.handle.close()  # no slot came (busy, or the worker went away)
        raise


async def store_output(request: web.Request) -> web.Response:
    """An output a worker returns: refused from its Content-Length before it is read when
    it would pass a limit (413), checked against its X-XCE-SHA256 when sent (400)."""
    service: ControllerService = request.app[SERVICE]
    job = _owned(request)
    rel = safe_relative_path(request.match_info["path"], "output path")
    file = declared(request, rel)
    size = file.size
    if request.query.get("first") == "1":
        await service.files.clear_outputs(job.number, job.id)
        service.ship_files([(outputs_name(job.number, job.id), "drop")])
    owner = job.spec.user  # a job's outputs are its owner's, on their quota
    service.files.check_output_room(job.id, rel, size, owner)
    async with gate(request).slot(f"output {rel} of job {job.id}"):
        stored = await service.files.save_output(
            job.number,
            job.id,
            rel,
            body_chunks(request, "output", file),
            size,
            file.expected if file.trailing else file.sha256,
            owner,
        )
    # To the standbys (in sync mode before this answer, so before the finish report).
    await service.files_replicated(
        service.ship_files([(output_name(job.number, job.id, rel), "put")])
    )
    return json_response({"path": rel, "size": stored.size, "sha256": stored.sha256}, status=201)


async def finished(request: web.Request) -> web.Response:
    body = await read_body(request, Finished)
    parse_job_id(request.match_info["job_id"])  # a malformed id is a 400, not a stale report
    report = FinishReport(request.match_info["job_id"], **msgspec.structs.asdict(body))
    accepted = await _gateway(request).finished(request.match_info["host"], report)
    service: ControllerService = request.app[SERVICE]
    service.files.outputs_done(report.job_id)
    return json_response({"accepted": accepted})


ATTEMPT = Param(
    "attempt",
    "the attempt the worker is running",
    {"type": "integer", "minimum": 0, "maximum": 2**31},
)
ROUTES = [
    Route(
        "POST",
        "/api/v1/workers/register",
        register,
        "A worker joins (or rejoins); returns its desired jobs",
        "worker",
        "workers",
        body=Register,
    ),
    Route(
        "POST",
        "/api/v1/workers/heartbeats",
        relayed_heartbeats,
        "Many hosts' heartbeats relayed in one batch, each signed with its host's relay key",
        "worker",
        "workers",
        body=RelayedHeartbeats,
    ),
    Route(
        "POST",
        "/api/v1/workers/{host}/heartbeat",
        heartbeat,
        "Heartbeat with load, per-job usage and new job output",
        "worker",
        "workers",
        body=Heartbeat,
    ),
    Route(
        "GET",
        "/api/v1/workers/{host}/assignments",
        assignments,
        "Jobs this host should run, stop or kill; long-polls while version is current",
        "worker",
        "workers",
        query=(
            Param("version", "the version the worker has", {"type": "integer"}),
            Param(
                "timeout",
                "seconds to wait for a change (0-60)",
                {"type": "integer", "minimum": 0, "maximum": 60},
            ),
        ),
    ),
    Route(
        "GET",
        "/api/v1/workers/{host}/jobs/{job_id}/inputs/{path:.+}",
        fetch_input,
        "Fetch an input file of a job this host runs",
        "worker",
        "workers",
        query=(ATTEMPT,),
        binary_response=True,
    ),
    Route(
        "PUT",
        "/api/v1/workers/{host}/jobs/{job_id}/outputs/{path:.+}",
        store_output,
        "Return an output file of a job this host ran",
        "worker",
        "workers",
        query=(ATTEMPT, Param("first", "1 on the first file: clears older outputs")),
        raw_body=True,
        ok_status=201,
    ),
    Route(
        "POST",
        "/api/v1/workers/{host}/jobs/{job_id}/finished",
        finished,
        "Report that an attempt ended, with exit status and usage",
        "worker",
        "workers",
        body=Finished,
    ),
]
