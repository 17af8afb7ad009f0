"""The task service: starts the tasks of `xce launch` on this host.

Every worker listens on `[worker] task_listen` (default 127.0.0.1, any free port) and
reports the address when it registers; the controller hands each host's address and the
attempt's launch credential (xce/controller/launchcred.py) to every host of the attempt,
and the first host's job sees them as XCE_LAUNCH_TASKS / XCE_LAUNCH_CRED.

The worker is root and every request comes from job code, so it is hostile:

- a connection holds nothing but a pending slot until it proves the credential: a short
  deadline for the hello, bounded pools per group of addresses (all of loopback is one) and
  in all, the oldest dropped first, a hello out of that pool as soon as it is read
  (xce/worker/tasks/handshake.py), so connections without a credential cannot keep a
  job's own launch out;
- the hello must prove (an HMAC over the service's and the client's nonces,
  xce/worker/tasks/wire.py; compared in constant time) the credential the controller sent
  for an attempt this host runs (its first host) or holds a share of, with action `run`,
  right now: another job's, an ended or requeued attempt's, or one for a host outside the
  allocation never matches. A wrong proof and an attempt this host does not run get the
  same bytes at the same moment (`_authenticate`, `refusal`), so no one learns which
  attempts run here;
- the service proves the credential back (READY) before the client sends its request, and
  every frame after is sealed with a key of this connection's nonces and a sequence number:
  whoever sits between a launch and this service (one that took over the port the launch
  knows, after a restart of the worker) can relay the handshake but not put a request of
  its own in, read the credential, or pass off output or an exit status;
- the proven connections of one attempt are bounded (`attempt_limit`: a few per slot it has
  here), and all of them (MAX_CONNECTIONS), so one job cannot hold every place a host has;
  a proven connection has HANDSHAKE_S for its request;
- frames of bounded size, exact keys and types, or the connection is refused;
- the account, the cgroup and the working directory come from this host's assignment, never
  from the request; the account passes the same rules as the job's (`account_for`: never
  root unless the job is root and root jobs are allowed);
- the child enters the job's isolation through the code path the job's own leader takes
  (xce/worker/keeper/isolation.py): the job's cgroup (its own on the first host, the share
  elsewhere), a session, the job's mount namespace (its private /tmp and /dev/shm: on the
  first host the one the job's keeper holds, elsewhere one this service holds for the
  share), the user, a session keyring of its own (never the worker's, which holds root's
  keys and what other jobs' tasks linked into it), then the directory *as the user*; only
  then does the request's argv and environment touch anything (the exec). So kill, suspend
  and the end of the job reach tasks through the cgroup, and usage counts them.

Requests are parsed in xce/worker/tasks/request.py and the jobs' `xce` is installed by
xce/worker/tasks/installer.py; this module serves, and exports their names too.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import hmac
import logging
import os
import secrets
import struct
import subprocess
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xce.core.selfexec import python_module
from xce.protocol.worker import Assignment, Share
from xce.worker.attempt import accounts, jobcontrol, jobenv, running
from xce.worker.attempt.fscreds import Credentials
from xce.worker.cgroups.base import JobCgroup
from xce.worker.devices import gpus
from xce.worker.keeper import isolation
from xce.worker.keeper.process import KEEPER, MOUNT_NAMESPACE, read_json
from xce.worker.tasks import process as taskproc
from xce.worker.tasks.handshake import (
    HANDSHAKE_S,
    Handshakes,
    peer_address,
    read_frame,
    read_sealed,
)
from xce.worker.tasks.request import (
    Hello,
    TaskRefused,
    TaskRequest,
    parse_hello,
    parse_request,
)
from xce.worker.tasks.wire import (
    HEADER,
    HELLO,
    MAX_FRAME,
    MAX_HELLO,
    MAX_REQUEST,
    NONCE_BYTES,
    REQUEST,
    STDERR,
    STDIN,
    STDOUT,
    TAG_BYTES,
    NotProven,
    Session,
    challenge_frame,
    exit_frame,
    proof,
    ready_frame,
    session_key,
)

if TYPE_CHECKING:
    from xce.worker.agent.state import AgentState

log = logging.getLogger("xce.worker.tasks")

__all__ = [
    "ASSIGNMENT_WAIT_S",
    "MAX_CONNECTIONS",
    "OWN_VARIABLES",
    "PER_ATTEMPT_FLOOR",
    "PER_SLOT",
    "Target",
    "TaskService",
    "child_setup",
]

Key = tuple[str, int]
# Tasks served at once (connections that proved a credential); more are refused. Connections
# that have not are bounded apart (xce/worker/tasks/handshake.py).
MAX_CONNECTIONS = 512
# Of those, what one attempt may hold on this host: PER_SLOT per slot it has here, at least
# PER_ATTEMPT_FLOOR (an MPI job oversubscribes, and a task may launch tasks of its own).
PER_SLOT = 4
PER_ATTEMPT_FLOOR = 64
ACCEPT_BACKLOG = 1024
# Set by the service for every task, whatever the request's environment says.
OWN_VARIABLES = (
    "XCE_TASK_ID",
    "XCE_LOCAL_TASK_ID",
    "XCE_EXEC_HOST",
    "XCE_JOB_ID",
    "XCE_ATTEMPT",
    "XCE_LAUNCH_CRED",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
)


# How long a hello for an attempt this host does not know waits for its assignment: the
# job's first host may start it (and the job call `xce launch`) before another host of the
# allocation has polled its share. Every refused hello is answered at the end of this wait,
# so the moment of the answer does not tell which attempts run here.
ASSIGNMENT_WAIT_S = 5.0


class NotAuthenticated(Exception):
    """The hello proves no credential of an attempt this host runs now; what was wrong is
    never told (`TaskService.refusal`)."""


@dataclass(frozen=True)
class Target:
    """Where a task of an attempt runs on this host: all from the host's own assignment."""

    user: str
    cgroup: JobCgroup
    cwds: tuple[str, ...]
    # The GPU variables of this host's grant (the job's own here, the share's elsewhere):
    # a task sees the devices its host was given, as the job's script does.
    gpu_env: dict[str, str] = field(default_factory=dict)
    # Who holds the job's mount namespace: its keeper (pid, start time, the attempt's state
    # directory with keeper.json) on the job's first host; None for a share, whose
    # namespace this service makes and holds (`memory_bytes`: the size of its /tmp).
    keeper: tuple[int, int | None, str] | None = None
    memory_bytes: int | None = None


def child_setup(
    cgroup: JobCgroup,
    creds: Credentials | None,
    cwds: tuple[str, ...],
    namespace: int | None,
) -> isolation.Confinement:
    """What the forked child enters before exec (xce/worker/keeper/isolation.py `enter`, as
    the job's leader does): the job's cgroup, a session, the job's mount namespace through
    the descriptor `namespace` (None: the job has the host's mounts too), the user, a new
    session keyring, then the first working directory the user can enter."""
    return isolation.Confinement(
        cgroup=cgroup,
        user=creds,
        mounts=isolation.JoinMounts(namespace) if namespace is not None else None,
        cwds=cwds,
    )


class TaskService:
    """The listener; the attempts it serves are looked up in the agent at each request."""

    def __init__(self, agent: AgentState, report_shares_now: Callable[[], Awaitable[None]]) -> None:
        self.agent = agent  # the worker's state (xce/worker/agent/state.py)
        # A heartbeat at once (xce/worker/agent/link.py), before a share's task is reported.
        self.report_shares_now = report_shares_now
        self.server: asyncio.AbstractServer | None = None
        self.address = ""
        # The shares of this host as last assigned (with their launch info), by attempt.
        self.shares: dict[Key, Share] = {}
        # One fence watcher per share that has had tasks (xce/worker/tasks/sharefence.py).
        self.watchers: dict[Key, subprocess.Popen[bytes]] = {}
        self.open = 0  # connections that proved a credential
        self.open_by_attempt: dict[Key, int] = {}
        self.handshakes = Handshakes()
        # Hellos read, waiting for their attempt's assignment (ASSIGNMENT_WAIT_S): bounded
        # apart, so the pending connections (idle ones) can never drop a hello that was sent.
        self.waiting = Handshakes()
        # The key an unknown attempt's proof is checked against: the same work as a known
        # one's, and no hello can match it (no one else holds it).
        self.decoy = secrets.token_hex(32)
        # The mount namespace of each share that has had tasks (a descriptor, None where
        # none can be made), made at its first task and closed when the share goes.
        self.namespaces: dict[Key, int | None] = {}
        self.namespace_locks: dict[Key, asyncio.Lock] = {}
        # The threads that fork tasks: a few, apart from the default executor, so tasks
        # stuck before exec (a frozen cgroup) hold up only other task starts.
        self.spawner = concurrent.futures.ThreadPoolExecutor(
            max_workers=8, thread_name_prefix="xce-task-start"
        )

    async def start(self, host: str, port: int) -> str:
        # A deep accept queue: with the default (100) a burst of connections overflows it and
        # a launch's connect behind them is dropped and retried a second later by the kernel.
        self.server = await asyncio.start_server(self._serve, host, port, backlog=ACCEPT_BACKLOG)
        bound = self.server.sockets[0].getsockname()
        shown = f"[{host}]" if ":" in host else host
        self.address = f"{shown}:{bound[1]}"
        log.info("task service listening on %s", self.address)
        return self.address

    def follow_shares(self, shares: list[Share]) -> None:
        self.shares = {(s.job_id, s.attempt): s for s in shares}
        for key in [k for k in self.namespaces if k not in self.shares]:
            self._drop_namespace(key)
        for key, watcher in list(self.watchers.items()):
            if watcher.poll() is not None:  # reaped: it saw its cgroup go
                del self.watchers[key]

    def _watch_share(self, key: Key, cgroup: JobCgroup) -> None:
        """Start the share's fence watcher, once (a frozen binary has no module to run)."""
        watcher = self.watchers.get(key)
        if (watcher is not None and watcher.poll() is None) or getattr(sys, "frozen", False):
            return
        from xce.worker.agent.hostinfo import cgroup_namespace

        agent = self.agent
        argv = [
            *python_module("xce.worker.tasks.sharefence"),  # -P: no cwd on sys.path
            str(agent.spool.state),
            agent.backend.kind,
            agent.settings.cgroup_parent,
            cgroup_namespace(agent.host, agent.settings.spool_dir),
            cgroup.name,
        ]
        try:
            self.watchers[key] = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            log.warning("job %s attempt %s: no fence watcher for its share: %s", *key, exc)

    def _drop_namespace(self, key: Key) -> None:
        """Let go of a share's mount namespace: its tmpfs mounts go with its last task."""
        held = self.namespaces.pop(key, None)
        self.namespace_locks.pop(key, None)
        if held is not None:
            os.close(held)

    async def _namespace(self, key: Key, target: Target, cwds: tuple[str, ...]) -> int | None:
        """A descriptor of the job's mount namespace for one task, the caller's to close
        (None: the job has the host's mounts, and so has the task). TaskRefused where the
        namespace cannot be had: a task never starts outside the job's namespace."""
        try:
            if target.keeper is not None:
                return await asyncio.to_thread(_keeper_namespace, *target.keeper)
            lock = self.namespace_locks.setdefault(key, asyncio.Lock())
            async with lock:
                if key not in self.namespaces:
                    private = isolation.private_tmp_for(
                        self.agent.settings.private_tmp, *cwds, self.agent.launch_bin
                    )
                    made = await asyncio.get_running_loop().run_in_executor(
                        self.spawner, isolation.hold_new_namespace, target.memory_bytes, private
                    )
                    if key not in self.shares:  # released meanwhile
                        if made is not None:
                            os.close(made)
                        raise TaskRefused(f"job {key[0]} ended while its task was starting")
                    self.namespaces[key] = made
            held = self.namespaces.get(key)
            return os.dup(held) if held is not None else None
        except OSError as exc:
            raise TaskRefused(f"cannot join the job's /tmp and /dev/shm: {exc}") from None

    async def close(self) -> None:
        for key in list(self.namespaces):
            self._drop_namespace(key)
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await self.server.wait_closed()

    # --- who may run what ------------------------------------------------------------

    def _credential(self, key: Key) -> str:
        """The launch credential of an attempt this host runs or holds a share of ("" if none)."""
        job = self.agent.running.get(key)
        a: Assignment | Share | None = job.assignment if job is not None else self.shares.get(key)
        return a.launch.credential if a is not None and a.launch is not None else ""

    def authentic(self, hello: Hello, nonce: bytes) -> bool:
        """Whether the hello proves the credential of its attempt on this host for this
        service's `nonce` and the hello's own."""
        expected = self._credential((hello.job_id, hello.attempt))
        nonces = nonce + hello.nonce
        made = proof(expected or self.decoy, nonces, hello.job_id, hello.attempt, hello.host)
        return hmac.compare_digest(made, hello.proof) and bool(expected)

    def attempt_limit(self, key: Key) -> int:
        """How many proven connections the attempt may hold here: PER_SLOT per slot it has on
        this host (its first host's count, or its share's), at least PER_ATTEMPT_FLOOR."""
        job = self.agent.running.get(key)
        share = self.shares.get(key)
        slots = 0
        if job is not None:
            hosts = job.assignment.hosts
            slots = hosts[0][1] if hosts else job.assignment.slots
        elif share is not None:
            slots = share.slots
        return max(PER_ATTEMPT_FLOOR, PER_SLOT * slots)

    def refusal(self) -> bytes:
        """The one answer to every hello that proves no credential here, whatever was wrong:
        a wrong credential for a running attempt and any for an unknown one read alike."""
        return exit_frame(
            None,
            None,
            f"host {self.agent.host} refused the launch: no attempt here has that job, "
            "attempt and credential",
        )

    async def _authenticate(self, hello: Hello, nonce: bytes, writer: asyncio.StreamWriter) -> None:
        """Return once the hello proves its attempt's credential here; raise NotAuthenticated
        at the end of ASSIGNMENT_WAIT_S otherwise. A wrong proof waits the same as an attempt
        not (yet) assigned here, so both answers leave at the same moment."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ASSIGNMENT_WAIT_S
        while not self.authentic(hello, nonce):
            if loop.time() >= deadline or writer.is_closing():
                raise NotAuthenticated
            await asyncio.sleep(0.1)

    def target(self, req: TaskRequest) -> Target:
        """The attempt's place on this host: all from its assignment, none from the request
        (whose hello proved the attempt's credential)."""
        key = (req.job_id, req.attempt)
        job = self.agent.running.get(key)
        share = self.shares.get(key)
        a: Assignment | Share
        keeper: tuple[int, int | None, str] | None = None
        memory_bytes: int | None = None
        if job is not None:
            a, cgroup = job.assignment, job.cgroup
            cwds: tuple[str, ...] = (str(job.work_dir),)
            if job.killing or job.keeper is None or job.attempt_dir is None:
                cgroup = None
            else:
                keeper = (job.keeper, job.keeper_start, str(job.attempt_dir))
        elif share is not None:
            a = share
            held = self.agent.shares.held.get(key)
            cgroup = held.cgroup if held is not None else None
            cwds = tuple(c for c in (share.launch.cwd if share.launch else "",) if c)
            memory_bytes = share.memory_mb * 1024 * 1024 if share.memory_mb else None
        else:
            raise TaskRefused(f"job {req.job_id} attempt {req.attempt} ended on {self.agent.host}")
        if a.action != "run" or cgroup is None:
            raise TaskRefused(
                f"job {req.job_id} is not running on host {self.agent.host} (it is {a.action})"
            )
        return Target(
            a.user,
            cgroup,
            cwds,
            gpus.job_env(a.devices, self.agent.devices),
            keeper,
            memory_bytes,
        )

    # --- one connection, one task ------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        proc: taskproc.Task | None = None
        peer = peer_address(writer)
        counted: Key | None = None
        proven = False
        session: Session | None = None
        self.handshakes.enter(peer, writer)
        try:
            try:
                try:
                    hello, nonce = await self._handshake(reader, writer)
                finally:
                    self.handshakes.leave(peer, writer)
                if not self.authentic(hello, nonce):
                    self.waiting.enter(peer, writer)
                    try:
                        await self._authenticate(hello, nonce, writer)
                    finally:
                        self.waiting.leave(peer, writer)
                proven = True
                key = (hello.job_id, hello.attempt)
                if self.open >= MAX_CONNECTIONS:
                    raise TaskRefused(
                        f"host {self.agent.host} serves {MAX_CONNECTIONS} tasks already"
                    )
                limit = self.attempt_limit(key)
                if self.open_by_attempt.get(key, 0) >= limit:
                    raise TaskRefused(
                        f"job {key[0]} has {limit} tasks on host {self.agent.host} already"
                    )
                self.open += 1
                self.open_by_attempt[key] = self.open_by_attempt.get(key, 0) + 1
                counted = key
                credential = self._credential(key)
                nonces = nonce + hello.nonce
                writer.write(ready_frame(credential, nonces, *key, hello.host))
                session = Session(session_key(credential, nonces, *key, hello.host), False)
                # As short as the hello's: a launch sends its request at once, and a proven
                # connection that sends none holds a place of its attempt's meanwhile.
                body = await asyncio.wait_for(
                    read_sealed(reader, session, REQUEST, MAX_REQUEST, "request"), HANDSHAKE_S
                )
                req = parse_request(body, hello)
                proc = await self._spawn(req)
            except NotAuthenticated:
                writer.write(self.refusal())
                await writer.drain()
                return
            except (TaskRefused, running.LaunchError) as exc:
                # Only a caller who proved a credential is worth a warning: anyone can make
                # the others, and a line each would be a cheap flood of the worker's log.
                log.log(logging.WARNING if proven else logging.DEBUG, "task refused: %s", exc)
                answer = str(exc)
                writer.write(
                    session.exit_frame(None, None, answer)
                    if session
                    else exit_frame(None, None, answer)
                )
                await writer.drain()
                return
            except TimeoutError:
                answer = "the request is incomplete"
                writer.write(
                    session.exit_frame(None, None, answer)
                    if session
                    else exit_frame(None, None, answer)
                )
                await writer.drain()
                return
            await self._pump(proc, session, reader, writer, (req.job_id, req.attempt))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            if proc is not None and proc.returncode is None:
                # The caller went away: the task is ended like `ssh` ends its command.
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                with contextlib.suppress(Exception):
                    await proc.wait()
            with contextlib.suppress(Exception):
                writer.close()
            if counted is not None:
                self.open -= 1
                left = self.open_by_attempt.get(counted, 1) - 1
                if left > 0:
                    self.open_by_attempt[counted] = left
                else:
                    self.open_by_attempt.pop(counted, None)

    async def _handshake(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[Hello, bytes]:
        """The challenge, then a hello within HANDSHAKE_S, for this host: the hello and this
        service's nonce (whether it proves a credential is the caller's to check, once the
        connection is out of the pending pool)."""
        nonce = secrets.token_bytes(NONCE_BYTES)
        writer.write(challenge_frame(nonce))
        try:
            async with asyncio.timeout(HANDSHAKE_S):
                data = await read_frame(reader, HELLO, MAX_HELLO, "hello")
        except TimeoutError:
            raise TaskRefused(f"no hello within {HANDSHAKE_S:g} s") from None
        hello = parse_hello(data)
        if hello.host != self.agent.host:
            raise TaskRefused(f"this is host {self.agent.host}, not {hello.host}")
        return hello, nonce

    async def _spawn(self, req: TaskRequest) -> taskproc.Task:
        target = self.target(req)
        settings = self.agent.settings
        account = accounts.account_for(target.user, settings.allow_root_jobs, settings.min_job_uid)
        creds = accounts.credentials(account)
        env = {k: v for k, v in req.env.items() if k not in OWN_VARIABLES}
        if account is not None:
            env.update(
                HOME=account.pw_dir,
                USER=account.pw_name,
                LOGNAME=account.pw_name,
                SHELL=account.pw_shell or "/bin/sh",
            )
        env.update(
            XCE_TASK_ID=str(req.task_id),
            XCE_LOCAL_TASK_ID=str(req.local_task_id),
            XCE_EXEC_HOST=self.agent.host,
            XCE_JOB_ID=req.job_id,
            XCE_ATTEMPT=str(req.attempt),
        )
        # The credential never travels in the request (`xce launch` leaves it out): a task
        # that launches tasks of its own (an MPI daemon) gets it from this host's assignment.
        credential = self._credential((req.job_id, req.attempt))
        if credential:
            env["XCE_LAUNCH_CRED"] = credential
        env.update(target.gpu_env)  # after the request's: XCE owns them, as for the job
        env.setdefault("PATH", jobenv.BASE_PATH)
        if self.agent.launch_bin:  # this host's own `xce`, for launches from the task
            env["PATH"] = f"{self.agent.launch_bin}:{env['PATH']}"
            env["XCE_LAUNCH"] = f"{self.agent.launch_bin}/xce"
        cwds = target.cwds + ((account.pw_dir,) if account is not None else ())
        key = (req.job_id, req.attempt)
        if key not in self.agent.running:
            self._watch_share(key, target.cgroup)
        namespace = await self._namespace(key, target, target.cwds)
        try:
            # Forked off the event loop (xce/worker/tasks/process.py): the child joins the job's
            # cgroup before exec, and one being frozen (a stop, or a resume whose thaw has
            # not run yet) freezes the child there; Popen waits for the exec, and on the
            # loop that wait would stop the worker, the thaw included, for good.
            proc = await taskproc.start(
                self.spawner,
                list(req.argv),
                env,
                child_setup(target.cgroup, creds, cwds, namespace),
            )
        except taskproc.TaskNotStarted as exc:
            raise TaskRefused(f"cannot start the task: {exc}") from None
        except (OSError, ValueError) as exc:
            raise TaskRefused(f"cannot run {req.argv[0]}: {exc}") from None
        except Exception as exc:  # subprocess.SubprocessError from the child's setup
            raise TaskRefused(f"cannot start the task: {exc}") from None
        finally:
            if namespace is not None:
                os.close(namespace)  # the child has its own now (or never will)
        if key not in self.agent.running and key not in self.agent.shares.held:
            # The attempt ended while the task was being forked (the start runs in a thread):
            # its keeper's or the share's final kill may have run before the child joined the
            # cgroup, and nothing else would ever end it. End the leftover cgroup now.
            await asyncio.to_thread(jobcontrol.drop_cgroup, target.cgroup)
            with contextlib.suppress(Exception):
                await proc.wait()
            raise TaskRefused(f"job {req.job_id} ended while its task was starting")
        log.info(
            "job %s attempt %s: task %s started as pid %s (%s)",
            req.job_id,
            req.attempt,
            req.task_id,
            proc.pid,
            req.argv[0][:80],
        )
        return proc

    async def _pump(
        self,
        proc: taskproc.Task,
        session: Session,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        key: Key,
    ) -> None:
        lock = asyncio.Lock()

        async def out(stream: asyncio.StreamReader | None, channel: int) -> None:
            assert stream is not None
            while data := await stream.read(65536):
                async with lock:
                    writer.write(session.seal(channel, data))
                    await writer.drain()

        async def stdin() -> None:
            assert proc.stdin is not None
            try:
                while True:
                    channel, length = HEADER.unpack(await reader.readexactly(HEADER.size))
                    if channel != STDIN or length > MAX_FRAME + TAG_BYTES:
                        break
                    data = session.open(channel, await reader.readexactly(length))
                    if not data:
                        break
                    proc.stdin.write(data)
                    await proc.stdin.drain()
            except NotProven:
                # Input the launch did not send (put in by someone between): the task is
                # ended, as when the connection is cut, and never reads it.
                log.warning("job %s attempt %s: a task's input failed its check", *key)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            except (asyncio.IncompleteReadError, ConnectionError, struct.error):
                pass
            finally:
                with contextlib.suppress(Exception):
                    proc.stdin.close()

        feeder = asyncio.ensure_future(stdin())
        try:
            await asyncio.gather(out(proc.stdout, STDOUT), out(proc.stderr, STDERR))
            status = await proc.wait()
        finally:
            feeder.cancel()
        code, sig = (status, None) if status >= 0 else (None, -status)
        if key not in self.agent.running:
            # A share's task: the controller hears the share's usage (and any OOM kill)
            # before the caller hears the status, so the job's final usage counts it.
            await self.report_shares_now()
        async with lock:
            writer.write(session.exit_frame(code, sig))
            await writer.drain()


def _keeper_namespace(keeper: int, keeper_start: int | None, attempt_dir: str) -> int | None:
    """A descriptor of the mount namespace the job's keeper holds (keeper.json names the
    descriptor; xce/worker/keeper/process.py). None where the job has the host's mounts: it
    recorded none, or a keeper of an earlier version does not say (its tasks kept the host's
    then, as before). OSError where it says one and that cannot be opened: the caller must
    not start the task at all."""
    record = read_json(attempt_dir, KEEPER, missing_only=True)
    if record is None:
        raise OSError(errno.ENOENT, "the job's keeper has not recorded it")
    if MOUNT_NAMESPACE not in record:
        log.warning("a job's keeper of an earlier version: its tasks get the host's /tmp")
        return None
    held = record[MOUNT_NAMESPACE]
    if held is None:
        return None
    fd = held.get("fd") if isinstance(held, dict) else None
    if isinstance(fd, bool) or not isinstance(fd, int):
        raise OSError(errno.EINVAL, "the keeper's record of it is not one")
    return isolation.open_held_namespace(keeper, keeper_start, fd, held.get("id"))
