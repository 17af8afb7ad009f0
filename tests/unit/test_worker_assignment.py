"""The worker decodes the controller's answer once, into `protocol.Assignment` and
`protocol.Share` (xce/worker/agent/reconcile.py): what it keeps in spec.json is still the
controller's plain JSON, a spec.json written before (a plain dict) is still read after a
restart, an entry it cannot read leaves what runs under its key alone while the rest of the
answer applies, and an answer it cannot key is applied not at all, without ending the
worker."""

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
from xce.worker.devices.gpus import HostDevices
from xce.worker.keeper import fence
from xce.worker.keeper.process import SPEC, write_json
from xce.worker.tasks.shares import HeldShare

LAUNCH = {"credential": "c" * 64, "tasks": {"w1": "w1:7000", "w2": ""}, "cwd": "/home/alice"}


def _record(**spec: Any) -> JobRecord:
    job_spec = JobSpec("alice", "normal", command="hostname", slots=2, walltime_s=60, **spec)
    return JobRecord("7", 7, job_spec, JobState.RUN, 1000.0, attempt=1, host="w1")


def _sent() -> dict[str, Any]:
    """One `jobs` entry exactly as the controller builds it, and as JSON brings it."""
    context = {"job_env": ["slurm", "lsf", "pbs"], "missing_submit_dir": "fail", "array": None}
    sent = {**controller_assignment(_record(), context), "launch": LAUNCH}
    return json.loads(json.dumps(sent))


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
            private_tmp=False,
            devices=HostDevices(),
        )
        spec = executor._spec(job, ["/bin/true"], {}, "c", Limits(), ctx)
        # the same JSON, key for key and in order, as the dict the worker kept before
        assert json.dumps(spec["assignment"]) == json.dumps(plain)
        assert (spec["job_id"], spec["attempt"]) == ("7", 1)


REPORT = {"attempt": 1, "exit_code": 0}


def _recovered(tmp_path: Path, plain: dict[str, Any]) -> tuple[Path, recovery.Recovered]:
    """What a restarted worker recovers of attempt 7/1 whose spec.json holds `plain` as its
    assignment (and whose finish report is saved beside it)."""
    agent = make_agent(tmp_path, FakeClient())
    spool = agent.state.spool
    spool.make()
    attempt_dir = spool.state / attempt_name("7", 1)
    attempt_dir.mkdir(mode=0o700)
    old_spec = {"job_id": "7", "attempt": 1, "assignment": plain, "argv": ["/bin/true"]}
    old_spec |= {"cwd": str(tmp_path), "job_dir": str(tmp_path), "cgroup": "c", "uid": None}
    write_json(str(attempt_dir), SPEC, old_spec)
    write_json(str(attempt_dir), recovery.REPORT, REPORT)
    (found,) = asyncio.run(recovery.recover(spool, agent.state.backend))
    return attempt_dir, found


def test_a_spec_written_before_the_change_is_read_after_it(tmp_path: Path) -> None:
    """A spec.json of an earlier worker (the assignment as a plain dict, with a key this
    worker does not know) is still found after a restart, and its report still sent."""
    plain = {**_sent(), "newer_key": [1, 2]}
    _, found = _recovered(tmp_path, plain)
    assert found.report == REPORT and found.job.key == ("7", 1)
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


def test_a_live_attempt_whose_spec_no_longer_decodes_whole_is_adopted(tmp_path: Path) -> None:
    """A spec.json an older worker wrote with a value this one declares otherwise (a null
    launch credential) must not drop the attempt: dropped, its cgroup was killed as unclaimed
    and the controller's next answer started the same attempt again (it ran twice)."""
    plain = {**_sent(), "launch": {**LAUNCH, "credential": None}, "slots": None}
    attempt_dir, found = _recovered(tmp_path, plain)
    assert attempt_dir.exists() and found.job.key == ("7", 1) and found.report == REPORT
    a = found.job.assignment
    assert (a.user, a.walltime_s, a.hosts) == ("alice", 60, [("w1", 2)])  # what decodes stays
    assert a.launch is None and a.slots == 1  # what does not takes its default


def _running(agent: Any, job_id: str) -> RunningJob:
    job = RunningJob(assignment(job_id=job_id, attempt=1), Path("/nonexistent"), Path("/"))
    agent.state.running[job.key] = job
    return job


def test_an_unreadable_entry_leaves_its_running_attempt_alone_and_the_rest_applies(
    tmp_path: Path,
) -> None:
    """One entry the worker cannot read (its key can be read) must neither block the whole
    answer (kills of other jobs would never apply) nor get its running attempt killed as
    "no longer assigned"."""
    agent = make_agent(tmp_path, FakeClient())
    kept, stopped = _running(agent, "7"), _running(agent, "8")
    entry = {**msgspec.to_builtins(kept.assignment), "slots": "many"}
    stop = {**msgspec.to_builtins(stopped.assignment), "action": "stop", "walltime_s": 90}
    asyncio.run(agent.reconciler.reconcile({"version": 6, "jobs": [entry, stop], "shares": []}))
    assert agent.state.version == 6
    assert agent.state.running == {("7", 1): kept, ("8", 1): stopped}  # nobody taken away
    assert kept.assignment.action == "run" and stopped.assignment.walltime_s == 90


def test_an_unreadable_entry_of_a_job_not_started_ends_it_with_the_reason(
    tmp_path: Path,
) -> None:
    agent = make_agent(tmp_path, FakeClient())
    entry = {**_sent(), "job_id": "9", "user": None}
    asyncio.run(agent.reconciler.reconcile({"version": 2, "jobs": [entry], "shares": []}))
    assert not agent.state.starting and not agent.state.running
    body = agent.state.pending[("9", 1)]
    assert body["exit_code"] is None
    assert body["reason"].startswith("failed to start: the worker cannot read its assignment")
    asyncio.run(agent.reconciler.reconcile({"version": 3, "jobs": [entry], "shares": []}))
    assert list(agent.state.pending) == [("9", 1)]  # reported once, not again at each answer


class _Cgroup:
    """A share's cgroup that records being killed."""

    killed = False

    def kill(self) -> None:
        self.killed = True

    def remove(self) -> None:
        pass


def test_an_unreadable_share_keeps_its_cgroup_but_takes_no_new_tasks(tmp_path: Path) -> None:
    agent = make_agent(tmp_path, FakeClient())
    hosts = (HostSlots("w2", 2, ()), HostSlots("w1", 3, ()))
    record = dataclasses.replace(_record(memory_mb=100), allocation=hosts)
    good = {**share_assignment(record, "w1"), "launch": LAUNCH}
    asyncio.run(agent.reconciler.reconcile({"version": 1, "jobs": [], "shares": []}))
    cgroup = _Cgroup()
    agent.state.shares.held[("7", 1)] = HeldShare(cgroup, "run")  # type: ignore[arg-type]
    agent.tasks.follow_shares([msgspec.convert(good, protocol.Share)])
    bad = {**good, "slots": "three"}
    asyncio.run(agent.reconciler.reconcile({"version": 2, "jobs": [], "shares": [bad]}))
    assert ("7", 1) in agent.state.shares.held and not cgroup.killed  # its tasks run on
    assert ("7", 1) not in agent.tasks.shares  # `xce launch` starts nothing new in it


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


def test_an_answer_that_comes_while_an_attempt_starts_applies_once_it_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job preempted (suspended) within moments of its dispatch: the stop came while the
    worker was still making the attempt's directory, was dropped, and the victim ran on
    beside its preemptor. The latest action must apply once the attempt has started."""
    from xce.worker.agent import reconcile as module

    agent = make_agent(tmp_path, FakeClient())
    reconciler = agent.reconciler
    made = asyncio.Event()
    applied: list[tuple[str, str, int | None]] = []

    async def prepare(spool: Any, a: protocol.Assignment, account: Any) -> RunningJob:
        await made.wait()  # the directory takes a while: the next answer comes meanwhile
        return RunningJob(a, tmp_path, tmp_path)

    async def launch(job: RunningJob, context: Any) -> None:
        return None  # started (the log names no pid)

    async def nothing(*args: Any) -> None:
        return None

    monkeypatch.setattr(module.spool, "prepare", prepare)
    monkeypatch.setattr(module.executor, "launch", launch)
    monkeypatch.setattr(module.accounts, "account_for", lambda *a: None)
    monkeypatch.setattr(reconciler, "_fetch_inputs", nothing)
    monkeypatch.setattr(reconciler, "follow", nothing)

    def record(job: RunningJob, action: str) -> None:
        applied.append((job.key[0], action, job.assignment.walltime_s))

    monkeypatch.setattr(reconciler, "_apply_action", record)

    async def scenario() -> None:
        run = {**msgspec.to_builtins(assignment(job_id="7", attempt=0)), "action": "run"}
        await reconciler.reconcile({"version": 1, "jobs": [run], "shares": []})
        assert ("7", 0) in agent.state.starting
        stop = {**run, "action": "stop", "walltime_s": 90}
        await reconciler.reconcile({"version": 2, "jobs": [stop], "shares": []})
        made.set()
        for _ in range(100):
            if applied:
                break
            await asyncio.sleep(0.01)

    asyncio.run(scenario())
    assert applied == [("7", "stop", 90)]
