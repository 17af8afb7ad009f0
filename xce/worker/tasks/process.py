"""A task process of the task service (xce/worker/tasks/service.py), started off the event loop.

`asyncio.create_subprocess_exec` forks and then waits for the exec *on the event loop*. A
task's child joins the job's cgroup before exec; if that cgroup is frozen, or being frozen
(`xce job stop`, a resume whose thaw has not run yet, a share frozen before the service
hears of the stop), the kernel freezes the child before it execs, and the whole worker
(heartbeats, the thaw itself) would wait on it: a deadlock any job's owner could provoke.
Here the fork and the wait for the exec run in a thread, and the loop then only watches the
pipes and a pidfd, so a stuck start holds up nothing but itself. Standard library only.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import os
import subprocess
from collections.abc import Callable


class Task:
    """What the task service needs of a running task: its streams, kill and wait."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        stdin: asyncio.StreamWriter,
        stdout: asyncio.StreamReader,
        stderr: asyncio.StreamReader,
    ) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def kill(self) -> None:
        if self.popen.returncode is None:
            self.popen.kill()

    async def wait(self) -> int:
        """The exit status, `-signal` when killed by one; the loop waits on a pidfd."""
        if self.popen.returncode is None:
            loop = asyncio.get_running_loop()
            fd = os.pidfd_open(self.pid)
            try:
                ended: asyncio.Future[None] = loop.create_future()

                def wake() -> None:
                    if not ended.done():
                        ended.set_result(None)

                loop.add_reader(fd, wake)
                try:
                    await ended
                finally:
                    loop.remove_reader(fd)
            finally:
                os.close(fd)
            self.popen.wait()
        return self.popen.returncode


async def start(
    spawner: concurrent.futures.Executor,
    argv: list[str],
    env: dict[str, str],
    setup: Callable[[], None],
) -> Task:
    """Fork and exec `argv` in a `spawner` thread; OSError, ValueError or SubprocessError
    as Popen raises them."""
    loop = asyncio.get_running_loop()

    def spawn() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
            close_fds=True,
            preexec_fn=setup,
        )

    popen = await loop.run_in_executor(spawner, spawn)
    assert popen.stdin is not None and popen.stdout is not None and popen.stderr is not None
    try:
        readers = []
        for pipe in (popen.stdout, popen.stderr):
            reader = asyncio.StreamReader(limit=1 << 16)
            await loop.connect_read_pipe(
                functools.partial(asyncio.StreamReaderProtocol, reader), pipe
            )
            readers.append(reader)
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, popen.stdin
        )
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
    except BaseException:
        with contextlib.suppress(OSError):
            popen.kill()
        raise
    return Task(popen, writer, readers[0], readers[1])
