"""`xce worker`: registers the host, follows its desired job set, reports back.

The worker reconciles: every answer from the controller is the complete list of what this
host should run, stop or kill, and the worker makes its processes match it. Processes are
keyed by (job id, attempt) and attempts that already ended are remembered, so a repeated or
late answer never starts a job twice. Finish reports are retried until the controller takes
them, so a controller restart or failover loses none.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import resource
import shutil
import signal
from collections import OrderedDict
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psutil

from xce.auth.pki import client_ssl_context
from xce.client import ApiError, XceClient
from xce.client.http import job_path
from xce.config import Config, WorkerSettings
from xce.worker import executor, fence, gpus, staging, tail, userfs
from xce.worker.cgroups import CgroupBackend, detect
from xce.worker.executor import JobResult, LaunchError, RunningJob, Spool
from xce.worker.launcher import KeeperLauncher
from xce.worker.shares import ShareHolder
from xce.worker.tasks import LAUNCHER_DIR, TaskService, install_launcher

log = logging.getLogger("xce.worker")
Key = tuple[str, int]
# A report whose outputs the controller refuses with server errors this many times in a
# row goes without them (unreachable controllers are waited for, however long).
MAX_UPLOAD_TRIES = 6
# How long a task that ended in a share waits for its figures to reach the controller.
SHARE_REPORT_WAIT_S = 5.0


def host_resources(settings: WorkerSettings) -> tuple[int, int]:
    slots = settings.slots or os.cpu_count() or 1
    memory = settings.memory_mb or psutil.virtual_memory().total // (1024 * 1024)
    return slots, memory


class WorkerAgent:
    def __init__(self, config: Config, client: XceClient | None = None) -> None:
        self.config = config
        self.settings = config.worker
        self.host = self.settings.name
        self.client = client or XceClient(
            config.controllers,
            self.settings.token or None,
            ssl_context=client_ssl_context(config.tls),
            insecure=config.tls.insecure,
        )
        self.running: dict[Key, RunningJob] = {}
        # Spawned but not yet in `running`: a second answer in that window must not start
        # the same attempt again.
        self.starting: set[Key] = set()
        self.ended: OrderedDict[Key, None] = OrderedDict()
        self.reports: dict[Key, dict[str, Any]] = {}
        # The attempts whose reports are pending: their directories go once a report is taken.
        self.report_jobs: dict[Key, RunningJob] = {}
        self._saving: dict[Key, asyncio.Task[None]] = {}  # report files being written
        self._retry_at: dict[Key, float] = {}  # loop time of a failed report's next try
        self._tries: dict[Key, int] = {}
        # Reports the controller took, kept a while: if an answer still lists the attempt
        # (a relaxed-fsync controller lost it in a crash) the report is sent again.
        self.delivered: OrderedDict[Key, dict[str, Any]] = OrderedDict()
        self.version = -1
        self.registered = asyncio.Event()
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._report_wakeup = asyncio.Event()
        self.output = tail.OutputPusher()
        self.spool = Spool(self.settings.spool_dir, self.settings.job_root())
        namespace = cgroup_namespace(self.host, self.settings.spool_dir)
        self.backend: CgroupBackend = detect(
            self.settings.cgroup, self.settings.cgroup_parent, namespace
        )
        # Devices by kind, configured or detected once at start (xce/worker/gpus.py).
        self.devices = gpus.host_devices(self.settings.gres, self.settings.gpu_device_path)
        self.shares = ShareHolder(self.backend, self.settings.pids_limit, self.devices)
        # `xce launch` (issue 15): the task service, and the directory of this worker's own
        # `xce` that goes first on every job's PATH.
        self.tasks = TaskService(self)
        self.launch_bin = ""
        self.launcher = KeeperLauncher(self.backend.kind, self.settings.cgroup_parent, namespace)
        # The fence (xce/worker/fence.py): the controller sets the timeout when we register.
        self.contact = fence.Contact(0.0, fence.DEFAULT_FENCE_TIMEOUT_S)
        # Per file and per job, as the controller says (xce/worker/staging.py).
        self.output_limits = staging.OutputLimits()

    # --- bookkeeping --------------------------------------------------------------------

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _remember_ended(self, key: Key) -> None:
        self.ended[key] = None
        while len(self.ended) > 100_000:
            self.ended.popitem(last=False)

    @property
    def _base(self) -> str:
        return f"/api/v1/workers/{quote(self.host)}"

    # --- talking to the controller ------------------------------------------------------

    async def register(self) -> None:
        slots, memory = host_resources(self.settings)
        body = {
            "host": self.host,
            "slots": slots,
            "memory_mb": memory,
            # detected GPU attributes first: the configured ones win
            "attributes": {**self.devices.attributes, **dict(self.settings.attributes)},
            "containment": containment(self.backend),
        }
        if self.devices.devices:
            body["gres"] = {kind: list(ids) for kind, ids in self.devices.devices.items()}
        if self.tasks.address:
            body["task_address"] = self.tasks.address
        delay = 0.2
        while True:
            try:
                sent = fence.now()
                answer = await self.client.request("POST", "/api/v1/workers/register", json=body)
                self._contacted(sent, answer)
                break
            except ApiError as exc:
                if exc.status == 400 and "containment" in exc.message and "containment" in body:
                    # An older controller: register without saying how jobs are contained.
                    body.pop("containment")
                    continue
                if exc.status != 0 and exc.status < 500:
                    raise
                log.info("controller not reachable yet (%s); retrying", exc.message)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
        log.info("registered as %s (%d slots, %d MB)", self.host, slots, memory)
        self.registered.set()
        await self.reconcile(answer)

    async def poll_loop(self) -> None:
        while True:
            try:
                answer = await self.client.request(
                    "GET",
                    f"{self._base}/assignments",
                    params={"version": str(self.version), "timeout": "20"},
                    timeout=30,
                )
                await self.reconcile(answer)
            except ApiError as exc:
                await self._on_error(exc)

    async def heartbeat_loop(self) -> None:
        """A heartbeat every interval; sooner (every `tail.PUSH_S`) while job output grows."""
        loop = asyncio.get_running_loop()
        interval = self.settings.heartbeat_interval_s
        next_beat = loop.time() + interval
        while True:
            now = loop.time()
            await asyncio.sleep(max(0.0, min(next_beat, now + tail.PUSH_S) - now))
            chunks = self.output.collect(list(self.running.values()))
            if not chunks and loop.time() < next_beat:
                continue
            await self._heartbeat(chunks)
            next_beat = loop.time() + interval

    async def _heartbeat(self, chunks: list[tail.Chunk]) -> None:
        output = self.output.report(chunks)
        running = []
        for job in self.running.values():
            if job.meter is None:
                continue
            item: dict[str, Any] = {
                "job_id": job.key[0],
                "attempt": job.key[1],
                "cpu_user_s": job.meter.cpu_user_s,
                "cpu_system_s": job.meter.cpu_system_s,
                "max_rss_bytes": job.meter.max_rss_bytes,
                "wall_time_s": job.wall_seconds(),
            }
            if job.key in output:
                item["output"] = output[job.key]
            running.append(item)
        load1, load5, load15 = os.getloadavg()
        mem = psutil.virtual_memory()
        body: dict[str, Any] = {
            "running": running,
            "load": {
                "load1": load1,
                "load5": load5,
                "load15": load15,
                "mem_free_mb": mem.available // (1024 * 1024),
            },
        }
        if self.shares.held:  # multi-host jobs' parts here: their usage, OOM kills (issue 15)
            body["shares"] = await asyncio.to_thread(self.shares.readings)
        try:
            sent = fence.now()
            answer = await self.client.request(
                "POST", f"{self._base}/heartbeat", json=body, timeout=10
            )
            self._contacted(sent, answer)
            self.output.taken(chunks)
            if (
                isinstance(answer, dict)
                and answer.get("register_again")
                and self.registered.is_set()
            ):
                # A controller that restarted or took over has not heard how we contain jobs.
                self.registered.clear()
                self._spawn(self.register())
        except ApiError as exc:
            if output and exc.status in (400, 413):
                # Never lose a heartbeat over its output: send it again without.
                self.output.refused(exc.status, exc.message)
                await self._heartbeat([])
                return
            await self._on_error(exc)

    async def report_shares_now(self) -> None:
        """A heartbeat at once, without output, so the controller has a share's figures
        before the task that just ended there is reported to its caller (xce/worker/
        tasks.py): the job's final usage then counts it (issue 15)."""
        try:
            await asyncio.wait_for(self._heartbeat([]), SHARE_REPORT_WAIT_S)
        except TimeoutError:
            log.warning(
                "the controller did not take a share's usage within %s s", SHARE_REPORT_WAIT_S
            )

    def _contacted(self, sent: float, answer: Any) -> None:
        """A controller took our registration or heartbeat sent at `sent`: the keepers'
        fence starts again from then (never from the answer's arrival, which is later than
        the controller's own record of the contact)."""
        timeout = self.contact.fence_timeout_s
        if isinstance(answer, dict) and isinstance(answer.get("fence_timeout_s"), int | float):
            timeout = float(answer["fence_timeout_s"])
        self.contact = fence.Contact(max(sent, self.contact.at), timeout)
        self.output_limits = staging.OutputLimits.of(answer) or self.output_limits
        try:
            fence.record(str(self.spool.state), self.contact)
        except OSError as exc:
            log.error("cannot record the controller contact (%s): jobs will be fenced", exc)

    async def _on_error(self, exc: ApiError) -> None:
        if exc.status == 404:
            log.warning("controller does not know this host (%s): registering again", exc.message)
            self.registered.clear()
            await self.register()
            return
        log.warning("controller request failed: %s", exc.message)
        await asyncio.sleep(1.0)

    async def report_loop(self) -> None:
        """Deliver finish reports until each is taken (accepted or known to be stale).

        Each report is retried on its own schedule (1 s doubling to 60 s): one that keeps
        failing never holds up the reports of other jobs behind it."""
        loop = asyncio.get_running_loop()
        while True:
            due = [self._retry_at.get(key, 0.0) for key in self.reports]
            wait = max(0.0, min(due) - loop.time()) if due else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._report_wakeup.wait(), wait)
            self._report_wakeup.clear()
            for key, body in list(self.reports.items()):
                if self._retry_at.get(key, 0.0) > loop.time():
                    continue
                try:
                    if "_upload" in body:
                        body = await self._upload_pending(key, body)
                    answer = await self.client.request(
                        "POST",
                        f"{self._base}/jobs/{job_path(key[0])}/finished",
                        json={k: v for k, v in body.items() if not k.startswith("_")},
                    )
                    if not answer.get("accepted"):
                        log.info("job %s attempt %s: report was stale, dropped", *key)
                except ApiError as exc:
                    if 400 <= exc.status < 500 and exc.status not in (404, 408, 429):
                        log.error("finish report for %s refused (%s): dropped", key[0], exc.message)
                    else:
                        tries = self._tries.get(key, 0) + 1
                        self._tries[key] = tries
                        delay = min(60.0, 2.0 ** (tries - 1))
                        self._retry_at[key] = loop.time() + delay
                        log.warning(
                            "finish report for %s failed: %s; retrying in %.0f s",
                            key[0],
                            exc.message,
                            delay,
                        )
                        continue
                self._retry_at.pop(key, None)
                self._tries.pop(key, None)
                self._taken(key, body)

    async def _upload_pending(self, key: Key, body: dict[str, Any]) -> dict[str, Any]:
        """Return the outputs that could not be returned when the job ended."""
        job = self.report_jobs.get(key)
        if job is None:
            return {k: v for k, v in body.items() if k != "_upload"}
        try:
            if not job.readers:
                job.readers = await userfs.as_user(
                    job.creds, executor.open_readers, str(job.job_dir)
                )
            names = await staging.upload_outputs(self.client, self.host, job, self.output_limits)
        except ApiError as exc:
            if exc.status == 0 or self._tries.get(key, 0) < MAX_UPLOAD_TRIES:
                raise  # unreachable, or not yet given up: the report waits and retries
            log.error(
                "job %s: the controller keeps refusing its outputs (%s); reporting without them",
                key[0],
                exc.message,
            )
            names = []
        except OSError as exc:
            log.warning("job %s: outputs are gone (%s); reporting without them", key[0], exc)
            names = []
        finally:
            executor.close_readers(job)
        done = {k: v for k, v in body.items() if k != "_upload"}
        done["outputs"] = names
        self.reports[key] = done
        with contextlib.suppress(OSError):
            executor.save_report(job, done)
        return done

    def _taken(self, key: Key, body: dict[str, Any]) -> None:
        """The controller has the report: forget it and the attempt's directory."""
        self.reports.pop(key, None)
        self.delivered[key] = body
        while len(self.delivered) > 10_000:
            self.delivered.popitem(last=False)
        job = self.report_jobs.pop(key, None)
        if job is not None:
            self._spawn(self._clean(job))

    async def _clean(self, job: RunningJob) -> None:
        """Forget an attempt: its job directory (emptied as its user), then its state (off
        the event loop: a large tree must not hold up other jobs' starts and reports)."""
        saving = self._saving.pop(job.key, None)
        if saving is not None:
            await asyncio.wait([saving])  # its report file goes with the attempt's directory
        executor.close_readers(job)
        await executor.remove_job_dir(job.job_dir, job.creds)
        if job.attempt_dir is not None:
            await asyncio.to_thread(shutil.rmtree, job.attempt_dir, ignore_errors=True)

    def _save_report(self, key: Key, job: RunningJob, body: dict[str, Any]) -> None:
        try:
            executor.save_report(job, body)
        except OSError as exc:
            log.warning("job %s: cannot save its result (%s)", key[0], exc)

    def _queue_report(self, key: Key, body: dict[str, Any], job: RunningJob | None) -> None:
        body = {**body, "reason": str(body.get("reason", ""))[:1000]}
        self._remember_ended(key)
        if job is not None:
            # Saved (fsynced) in a thread while the report goes out: the event loop keeps
            # starting and reporting other jobs meanwhile. Until it is on disk the keeper's
            # result.json stands for it (a restarted worker reports from that).
            saving = self._spawn(asyncio.to_thread(self._save_report, key, job, body))
            self._saving[key] = saving
            saving.add_done_callback(
                lambda done, k=key: self._saving.pop(k) if self._saving.get(k) is done else None
            )
            self.report_jobs[key] = job
        self.reports[key] = body
        self._report_wakeup.set()

    # --- reconciliation -----------------------------------------------------------------

    async def reconcile(self, answer: dict[str, Any]) -> None:
        async with self._lock:
            self.version = answer.get("version", self.version)
            desired = {(a["job_id"], a["attempt"]): a for a in answer.get("jobs", [])}
            for key, a in desired.items():
                job = self.running.get(key)
                if job is None:
                    if key in self.delivered and key not in self.reports:
                        log.info(
                            "job %s attempt %s: the controller lost its report; resending", *key
                        )
                        self.reports[key] = self.delivered.pop(key)
                        self._report_wakeup.set()
                        continue
                    if key in self.ended or key in self.reports or key in self.starting:
                        continue
                    if a["action"] == "kill":
                        self._finish_unstarted(a, "killed before it started")
                        continue
                    self.starting.add(key)
                    self._spawn(self._run(a))
                    continue
                # `xce job modify` may change a running job's walltime: the next check uses it
                job.assignment = {
                    **job.assignment,
                    "action": a["action"],
                    "walltime_s": a.get("walltime_s"),
                }
                self._apply_action(job, a["action"])
            await asyncio.to_thread(self.shares.reconcile, answer.get("shares") or [])
            self.tasks.follow_shares(answer.get("shares") or [])
            for key, job in list(self.running.items()):
                if key not in desired:
                    log.info("job %s attempt %s is no longer assigned here: killing", *key)
                    self._spawn(executor.kill(job, "taken away", self.settings.kill_grace_s))

    def _apply_action(self, job: RunningJob, action: str) -> None:
        if job.keeper is None:
            return  # not started yet: _run applies the latest action once it is
        if action == "stop":
            self._spawn(executor.suspend(job))
        elif action == "run":
            self._spawn(executor.resume(job))
        elif action == "kill":
            self._spawn(executor.kill(job, "killed", self.settings.kill_grace_s))

    def _finish_unstarted(
        self, a: dict[str, Any], reason: str, job: RunningJob | None = None
    ) -> None:
        key = (a["job_id"], a["attempt"])
        self._queue_report(key, {"attempt": a["attempt"], "exit_code": None, "reason": reason}, job)

    async def _run(self, a: dict[str, Any]) -> None:
        key: Key = (a["job_id"], a["attempt"])
        if self.launch_bin and isinstance(a.get("launch"), dict):
            a = {**a, "launch": {**a["launch"], "bin": self.launch_bin}}
        try:
            account = executor.account_for(
                a["user"], self.settings.allow_root_jobs, self.settings.min_job_uid
            )
            job = await executor.prepare(self.spool, a, account)
        except (LaunchError, OSError) as exc:
            log.warning("job %s cannot start: %s", key[0], exc)
            self.starting.discard(key)
            self._finish_unstarted(a, str(exc))
            return
        self.running[key] = job
        self.starting.discard(key)
        loop = asyncio.get_running_loop()
        job.result = loop.create_future()
        try:
            try:
                await staging.fetch_inputs(self.client, self.host, job)
                if key not in self.running or job.killing:
                    raise LaunchError(job.kill_reason or "taken away before it started")
                await executor.launch(
                    job,
                    self.launcher,
                    self.backend,
                    account,
                    self.host,
                    self.settings.pids_limit,
                    self.spool.state,
                    self.contact,
                    host_resources(self.settings)[1],
                    self.settings.private_tmp,
                    self.devices,
                )
            except (LaunchError, ApiError, OSError, ValueError) as exc:
                message = exc.message if isinstance(exc, ApiError) else str(exc)
                log.warning("job %s failed to start: %s", key[0], message)
                self.running.pop(key, None)
                job.result.set_result(JobResult(None, None, message, executor.UsageMeter(), 0))
                self._finish_unstarted(a, f"failed to start: {message}", job)
                return
            log.info("job %s attempt %s started as pid %s", key[0], key[1], job.pid)
            try:
                # An action that arrived while inputs were fetched applies now.
                self._apply_action(job, job.assignment.get("action", "run"))
            finally:
                await self._follow(job)  # a started attempt is always followed to its end
        finally:
            self.running.pop(key, None)
            if not job.result.done():
                failed = JobResult(None, None, "worker error", executor.UsageMeter(), 0)
                job.result.set_result(failed)

    async def _follow(self, job: RunningJob) -> None:
        """Wait for a started (or adopted) attempt to end, then report it."""
        assert job.result is not None
        try:
            result = await executor.wait(
                job, self.settings.usage_interval_s, self.settings.kill_grace_s
            )
        except Exception as exc:  # never lose track of a started job: end it, say why
            log.exception("job %s: waiting for it failed; killing it", job.key[0])
            await asyncio.to_thread(executor.kill_group_now, job)
            result = JobResult(None, None, f"worker error: {exc}", job.meter, job.wall_seconds())
        if not job.result.done():
            job.result.set_result(result)
        self.running.pop(job.key, None)
        await self._report(job, result)

    async def _report(self, job: RunningJob, result: JobResult) -> None:
        key = job.key
        self._remember_ended(key)
        if job.kill_reason == "taken away":
            # Requeued or reassigned: the controller no longer wants this attempt.
            await self._clean(job)
            return
        outputs: list[str] = []
        upload_later = False
        try:
            await staging.copy_std_files(job)
            outputs = await staging.upload_outputs(self.client, self.host, job, self.output_limits)
        except ApiError as exc:
            log.warning("job %s: returning outputs failed (%s); will retry", key[0], exc.message)
            upload_later = exc.status == 0 or exc.status >= 500
        except Exception as exc:  # the attempt is reported whatever happened to its files
            log.warning("job %s: returning outputs failed: %s", key[0], exc)
        finally:
            executor.close_readers(job)
        meter = result.usage
        body = {
            "attempt": key[1],
            "exit_code": result.exit_code,
            "exit_signal": result.exit_signal,
            "reason": result.reason,
            "cpu_user_s": round(meter.cpu_user_s, 6),
            "cpu_system_s": round(meter.cpu_system_s, 6),
            "max_rss_bytes": meter.max_rss_bytes,
            "wall_time_s": round(result.wall_time_s, 6),
            "outputs": outputs,
            **meter.gpus.report(),  # GPU utilisation and memory peak, where NVML read them
        }
        if result.host_failure:
            body["host_failure"] = True
        if upload_later:
            body["_upload"] = True
        log.info(
            "job %s attempt %s ended: exit %s signal %s %s",
            key[0],
            key[1],
            result.exit_code,
            result.exit_signal,
            result.reason,
        )
        self._queue_report(key, body, job)

    # --- lifecycle ----------------------------------------------------------------------

    async def _recover(self) -> None:
        """Attempts of an earlier worker process: adopt the live ones, report the rest."""
        for found in await executor.recover(self.spool, self.backend):
            job = found.job
            key = job.key
            if found.report is not None:
                log.info("job %s attempt %s: sending the report an earlier worker saved", *key)
                self._queue_report(key, found.report, job)
            elif found.lost:
                log.warning("job %s attempt %s: %s", key[0], key[1], found.lost)
                self._finish_unstarted(job.assignment, found.lost, job)
            else:
                log.warning(
                    "job %s attempt %s was started by an earlier worker process: %s",
                    key[0],
                    key[1],
                    "adopting it" if found.alive else "it ended",
                )
                self.running[key] = job
                job.result = asyncio.get_running_loop().create_future()
                self._spawn(self._follow(job))

    async def run(self) -> None:
        # Output collection holds up to userfs.MAX_OUTPUTS descriptors at once.
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or soft < hard:
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        self.spool.make()
        self.launcher.start()
        await self._recover()
        await self.tasks.start(self.settings.task_host, self.settings.task_port)
        # In the jobs root (0711, root's): the spool root is 0700, so a directory there
        # would be out of reach of every job not run as root.
        self.launch_bin = install_launcher(self.spool.jobs / LAUNCHER_DIR)
        await self.register()
        loops = [self.poll_loop(), self.heartbeat_loop(), self.report_loop()]
        await asyncio.gather(*(self._spawn(c) for c in loops))

    async def shutdown(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        self.launcher.close()
        await self.tasks.close()  # no new tasks; running ones live on in their cgroups
        await self.client.close()


def cgroup_namespace(host: str, spool_dir: Path) -> str:
    """This worker's directory in each cgroup hierarchy: its name and a digest of its spool,
    so two workers on one machine (even of one name) never see each other's jobs."""
    digest = hashlib.sha256(str(spool_dir.resolve()).encode()).hexdigest()[:10]
    return f"xce-{re.sub(r'[^A-Za-z0-9._-]', '_', host)[:60]}-{digest}"


def containment(backend: CgroupBackend) -> dict[str, Any]:
    """What the registration says about how this host contains jobs (`xce host show`):
    the backend, which limits it enforces, how many cores it can give out."""
    info = backend.describe()
    out: dict[str, Any] = {"kind": backend.kind}
    enforces = info.get("enforces")
    if isinstance(enforces, dict):
        out.update({str(k)[:32]: bool(v) for k, v in list(enforces.items())[:16]})
    cores = info.get("cores")
    if isinstance(cores, list | tuple):
        out["cores"] = len(cores)
    return out


async def run_worker(config: Config) -> None:
    agent = WorkerAgent(config)
    loop = asyncio.get_running_loop()
    main = asyncio.ensure_future(agent.run())
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, main.cancel)
    print(f"xce worker {agent.host} starting (pid {os.getpid()})", flush=True)
    try:
        await main
    except asyncio.CancelledError:
        pass
    finally:
        await agent.shutdown()
