"""A task process of the task service (xce/worker/tasks/service.py), started off the event loop.

`asyncio.create_subprocess_exec` forks and then waits for the exec *on the event loop*. A
task's child joins the job's cgroup before exec; if that cgroup is frozen, or being frozen
(`xce job stop`, a resume whose thaw has not run yet, a share frozen before the service
hears of the stop), the kernel freezes the child before it execs, and the whole worker
(heartbeats, the thaw itself) would wait on it: a deadlock any job's owner could provoke.
Here the fork and the wait for the exec run in a thread, and the loop then only watches the
pipes and a pidfd, so a stuck start holds up nothing but itself.

Between fork and exec the child enters the job's isolation through
xce/worker/keeper/isolation.py, the code path the job's own leader takes (cgroup, session,
mount namespace, user, session keyring, working directory); a step that fails ends the
child before exec and its one-line reason reaches the caller (`TaskNotStarted`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import os
import subprocess

from xce.worker.keeper import isolation


class TaskNotStarted(Exception):
    """The child could not enter the job's isolation: "<step>: <why>"; nothing of the
    request ran."""


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
    confinement: isolation.Confinement,
) -> Task:
    """Fork, enter `confinement` and exec `argv` in a `spawner` thread. TaskNotStarted when
    the isolation failed; OSError, ValueError or SubprocessError as Popen raises them."""
    loop = asyncio.get_running_loop()

    def spawn() -> subprocess.Popen[bytes]:
        # The child's reason, should it fail: written before it exits, read without
        # waiting (other children forked meanwhile hold the write end until their exec).
        report_r, report_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)

        def setup() -> None:
            try:
                isolation.enter(confinement)
            except isolation.SetupFailed as exc:
                with contextlib.suppress(OSError):
                    os.write(report_w, str(exc).encode("utf-8", "replace")[:4000])
                raise

        try:
            return subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                close_fds=True,
                preexec_fn=setup,  # `enter` starts the task's session itself
            )
        except subprocess.SubprocessError:
            try:
                reason = os.read(report_r, 4096)
            except OSError:
                reason = b""
            if reason:
                raise TaskNotStarted(reason.decode("utf-8", "replace")) from None
            raise
        finally:
            os.close(report_r)
            os.close(report_w)

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
