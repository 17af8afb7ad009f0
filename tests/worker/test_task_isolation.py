"""Attacks through the task service: `xce launch` tasks must be isolated as the job's script is.

A task is started by the worker's task service (xce/worker/tasks/service.py), not by the
job's keeper, and the first version set it up on a path of its own that missed steps: tasks
kept the worker's session keyring (root's keys, and whatever another user's task stored in
it) and ran on the host's /tmp and /dev/shm, where their files stayed after the job, readable
by other users. Each test plays the attack as a real unprivileged Linux user against the
worker's real code: a job started through the keeper launcher (tests/worker/local_host.py)
and a task service on 127.0.0.1 whose task-starting threads hold a root session keyring
with a key in it, as a worker started by systemd has one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ctypes
import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest

from tests.worker.linux_users import LinuxUser, LinuxUsers, linux_users  # noqa: F401
from tests.worker.local_host import LocalHost, searchable_dir
from xce.protocol.worker import Share
from xce.worker.attempt import jobcontrol, readers
from xce.worker.attempt.running import RunningJob
from xce.worker.cgroups import Limits
from xce.worker.devices import gpus
from xce.worker.tasks.service import TaskService
from xce.worker.tasks.shares import HeldShare, share_name
from xce.worker.tasks.wire import (
    CHALLENGE,
    EXIT,
    HEADER,
    READY,
    STDIN,
    ClientHandshake,
)

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the worker's defences need root"),
    pytest.mark.skipif(os.uname().machine != "x86_64", reason="keyctl numbers are x86_64"),
]

_SYS_ADD_KEY, _SYS_KEYCTL = 248, 250
_KEYCTL_JOIN_SESSION_KEYRING, _KEY_SPEC_SESSION_KEYRING = 1, -3
CRED = "c" * 64

# Find a "user" key by description in the session keyring and print its payload.
_READ_KEY = (
    "import ctypes,sys\n"
    "l=ctypes.CDLL(None,use_errno=True); l.syscall.restype=ctypes.c_long\n"
    "k=l.syscall(250,10,ctypes.c_long(-3),b'user',sys.argv[1].encode(),0)\n"
    "b=ctypes.create_string_buffer(256); n=l.syscall(250,11,ctypes.c_long(k),b,256)\n"
    "print('key', k, b.raw[:max(n,0)].decode(errors='replace'))\n"
)
# Store a "user" key in the session keyring: argv[1] its description, argv[2] its payload.
_STORE_KEY = (
    "import ctypes,sys\n"
    "l=ctypes.CDLL(None,use_errno=True); l.syscall.restype=ctypes.c_long\n"
    "v=sys.argv[2].encode()\n"
    "print(l.syscall(248,b'user',sys.argv[1].encode(),v,len(v),ctypes.c_long(-3)))\n"
)


def _root_keyring(desc: str, secret: bytes) -> None:
    """Join a new session keyring holding a root "user" key (this thread only): what a
    worker started by systemd, or from an admin's login, has."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if libc.syscall(_SYS_KEYCTL, _KEYCTL_JOIN_SESSION_KEYRING, None) < 0:
        raise OSError(ctypes.get_errno(), "keyctl(JOIN_SESSION_KEYRING)")
    added = libc.syscall(
        _SYS_ADD_KEY, b"user", desc.encode(), secret, len(secret), ctypes.c_long(-3)
    )
    if added < 0:
        raise OSError(ctypes.get_errno(), "add_key")


@dataclass
class Agent:
    """What the task service reads of the worker's state (xce/worker/agent/state.py)."""

    spool: Any
    backend: Any
    settings: Any
    host: str = "h1"
    running: dict[tuple[str, int], RunningJob] = field(default_factory=dict)
    shares: Any = field(default_factory=lambda: SimpleNamespace(held={}))
    devices: gpus.HostDevices = field(default_factory=gpus.HostDevices)
    launch_bin: str = ""


@dataclass
class Task:
    stdout: bytes
    stderr: bytes
    exit: dict[str, Any]


class Service:
    """A task service of host "h1" on 127.0.0.1, whose task-starting thread holds a root
    session keyring with the key `root_key` (description, payload)."""

    def __init__(self, host: LocalHost, root_key: tuple[str, str]) -> None:
        settings = SimpleNamespace(
            allow_root_jobs=False,
            min_job_uid=1000,
            private_tmp=host.private_tmp,
            cgroup_parent="",
            spool_dir=host.spool.state.parent,
        )
        self.agent = Agent(host.spool, host.backend, settings)
        self.service = TaskService(self.agent, self._no_report)  # type: ignore[arg-type]
        failed: list[BaseException] = []

        def keyring() -> None:
            try:
                _root_keyring(root_key[0], root_key[1].encode())
            except OSError as exc:
                failed.append(exc)

        # One thread: every task forked from the same (root) session keyring.
        self.service.spawner = concurrent.futures.ThreadPoolExecutor(1, initializer=keyring)
        self.service.spawner.submit(lambda: None).result()
        if failed:
            pytest.skip(f"no session keyrings here: {failed[0]}")
        self.port = 0

    async def _no_report(self) -> None:
        return None

    async def start(self) -> None:
        address = await self.service.start("127.0.0.1", 0)
        self.port = int(address.rsplit(":", 1)[1])

    async def run(self, key: tuple[str, int], argv: list[str]) -> Task:
        """One task of attempt `key` to its end, as `xce launch` runs it."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        channel, length = HEADER.unpack(await reader.readexactly(HEADER.size))
        assert channel == CHALLENGE
        handshake = ClientHandshake(CRED, key[0], key[1], "h1")
        writer.write(handshake.hello(await reader.readexactly(length)))
        channel, length = HEADER.unpack(await reader.readexactly(HEADER.size))
        ready = await reader.readexactly(length)
        assert channel == READY, ready
        session = handshake.session(ready)
        request = {
            "argv": argv,
            "env": {"PATH": "/usr/bin:/bin"},
            "task_id": 0,
            "local_task_id": 0,
        }
        writer.write(session.request_frame(request) + session.seal(STDIN, b""))
        await writer.drain()
        out = {1: b"", 2: b""}
        try:
            while True:
                channel, length = HEADER.unpack(
                    await asyncio.wait_for(reader.readexactly(HEADER.size), 60)
                )
                data = session.open(channel, await reader.readexactly(length))
                if channel == EXIT:
                    return Task(out[1], out[2], json.loads(data))
                out[channel] += data
        finally:
            writer.close()

    async def close(self) -> None:
        await self.service.close()
        self.service.spawner.shutdown(wait=True)


def _launch(cwd: str = "") -> dict[str, Any]:
    return {"credential": CRED, "tasks": {"h1": "127.0.0.1:1"}, "cwd": cwd}


@contextlib.asynccontextmanager
async def _running_job(
    host: LocalHost, service: Service, user: LinuxUser, command: str, ready: Path
) -> AsyncIterator[RunningJob]:
    """A job of `user` running `command` (which touches `ready` once set up), known to the
    service as running on this host."""
    job = await host.start({"command": command, "launch": _launch(), "memory_mb": 256}, user.name)
    try:
        deadline = time.monotonic() + 20
        while not ready.exists():
            assert time.monotonic() < deadline, "the job never got going"
            await asyncio.sleep(0.05)
        service.agent.running[job.key] = job
        yield job
    finally:
        service.agent.running.pop(job.key, None)
        jobcontrol.kill_group_now(job)
        with contextlib.suppress(Exception):
            await host.wait(job)
        readers.close_readers(job)


@pytest.fixture
def jobs_root() -> Iterator[Path]:
    """A job root off /tmp (a job whose directories are in /tmp keeps the host's /tmp)."""
    root = searchable_dir("xce-jobs-", "/var/tmp")
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def ready_dir(linux_users: LinuxUsers) -> Iterator[Path]:
    path = searchable_dir("xce-ready-", "/var/tmp")
    os.chmod(path, 0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def isolated(jobs_root: Path) -> AsyncIterator[tuple[LocalHost, Service, tuple[str, str]]]:
    """A host with `private_tmp = true` and its task service, started from a root session
    keyring that holds a key."""
    root_key = (f"xce-task-{secrets.token_hex(4)}", f"ROOT-{secrets.token_hex(8)}")
    host = LocalHost(jobs_root, pids_limit=64, private_tmp=True)
    service = Service(host, root_key)
    await service.start()
    try:
        yield host, service, root_key
    finally:
        await service.close()
        host.close()


def _as_user(user: LinuxUser, command: str) -> subprocess.CompletedProcess[str]:
    """A local process of `user` (not a job): another user logged in on the host."""
    return subprocess.run(
        [
            "setpriv",
            f"--reuid={user.uid}",
            f"--regid={user.gid}",
            "--clear-groups",
            "sh",
            "-c",
            command,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )


# --- the session keyring ------------------------------------------------------------------


async def test_a_task_reads_a_key_from_the_workers_session_keyring(
    isolated: tuple[LocalHost, Service, tuple[str, str]], user: LinuxUser, ready_dir: Path
) -> None:
    """A task running as the job's user read root's key from the worker's session keyring
    (the job's script had a keyring of its own; its tasks did not)."""
    host, service, (desc, secret) = isolated
    ready = ready_dir / "job"
    async with _running_job(host, service, user, f"touch {ready}; sleep 60", ready) as job:
        task = await service.run(job.key, ["python3", "-c", _READ_KEY, desc])
    assert task.exit.get("exit_code") == 0, task
    assert secret.encode() not in task.stdout, "the task read root's key"


async def test_a_task_reads_a_key_another_users_task_stored(
    isolated: tuple[LocalHost, Service, tuple[str, str]],
    linux_users: LinuxUsers,
    ready_dir: Path,
) -> None:
    """Alice's task stored a key in its session keyring, the worker's; Bob's task, forked
    from the same worker thread, read it."""
    host, service, _ = isolated
    alice, bob = linux_users.user(), linux_users.user()
    desc, secret = f"xce-alice-{secrets.token_hex(4)}", f"alice-{secrets.token_hex(8)}"
    a_ready, b_ready = ready_dir / "alice", ready_dir / "bob"
    async with (
        _running_job(host, service, alice, f"touch {a_ready}; sleep 60", a_ready) as a_job,
        _running_job(host, service, bob, f"touch {b_ready}; sleep 60", b_ready) as b_job,
    ):
        stored = await service.run(a_job.key, ["python3", "-c", _STORE_KEY, desc, secret])
        assert stored.exit.get("exit_code") == 0, stored
        assert int(stored.stdout.split()[-1]) > 0, f"alice's task stored no key: {stored}"
        task = await service.run(b_job.key, ["python3", "-c", _READ_KEY, desc])
    assert secret.encode() not in task.stdout, "bob's task read the key alice's task stored"


# --- the job's /tmp and /dev/shm ----------------------------------------------------------


async def test_a_tasks_tmp_and_dev_shm_files_are_on_the_host_for_all_to_read(
    isolated: tuple[LocalHost, Service, tuple[str, str]],
    linux_users: LinuxUsers,
    ready_dir: Path,
) -> None:
    """Tasks ran on the host's /tmp and /dev/shm, not the job's: what they wrote there was
    readable by every user of the host and stayed after the job; and a task did not see the
    job's own temporary files (a script that hands its tasks a file in /tmp broke)."""
    host, service, _ = isolated
    owner, other = linux_users.user(), linux_users.user()
    marker = f"xce-task-{secrets.token_hex(4)}"
    ready = ready_dir / "job"
    leftovers = [Path(f"/tmp/{marker}-task"), Path(f"/dev/shm/{marker}-task")]
    try:
        script = f"echo from-the-job > /tmp/{marker}-job; touch {ready}; sleep 60"
        async with _running_job(host, service, owner, script, ready) as job:
            task = await service.run(
                job.key,
                [
                    "sh",
                    "-c",
                    f"umask 022; cat /tmp/{marker}-job;"
                    f" echo secret > /tmp/{marker}-task && echo secret > /dev/shm/{marker}-task",
                ],
            )
            assert task.exit.get("exit_code") == 0, task
            for path in leftovers:
                seen = _as_user(other, f"cat {path}")
                assert "secret" not in seen.stdout, f"another user read the task's {path}"
            assert b"from-the-job" in task.stdout, "the task did not see the job's /tmp"
        for path in leftovers:
            assert not path.exists(), f"the task's {path} is on the host's file system"
    finally:
        for path in leftovers:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


async def test_a_share_tasks_dev_shm_files_are_on_the_host_and_outlive_the_share(
    isolated: tuple[LocalHost, Service, tuple[str, str]], user: LinuxUser
) -> None:
    """On a job's other hosts its tasks run in the share's cgroup, with no job script to
    make a namespace: their /tmp and /dev/shm were the host's. Now the service makes one
    per share, which the share's tasks all see and which goes with the share."""
    host, service, _ = isolated
    key = (secrets.token_hex(3), 0)
    share = msgspec.convert(
        {
            "job_id": key[0],
            "attempt": 0,
            "action": "run",
            "user": user.name,
            "slots": 1,
            "memory_mb": 64,
            "launch": _launch(),
        },
        Share,
    )
    cgroup = host.backend.create(share_name(*key), Limits(memory_bytes=64 << 20, cpus=1))
    service.agent.shares.held[key] = HeldShare(cgroup, "run")
    service.service.follow_shares([share])
    marker = f"xce-share-{secrets.token_hex(4)}"
    leftovers = [Path(f"/tmp/{marker}"), Path(f"/dev/shm/{marker}")]
    try:
        wrote = await service.run(
            key, ["sh", "-c", f"echo one > /tmp/{marker} && echo one > /dev/shm/{marker}"]
        )
        assert wrote.exit.get("exit_code") == 0, wrote
        for path in leftovers:
            assert not path.exists(), f"the share's task wrote the host's {path}"
        read = await service.run(key, ["cat", f"/tmp/{marker}", f"/dev/shm/{marker}"])
        assert read.stdout == b"one\none\n", f"the share's tasks do not share a /tmp: {read}"
        sized = await service.run(key, ["sh", "-c", "df -k /tmp | tail -1"])
        assert int(sized.stdout.split()[1]) <= 64 * 1024, "the share's /tmp exceeds its memory"
        service.service.follow_shares([])
        assert key not in service.service.namespaces, "the share's namespace outlived it"
    finally:
        service.agent.shares.held.pop(key, None)
        with contextlib.suppress(OSError):
            cgroup.kill()
        with contextlib.suppress(OSError):
            cgroup.remove()
        for path in leftovers:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
