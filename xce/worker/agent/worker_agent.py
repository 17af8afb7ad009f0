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
import logging
import os
import resource
import signal

from xce.client import XceClient
from xce.config.settings import Config
from xce.worker.agent.link import ControllerLink
from xce.worker.agent.reconcile import Reconciler
from xce.worker.agent.relay import HeartbeatRelay
from xce.worker.agent.reports import FinishReports
from xce.worker.agent.state import AgentState
from xce.worker.attempt import recovery
from xce.worker.tasks.installer import LAUNCHER_DIR, install_launcher
from xce.worker.tasks.service import TaskService

__all__ = ["WorkerAgent", "run_worker"]

log = logging.getLogger("xce.worker")


class WorkerAgent:
    """A worker: its shared state (state.py) and its parts, started and stopped here:
    finish reports (reports.py), reconciliation (reconcile.py), the controller link
    (link.py) and `xce launch`'s task service (xce/worker/tasks/service.py)."""

    def __init__(self, config: Config, client: XceClient | None = None) -> None:
        self.state = AgentState(config, client)
        self.reports = FinishReports(self.state)
        self.tasks = TaskService(self.state, self._report_shares_now)
        self.reconciler = Reconciler(self.state, self.reports, self.tasks)
        self.link = ControllerLink(self.state, self.reconciler, self.tasks)
        # Other workers' heartbeats, forwarded in batches (`[worker] relay_listen`).
        self.relay: HeartbeatRelay | None = None

    async def _report_shares_now(self) -> None:
        await self.link.report_shares_now()

    # --- lifecycle ----------------------------------------------------------------------

    async def _recover(self) -> None:
        """Attempts of an earlier worker process: adopt the live ones, report the rest."""
        state = self.state
        for found in await recovery.recover(state.spool, state.backend):
            job = found.job
            key = job.key
            if found.report is not None:
                log.info("job %s attempt %s: sending the report an earlier worker saved", *key)
                self.reports.queue(key, found.report, job)
            elif found.lost:
                log.warning("job %s attempt %s: %s", key[0], key[1], found.lost)
                self.reconciler.finish_unstarted(job.assignment, found.lost, job)
            else:
                log.warning(
                    "job %s attempt %s was started by an earlier worker process: %s",
                    key[0],
                    key[1],
                    "adopting it" if found.alive else "it ended",
                )
                state.running[key] = job
                job.result = asyncio.get_running_loop().create_future()
                state.spawn(self.reconciler.follow(job))

    async def _start_relay(self) -> None:
        """Relay other workers' heartbeats. A relay that cannot listen (its port taken) is
        said in the log and left out: its workers go straight to the controller, and this
        worker still runs its own jobs."""
        state = self.state
        relay = HeartbeatRelay(state.client, state.config.guard.connections)
        try:
            await relay.start(
                state.settings.relay_host, state.settings.relay_port, state.config.tls
            )
        except OSError as exc:
            log.error("cannot relay heartbeats on relay_listen: %s", exc)
            await relay.close()
            return
        self.relay = relay

    async def run(self) -> None:
        # Output collection holds up to userfs.MAX_OUTPUTS descriptors at once.
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or soft < hard:
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        state = self.state
        state.spool.make()
        state.inputs.reset()
        state.launcher.start()
        await self._recover()
        await self.tasks.start(state.settings.task_host, state.settings.task_port)
        if state.settings.relay_port:
            await self._start_relay()
        # In the jobs root (0711, root's): the spool root is 0700, so a directory there
        # would be out of reach of every job not run as root.
        state.launch_bin = install_launcher(state.spool.jobs / LAUNCHER_DIR)
        await self.link.register()
        loops = [self.link.poll_loop(), self.link.heartbeat_loop(), self.reports.report_loop()]
        await asyncio.gather(*(state.spawn(c) for c in loops))

    async def shutdown(self) -> None:
        state = self.state
        state.cancel_all()
        state.launcher.close()
        await self.tasks.close()  # no new tasks; running ones live on in their cgroups
        if self.relay is not None:
            await self.relay.close()  # its waiting workers go straight to the controller
        if state.relay_client is not None:
            await state.relay_client.close()
        await state.client.close()


async def run_worker(config: Config) -> None:
    agent = WorkerAgent(config)
    loop = asyncio.get_running_loop()
    main = asyncio.ensure_future(agent.run())
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, main.cancel)
    print(f"xce worker {agent.state.host} starting (pid {os.getpid()})", flush=True)
    try:
        await main
    except asyncio.CancelledError:
        pass
    finally:
        await agent.shutdown()
