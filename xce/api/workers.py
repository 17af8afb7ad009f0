"""Worker protocol routes: register, heartbeat, desired-state long-poll, files, finish."""

from __future__ import annotations

import msgspec
from aiohttp import web

from xce.api.http import GATEWAY, HA, SERVICE, TAILS, identity, json_response, query_int, read_body
from xce.api.routes import Param, Route
from xce.controller.requests import FinishReport, WorkerInfo
from xce.controller.service import ControllerService
from xce.controller.shareusage import ShareReport
from xce.controller.workers import WorkerGateway
from xce.core.errors import Conflict, Forbidden, NotFound
from xce.core.gres import host_pairs
from xce.core.model import JobRecord
from xce.core.state_base import parse_job_id
from xce.protocol.worker import Finished, Heartbeat, Register
from xce.store.files import safe_relative_path
from xce.store.replicated_names import not_here, output_name, outputs_name


def _gateway(request: web.Request) -> WorkerGateway:
    return request.app[GATEWAY]


async def register(request: web.Request) -> web.Response:
    body = await read_body(request, Register)
    bound = identity(request).host
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
    )
    return json_response(await _gateway(request).register(info))


async def heartbeat(request: web.Request) -> web.Response:
    body = await read_body(request, Heartbeat)
    gateway = _gateway(request)
    host = request.match_info["host"]
    shares = [ShareReport(**msgspec.structs.asdict(item)) for item in body.shares]
    result = await gateway.heartbeat(host, list(body.running), body.load, shares)
    # New stdout/stderr bytes of running jobs: kept in memory for the tail route only.
    outputs = [msgspec.to_builtins(item) for item in body.running if item.output is not None]
    request.app[TAILS].accept_reports(host, outputs, gateway.owns)
    return json_response(result)


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


async def fetch_input(request: web.Request) -> web.FileResponse:
    service: ControllerService = request.app[SERVICE]
    job = _owned(request)
    try:
        path = service.files.input_path(job.number, request.match_info["path"])
    except NotFound:
        node = request.app.get(HA)
        rel = request.match_info["path"]
        if node is not None and not getattr(node, "solo", True) and rel in job.spec.inputs:
            raise not_here(node, f"input {rel} of job {job.id}") from None
        raise
    return web.FileResponse(path, headers={"Content-Type": "application/octet-stream"})


async def store_output(request: web.Request) -> web.Response:
    service: ControllerService = request.app[SERVICE]
    job = _owned(request)
    rel = safe_relative_path(request.match_info["path"], "output path")
    if request.query.get("first") == "1":
        service.files.clear_outputs(job.number, job.id)
        service.ship_files([(outputs_name(job.number, job.id), "drop")])
    size = await service.files.save_output(
        job.number, job.id, rel, request.content.iter_chunked(1 << 16)
    )
    # To the standbys (in sync mode before this answer, so before the finish report).
    await service.files_replicated(
        service.ship_files([(output_name(job.number, job.id, rel), "put")])
    )
    return json_response({"path": rel, "size": size}, status=201)


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
