"""After a worker restart: the attempts an earlier worker process took on, and the finish
reports it persisted so that a restart still sends them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from xce.protocol.worker import Assignment
from xce.worker.attempt import fscreds
from xce.worker.attempt.fscreds import Credentials
from xce.worker.attempt.jobcontrol import _drop_cgroup
from xce.worker.attempt.readers import open_readers
from xce.worker.attempt.running import RunningJob
from xce.worker.attempt.spool import Spool
from xce.worker.cgroups import CgroupBackend
from xce.worker.keeper import fence
from xce.worker.keeper.client import keeper_alive
from xce.worker.keeper.process import KEEPER, RESULT, SPEC, read_json, write_json

log = logging.getLogger("xce.worker.executor")  # the name the log lines always had

REPORT = "report.json"


@dataclass
class Recovered:
    """An attempt an earlier worker process took on: still running (adopt it), ended with a
    result (report it), or already reported to be sent (`report`)."""

    job: RunningJob
    alive: bool = False
    report: dict[str, Any] | None = None
    lost: str = ""


async def recover(spool: Spool, backend: CgroupBackend) -> list[Recovered]:
    """Every attempt found in the worker's own state directory (never in the job's tree).

    A keeper that is still alive (same pid and start time as it recorded) is adopted; an
    attempt with no live keeper and no result has its cgroup killed. Cgroups that no attempt
    claims are killed and removed too."""
    found: list[Recovered] = []
    claimed: set[str] = set()
    for attempt_dir in sorted(spool.state.iterdir()) if spool.state.is_dir() else []:
        if not attempt_dir.is_dir() or attempt_dir.is_symlink():
            continue
        spec = read_json(str(attempt_dir), SPEC)
        assignment = _assignment_of(spec, attempt_dir) if spec is not None else None
        if spec is None or assignment is None:
            shutil.rmtree(attempt_dir, ignore_errors=True)
            continue
        claimed.add(spec["cgroup"])
        creds = None
        if spec.get("uid") is not None:
            creds = Credentials(
                int(spec["uid"]),
                int(spec["gid"]),
                tuple(int(g) for g in spec["groups"]),
                str(spec["user"]),
            )
        job = RunningJob(assignment, Path(spec["job_dir"]), Path(spec["cwd"]), attempt_dir, creds)
        report = read_json(str(attempt_dir), REPORT)
        if report is not None:
            found.append(Recovered(job, report=report))
            continue
        keeper = read_json(str(attempt_dir), KEEPER)
        job.cgroup = backend.open(spec["cgroup"], keeper.get("leader") if keeper else None)
        if read_json(str(attempt_dir), RESULT) is not None:
            job.keeper = int(keeper["keeper"]) if keeper else None
            found.append(Recovered(job))
            continue
        if keeper is not None and keeper_alive(int(keeper["keeper"]), keeper.get("keeper_start")):
            job.keeper, job.leader = int(keeper["keeper"]), int(keeper["leader"])
            job.keeper_start = keeper.get("keeper_start")
            job.started -= max(0.0, fence.now() - float(keeper.get("started_at", fence.now())))
            with contextlib.suppress(OSError):
                job.readers = await fscreds.as_user(creds, open_readers, str(job.job_dir))
            found.append(Recovered(job, alive=True))
            continue
        await asyncio.to_thread(_drop_cgroup, job.cgroup)
        job.cgroup = None
        found.append(
            Recovered(
                job,
                lost="the worker restarted and the job's keeper was gone"
                if keeper
                else "failed to start: the worker restarted",
            )
        )
    for name in backend.existing():
        if name not in claimed:
            log.warning("killing cgroup %s: no attempt of this worker claims it", name)
            await asyncio.to_thread(_drop_cgroup, backend.open(name))
    return found


def _assignment_of(spec: dict[str, Any], attempt_dir: Path) -> Assignment | None:
    """The assignment a spec.json keeps. One this worker cannot read whole (an older worker
    wrote a value this one declares otherwise) keeps what can be read of it, so a live job is
    adopted, never dropped and started again; None only without a job id, attempt and user:
    the attempt is then dropped as an unreadable spec is."""
    raw = spec.get("assignment")
    try:
        return msgspec.convert(raw, Assignment)
    except msgspec.ValidationError as exc:
        problem = exc
    salvaged = _salvage(raw)
    if salvaged is None:
        log.warning("%s/%s has no assignment this worker can read (%s)", attempt_dir, SPEC, problem)
    else:
        log.warning(
            "%s/%s: kept what this worker can read of its assignment (%s)",
            attempt_dir,
            SPEC,
            problem,
        )
    return salvaged


def _salvage(raw: Any) -> Assignment | None:
    """An `Assignment` of the fields of `raw` that decode one by one (the rest at their
    defaults), or None without the ones it needs (job id, attempt, user)."""
    if not isinstance(raw, dict):
        return None
    kept: dict[str, Any] = {k: raw.get(k) for k in ("job_id", "attempt", "user")}
    kept["action"] = raw.get("action", "run")
    try:
        msgspec.convert(kept, Assignment)
    except msgspec.ValidationError:
        kept["action"] = "run"
        try:
            msgspec.convert(kept, Assignment)
        except msgspec.ValidationError:
            return None
    for key, value in raw.items():
        if key in kept:
            continue
        try:
            msgspec.convert({**kept, key: value}, Assignment)
        except msgspec.ValidationError:
            continue
        kept[key] = value
    return msgspec.convert(kept, Assignment)


def save_report(job: RunningJob, body: dict[str, Any]) -> None:
    """Persist a finish report in the worker's own directory, so a restart still sends it."""
    if job.attempt_dir is not None:
        write_json(str(job.attempt_dir), REPORT, body, durable=True)
