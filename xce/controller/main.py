"""`xce controller`: wires state, service, worker gateway and HTTP API, and runs the loops."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import stat
from pathlib import Path

from aiohttp import web

from xce.api.app import build_app
from xce.auth.pki import server_ssl_context
from xce.client.transport import check_listener
from xce.config import Config, ControllerSettings
from xce.controller.service import ControllerService
from xce.controller.workers import WorkerGateway
from xce.core import events as ev
from xce.core.errors import InvalidRequest
from xce.store.durable import DurableLog, StoreSettings
from xce.store.files import FileStore
from xce.store.repair import lock_state_dir

log = logging.getLogger("xce.controller")


def prepare_state_dir(path: Path) -> None:
    """Create the state directory 0700; refuse one that others may write to."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    mode = path.stat().st_mode
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise InvalidRequest(
            f"state directory {path} is group- or world-writable; run chmod 700 {path}"
        )


def store_settings(settings: ControllerSettings) -> StoreSettings:
    return StoreSettings(
        fsync=settings.wal_fsync,
        fsync_interval_s=settings.wal_fsync_interval_s,
        segment_bytes=settings.wal_segment_mb * 1024 * 1024,
        checkpoint_every=settings.checkpoint_every,
        checkpoint_interval_s=settings.checkpoint_interval_s,
        finished_retention_s=settings.finished_retention_s,
    )


async def _scheduler_loop(service: ControllerService) -> None:
    interval = service.settings.schedule_interval_s
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(service.schedule_needed.wait(), interval)
        service.schedule_needed.clear()
        try:
            await service.schedule_once()
        except Exception:
            log.exception("scheduling pass failed")
        await asyncio.sleep(0.05)  # coalesce bursts of changes into one pass


async def _liveness_loop(gateway: WorkerGateway) -> None:
    interval = max(gateway.service.settings.heartbeat_interval_s / 2, 0.1)
    while True:
        await asyncio.sleep(interval)
        try:
            for host in await gateway.check_liveness():
                log.warning("host %s missed its heartbeats: marked unavailable", host)
        except Exception:
            log.exception("liveness check failed")


async def serve(config: Config, ready: asyncio.Event | None = None) -> None:
    """Run a controller until cancelled or signalled."""
    settings = config.controller
    ssl_context = server_ssl_context(config.tls)  # before any state is touched
    check_listener(settings.listen_host, ssl_context is not None, config.tls.insecure)
    prepare_state_dir(settings.state_dir)
    lock = lock_state_dir(settings.state_dir)
    files = FileStore(settings.state_dir / "files", settings.max_upload_mb * 1024 * 1024)
    store = DurableLog.open(settings.state_dir, store_settings(settings))
    service = ControllerService(settings, files, state=store.recovered.state, log=store)
    now = service.clock()
    await service.commit(
        ev.QueueCreated(now, q) for q in settings.queues if q.name not in service.state.queues
    )
    gateway = WorkerGateway(service)
    app = build_app(service, gateway, config)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(
        runner, settings.listen_host, settings.listen_port, reuse_address=True,
        shutdown_timeout=2.0, ssl_context=ssl_context,
    )
    await site.start()
    log.info("controller listening on %s:%s", settings.listen_host, settings.listen_port)
    tasks = [
        asyncio.create_task(_scheduler_loop(service)),
        asyncio.create_task(_liveness_loop(gateway)),
        asyncio.create_task(store.run_checkpoints(service.state)),
    ]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready.set()
    scheme = "https" if ssl_context else "http"
    print(f"xce controller ready on {scheme}://{settings.listen_host}:{settings.listen_port}"
          f" (pid {os.getpid()})", flush=True)
    try:
        await stop.wait()
    finally:
        for task in tasks:
            task.cancel()
        # A checkpoint thread still running must finish before the final checkpoint starts.
        await asyncio.gather(*tasks, return_exceptions=True)
        service.wake_all()  # long-polling workers get their answer now, not in 20 s
        await runner.cleanup()
        await store.close(service.state)
        os.close(lock)
        log.info("controller stopped cleanly (checkpoint at record %d)", store.checkpoint_seq)
