"""The worker decodes the controller's answer once, into `protocol.Assignment` and
`protocol.Share` (xce/worker/agent/reconcile.py): what it keeps in spec.json is still the
controller's plain JSON, a spec.json written before (a plain dict) is still read after a
restart, and an answer it cannot read is applied not at all, without ending the worker."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.unit.test_worker_messages import FakeClient, make_agent
from tests.worker.assignments import assignment
from xce.controller.workers import assignment as controller_assignment
from xce.controller.workers import share_assignment
from xce.core.model import HostSlots, JobRecord, JobSpec, JobState
from xce.protocol import worker as protocol
from xce.worker.agent.reconcile import BadAnswer
from xce.worker.attempt import executor, recovery
from xce.worker.attempt.running import RunningJob, attempt_name
from xce.worker.cgroups import Limits
from xce.worker.keeper import fence
from xce.worker.keeper.process import SPEC, write_json

LAUNCH = {"credential": "c" * 64, "tasks": {"w1": "w1:7000", "w2": ""}, "cwd": "/home/alice"}


def _record(**spec: Any) -> JobRecord:
    job_spec = JobSpec("alice", "normal", command="hostname", slots=2, walltime_s=60, **spec)
    return JobRecord("7", 7, job_spec, JobState.RUN, 1000.0, attempt=1, host="w1")


def _sent() -> dict[str, Any]:
    """One `jobs` entry exactly as the controller builds it, and as JSON brings it."""
    return json.loads(json.dumps({**controller_assignment(_record()), "launch": LAUNCH}))


def test_the_spec_keeps_the_assignment_as_the_controller_sent_it(tmp_path: Path) -> None:
    sent = _sent()
    bin_added = {**sent, "launch": {**sent["launch"], "bin": "/x/bin"}}
    for plain in (sent, bin_added):
        a = msgspec.convert(plain, protocol.Assignment)
        job = RunningJob(a, tmp_path, tmp_path)
        ctx = executor.LaunchContext(
            launcher=None,  # type: ignore[arg-type]  # _spec does not launch
            backend=None,  # type: ignore[arg-type]
            account=None,
            host="w1",
            pids_limit=0,
            worker_state=tmp_path,
            contact=fence.Contact(1.0, 60.0),
        )
        spec = executor._spec(job, ["/bin/true"], {}, "c", Limits(), ctx)
        # the same JSON, key for key and in order, as the dict the worker kept before
        assert json.dumps(spec["assignment"]) == json.dumps(plain)
        assert (spec["job_id"], spec["attempt"]) == ("7", 1)


def test_a_spec_written_before_the_change_is_read_after_it(tmp_path: Path) -> None:
    """A spec.json of an earlier worker (the assignment as a plain dict, with a key this
    worker does not know) is still found after a restart, and its report still sent."""
    agent = make_agent(tmp_path, FakeClient())
    spool = agent.state.spool
    spool.make()
    plain = {**_sent(), "newer_key": [1, 2]}
    attempt_dir = spool.state / attempt_name("7", 1)
    attempt_dir.mkdir(mode=0o700)
    old_spec = {"job_id": "7", "attempt": 1, "assignment": plain, "argv": ["/bin/true"]}
    old_spec |= {"cwd": str(tmp_path), "job_dir": str(tmp_path), "cgroup": "c", "uid": None}
    write_json(str(attempt_dir), SPEC, old_spec)
    report = {"attempt": 1, "exit_code": 0}
    write_json(str(attempt_dir), recovery.REPORT, report)
    (found,) = asyncio.run(recovery.recover(spool, agent.state.backend))
    assert found.report == report and found.job.key == ("7", 1)
    a = found.job.assignment
    assert a == msgspec.convert(_sent(), protocol.Assignment)
    assert a.launch is not None and a.launch.tasks == LAUNCH["tasks"]
    assert a.hosts == [("w1", 2)] and a.walltime_s == 60 and a.user == "alice"


def test_a_spec_without_a_readable_assignment_is_dropped_like_an_unreadable_one(
    tmp_path: Path,
) -> None:
    agent = make_agent(tmp_path, FakeClient())
    spool = agent.state.spool
    spool.make()
    attempt_dir = spool.state / attempt_name("7", 1)
    attempt_dir.mkdir(mode=0o700)
    write_json(str(attempt_dir), SPEC, {"assignment": {"job_id": "7"}, "cgroup": "c"})
    assert asyncio.run(recovery.recover(spool, agent.state.backend)) == []
    assert not attempt_dir.exists()


def test_shares_decode_as_the_controller_sends_them() -> None:
    hosts = (HostSlots("w1", 2, ()), HostSlots("w2", 3, ("gpu:1",)))
    record = dataclasses.replace(_record(memory_mb=100), allocation=hosts)
    sent = {**share_assignment(record, "w2"), "launch": LAUNCH}
    share = msgspec.convert(json.loads(json.dumps(sent)), protocol.Share)
    assert (share.job_id, share.attempt, share.action, share.user) == ("7", 1, "run", "alice")
    assert share.slots == 3 and share.devices == ["gpu:1"]
    assert msgspec.json.encode(share) == msgspec.json.encode(sent)


def test_the_answer_is_decoded_once_and_running_jobs_follow_it(tmp_path: Path) -> None:
    agent = make_agent(tmp_path, FakeClient())
    job = RunningJob(assignment(job_id="7", attempt=1, walltime_s=60, slots=2), tmp_path, tmp_path)
    agent.state.running[job.key] = job
    entry = msgspec.to_builtins(job.assignment)
    entry.update(action="stop", walltime_s=120, unknown_key="ignored")
    asyncio.run(agent.reconciler.reconcile({"version": 4, "jobs": [entry], "shares": []}))
    assert agent.state.version == 4 and agent.state.running[("7", 1)] is job
    assert (job.assignment.action, job.assignment.walltime_s) == ("stop", 120)
    assert job.assignment.slots == 2  # the rest as it was


@pytest.mark.parametrize(
    "answer",
    [
        {"version": 5, "jobs": [{"attempt": 1, "action": "run", "user": "alice"}]},  # no job_id
        {"version": 5, "jobs": [{**_sent(), "attempt": "one"}]},
        {"version": 5, "shares": [{"job_id": "7"}]},
        None,
    ],
)
def test_an_answer_the_worker_cannot_read_is_not_applied(tmp_path: Path, answer: Any) -> None:
    agent = make_agent(tmp_path, FakeClient())
    agent.state.version = 3
    with pytest.raises(BadAnswer, match="cannot read"):
        asyncio.run(agent.reconciler.reconcile(answer))
    assert agent.state.version == 3 and not agent.state.starting and not agent.state.running


class BadThenBlocked(FakeClient):
    """Answers the first poll with an entry that has no `job_id`, then waits."""

    def __init__(self) -> None:
        super().__init__()
        self.polls = 0
        self.second = asyncio.Event()

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if not path.endswith("/assignments"):
            return await super().request(method, path, **kwargs)
        self.polls += 1
        if self.polls == 1:
            return {"version": 9, "jobs": [{"attempt": 0, "action": "run"}]}
        self.second.set()
        await asyncio.Event().wait()


def test_a_bad_answer_does_not_end_the_poll_loop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client = BadThenBlocked()
    agent = make_agent(tmp_path, client)
    before = agent.state.version

    async def main() -> None:
        poll = asyncio.create_task(agent.link.poll_loop())
        await asyncio.wait_for(client.second.wait(), 10)
        assert not poll.done()
        poll.cancel()

    with caplog.at_level(logging.ERROR, logger="xce.worker"):
        asyncio.run(main())
    assert client.polls == 2 and agent.state.version == before  # nothing of it applied
    assert any("cannot read" in r.getMessage() for r in caplog.records)


def test_the_launch_bin_is_added_to_the_launch_info() -> None:
    a = msgspec.convert(_sent(), protocol.Assignment)
    assert a.launch is not None
    b = msgspec.structs.replace(a, launch=msgspec.structs.replace(a.launch, bin="/b"))
    assert msgspec.to_builtins(b)["launch"] == {**LAUNCH, "bin": "/b"}
