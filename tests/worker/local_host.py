"""The worker's execution pieces on this machine, with no controller: its spool, a real cgroup
backend, a real keeper launcher. Hostile-job tests drive jobs through exactly the code the
worker runs (xce/worker/attempt/executor.py, staging.py), as real unprivileged users.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import secrets
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.worker.assignments import assignment
from xce.worker.attempt import accounts, executor, readers, spool, staging
from xce.worker.attempt.running import JobResult, RunningJob
from xce.worker.attempt.spool import Spool
from xce.worker.cgroups import CgroupBackend, detect
from xce.worker.devices import gpus
from xce.worker.keeper import fence
from xce.worker.keeper.client import KeeperLauncher


def searchable_dir(prefix: str, parent: str = "/tmp") -> Path:
    """A fresh directory under `parent` that other users can traverse (0711): pytest's own
    temporary directories are 0700 root, which no job user can enter."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    os.chmod(path, 0o711)
    return path


class Recorder:
    """Stands in for XceClient's transfers: keeps what an output return sends (read from
    the descriptor as `send_file` reads it), serves inputs from a dict into the sink."""

    def __init__(self, inputs: dict[str, bytes] | None = None) -> None:
        self.files: dict[str, bytes] = {}
        self.inputs = inputs or {}

    async def download_to(self, path: str, sink: Any, **kw: Any) -> None:
        data = self.inputs[path.rsplit("/inputs/", 1)[1]]
        for start in range(0, len(data), 1 << 16):
            await sink.write(data[start : start + (1 << 16)])

    async def send_file(self, method: str, path: str, fd: int, size: int, **kw: Any) -> Any:
        self.files[path.rsplit("/outputs/", 1)[1]] = read_fd(fd, size)
        return {}


def read_fd(fd: int, size: int) -> bytes:
    """The first `size` bytes behind `fd` (pread: its offset is left alone)."""
    chunks, offset = [], 0
    while offset < size:
        chunk = os.pread(fd, min(1 << 20, size - offset), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


class LocalHost:
    def __init__(
        self,
        root: Path,
        mode: str = "auto",
        pids_limit: int = 0,
        fence_timeout_s: float = 60.0,
        spool: Path | None = None,
        namespace: str | None = None,
        private_tmp: bool = False,
    ) -> None:
        self.root = root
        self.spool = Spool(spool or root / "spool", root / "jobs")
        self.spool.make()
        self.namespace = namespace or f"xce-test-{secrets.token_hex(5)}"
        self.backend = detect(mode, "", self.namespace)
        self.launcher = KeeperLauncher(self.backend.kind, "", self.namespace)
        self.launcher.start()
        self.pids_limit = pids_limit
        self.private_tmp = private_tmp
        self.contact = fence.Contact(fence.now(), fence_timeout_s)
        fence.record(str(self.spool.state), self.contact)

    def touch(self) -> None:
        """The worker reached a controller just now."""
        self.contact = fence.Contact(fence.now(), self.contact.fence_timeout_s)
        fence.record(str(self.spool.state), self.contact)

    async def start(
        self, a: dict[str, Any], user: str = "root", inputs: dict[str, bytes] | None = None
    ) -> RunningJob:
        assigned = assignment(
            **{
                "job_id": secrets.token_hex(3),
                "attempt": 0,
                "user": user,
                "outputs": [],
                "inputs": list(inputs or {}),
                "slots": 1,
                **a,
            }
        )
        account = accounts.account_for(assigned.user, allow_root=True)
        job = await spool.prepare(self.spool, assigned, account)
        if inputs:
            await staging.fetch_inputs(Recorder(inputs), "h1", job)  # type: ignore[arg-type]
        job.result = asyncio.get_running_loop().create_future()
        await executor.launch(job, self.context(account))
        return job

    def context(
        self,
        account: pwd.struct_passwd | None,
        pids_limit: int | None = None,
        devices: gpus.HostDevices | None = None,
    ) -> executor.LaunchContext:
        """What the worker of host "h1" launches an attempt with."""
        return executor.LaunchContext(
            launcher=self.launcher,
            backend=self.backend,
            account=account,
            host="h1",
            pids_limit=self.pids_limit if pids_limit is None else pids_limit,
            worker_state=self.spool.state,
            contact=self.contact,
            private_tmp=self.private_tmp,
            devices=devices or gpus.HostDevices(),
        )

    async def wait(self, job: RunningJob) -> JobResult:
        result = await executor.wait(job, 0.1, 1.0)
        assert job.result is not None
        if not job.result.done():
            job.result.set_result(result)
        return result

    async def run(
        self, a: dict[str, Any], user: str = "root", inputs: dict[str, bytes] | None = None
    ) -> tuple[RunningJob, JobResult, dict[str, bytes]]:
        """Run a job to its end and return its outputs as the worker would upload them."""
        job = await self.start(a, user, inputs)
        result = await self.wait(job)
        client = Recorder()
        await staging.upload_outputs(client, "h1", job)  # type: ignore[arg-type]
        readers.close_readers(job)
        return job, result, client.files

    def close(self) -> None:
        """Stop the launcher, kill what the host's cgroups still hold, and remove them and
        this host's (then empty) namespace directories."""
        self.launcher.close()
        for name in self.backend.existing():
            cgroup = self.backend.open(name)
            if cgroup is not None:
                with contextlib.suppress(OSError):
                    cgroup.kill()
                with contextlib.suppress(OSError):
                    cgroup.remove()
        remove_namespace(self.backend)


def remove_namespace(backend: CgroupBackend) -> None:
    """The namespace directories a backend made in each hierarchy (once empty)."""
    ns = getattr(backend, "ns", None)
    for path in set(ns.values()) if isinstance(ns, dict) else [ns] if ns else []:
        with contextlib.suppress(OSError):
            os.rmdir(path)
    devices_ns = getattr(backend, "devices_ns", None)  # v1, made only for GPU jobs
    if devices_ns:
        with contextlib.suppress(OSError):
            os.rmdir(devices_ns)


def _cgroups_here() -> bool:
    try:
        backend = detect("auto", "", f"xce-probe-{secrets.token_hex(4)}")
    except Exception:  # any failure means no usable cgroups
        return False
    remove_namespace(backend)
    return backend.kind != "none"


needs_cgroups = pytest.mark.skipif(not _cgroups_here(), reason="no writable cgroup hierarchy")
