"""The worker's register, heartbeat and finish messages are built from the protocol's
Structs (xce/protocol/worker.py): what it sends is exactly what the controller decodes."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec

from tests.worker.assignments import assignment
from xce.client import ApiError
from xce.config.loader import parse_config
from xce.protocol import worker as protocol
from xce.worker.agent import tail
from xce.worker.agent.worker_agent import WorkerAgent
from xce.worker.attempt.running import RunningJob


class FakeClient:
    """Records each request; answers like a controller that takes everything, except
    that it can refuse a registration that says how jobs are contained."""

    def __init__(self, refuse_containment: bool = False) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.refuse_containment = refuse_containment

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        self.sent.append((path, kwargs))
        body = msgspec.json.decode(kwargs["data"]) if "data" in kwargs else kwargs.get("json")
        if self.refuse_containment and "containment" in (body or {}):
            raise ApiError(400, "invalid_request", "body.containment is not a known field")
        return {"jobs": [], "version": 1}


def make_agent(tmp_path: Path, client: FakeClient) -> WorkerAgent:
    worker = {"name": "w1", "spool_dir": str(tmp_path), "cgroup": "none", "slots": 2}
    config = parse_config({"worker": {**worker, "memory_mb": 512}})
    agent = WorkerAgent(config, client)  # type: ignore[arg-type]  # a duck-typed client
    agent.tasks.address = "w1:7000"
    return agent


def sent(client: FakeClient, kind: type[msgspec.Struct]) -> Any:
    kwargs = client.sent[-1][1]
    assert kwargs["headers"]["Content-Type"] == "application/json"
    return msgspec.json.decode(kwargs["data"], type=kind)


def test_register_is_the_protocols_register(tmp_path: Path) -> None:
    client = FakeClient()
    agent = make_agent(tmp_path, client)
    asyncio.run(agent.link.register())
    body = sent(client, protocol.Register)
    assert (body.host, body.slots, body.memory_mb) == ("w1", 2, 512)
    assert body.task_address == "w1:7000" and body.containment["kind"] == "none"
    raw = msgspec.json.decode(client.sent[-1][1]["data"])
    assert "gres" not in raw  # no devices: the key is left out, as before


def test_an_older_controller_gets_a_register_without_containment(tmp_path: Path) -> None:
    client = FakeClient(refuse_containment=True)
    asyncio.run(make_agent(tmp_path, client).link.register())
    assert len(client.sent) == 2 and sent(client, protocol.Register).containment == {}


def test_a_heartbeat_carries_running_jobs_and_their_output(tmp_path: Path) -> None:
    client = FakeClient()
    agent = make_agent(tmp_path, client)
    job = RunningJob(assignment(job_id="7", attempt=1), tmp_path, tmp_path)
    agent.state.running[job.key] = job
    chunk = tail.Chunk(job, "stdout", 5, b"hello")
    asyncio.run(agent.link._heartbeat([chunk]))
    path, _ = client.sent[-1]
    assert path == "/api/v1/workers/w1/heartbeat"
    body = sent(client, protocol.Heartbeat)
    (running,) = body.running
    assert (running.job_id, running.attempt) == ("7", 1)
    assert running.output is not None and running.output.stdout is not None
    assert running.output.stdout.offset == 5 and running.output.stderr is None
    assert set(body.load) == {"load1", "load5", "load15", "mem_free_mb"} and body.shares == ()


def test_a_finish_report_is_the_protocols_finished(tmp_path: Path) -> None:
    agent = make_agent(tmp_path, FakeClient())
    agent.reconciler.finish_unstarted(assignment(job_id="7", attempt=2), "x" * 2000)
    body = agent.state.pending[("7", 2)]
    finished = msgspec.convert(body, protocol.Finished)
    assert finished.attempt == 2 and finished.exit_code is None
    assert finished.reason == "x" * 1000  # cut to what the protocol allows
    assert "outputs" not in body and "host_failure" not in body  # defaults left out


def test_an_assignment_decodes_and_encodes_as_the_controller_sends_it() -> None:
    """`protocol.Assignment` has exactly the keys (and order) of what the controller sends a
    worker for a job (xce/controller/workers.py): decoding and encoding it again gives the
    same bytes, so the worker may read it through the Struct without a wire change."""
    from xce.controller.workers import assignment
    from xce.core.model import JobRecord, JobSpec, JobState

    spec = JobSpec(
        "alice",
        "normal",
        command="hostname",
        slots=2,
        memory_mb=100,
        walltime_s=60,
        env=(("A", "1"),),
        cwd="/home/alice",
        inputs=("in.txt",),
        outputs=("out.txt",),
        stdout_file="o.txt",
    )
    job = JobRecord("7", 7, spec, JobState.RUN, 1000.0, attempt=1, host="w1", start_time=1001.5)
    launch = {"credential": "c" * 64, "tasks": {"w1": "w1:7000"}, "cwd": "/home/alice"}
    context = {
        "job_env": ["slurm", "pbs"],
        "missing_submit_dir": "job_dir",
        "array": {"count": 3, "min": 1, "max": 5},
    }
    sent = msgspec.json.encode({**assignment(job, context), "launch": launch})
    decoded = msgspec.json.decode(sent, type=protocol.Assignment)
    assert (decoded.job_id, decoded.attempt, decoded.action) == ("7", 1, "run")
    assert decoded.hosts == [("w1", 2)]
    assert decoded.job_env == ["slurm", "pbs"] and decoded.missing_submit_dir == "job_dir"
    assert decoded.array == protocol.ArrayExtent(count=3, min=1, max=5)
    assert decoded.launch is not None and decoded.launch.bin == ""
    assert msgspec.json.encode(decoded) == sent
