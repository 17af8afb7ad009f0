"""`xce controller`: opens the state, composes the controller (xce/server/compose.py),
serves its API and runs its loops."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import stat
from pathlib import Path

from xce.accounting.feed import AccountingFeed
from xce.auth import strict_modes
from xce.auth.pki import server_ssl_context
from xce.client.transport import check_listener, is_loopback
from xce.config import file_safety
from xce.config.settings import Config, ControllerSettings
from xce.controller.cluster_history import ClusterHistory
from xce.controller.prediction_records import rebuild_predictions
from xce.controller.service import ControllerService
from xce.controller.workers import WorkerGateway
from xce.core import events as ev
from xce.core.errors import InvalidRequest, XceError
from xce.ha.node import Node, start_site
from xce.listen.connections import GuardedRunner
from xce.listen.sites import GuardedSite
from xce.server import local_socket
from xce.server.compose import compose
from xce.store.durable import DurableLog, StoreSettings
from xce.store.files import FileStore
from xce.store.repair import lock_state_dir
from xce.store.replicated_names import upload_names

log = logging.getLogger("xce.controller")


def prepare_state_dir(path: Path) -> None:
    """Create the state directory 0700; refuse one that others may write to."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    mode = path.stat().st_mode
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise InvalidRequest(
            f"state directory {path} is group- or world-writable; run chmod 700 {path}"
        )


def check_strict_modes(config: Config) -> None:
    """Refuse to start when a secret or state path is open to other users or owned by
    another one (xce/auth/strict_modes.py), before anything is read or written."""
    file_safety.check(
        strict_modes.controller_paths(
            config.controller.state_dir, config.auth.base, config.auth.backends, config.tls.key_file
        )
    )


def store_settings(
    settings: ControllerSettings, accounting: AccountingFeed | None = None
) -> StoreSettings:
    return StoreSettings(
        observers=(accounting,) if accounting is not None else (),
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
        # asyncio.timeout, never wait_for: on Python 3.11 wait_for swallows a cancellation
        # that arrives as the event is set, and this loop then outlives the term (a stop
        # that never ends). The checkpoint loop, a replication session's heartbeat and the
        # worker's report loop wait the same way (tests/unit/test_cancel_as_woken.py).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(interval):
                await service.schedule_needed.wait()
        service.schedule_needed.clear()
        try:
            await service.schedule_once()
        except Exception:
            log.exception("scheduling pass failed")
        await asyncio.sleep(0.05)  # coalesce bursts of changes into one pass


async def _create_queues(service: ControllerService) -> None:
    """The config's queues seed a cluster that has none (its first start). After that the
    queues are the cluster's own, changed at run time (`xce queue create|modify|delete`,
    durable as events): a queue the config still lists is not brought back once deleted,
    and one added to the config later is only named in the log."""
    if service.state.queues:
        missing = [q.name for q in service.settings.queues if q.name not in service.state.queues]
        if missing:
            log.warning(
                "queues %s of the config are not in the cluster: the config seeds "
                "queues only on the first start; create them with `xce queue create`",
                ", ".join(missing),
            )
        return
    await service.commit([ev.QueueCreated(service.clock(), q) for q in service.settings.queues])


async def _first_queues(service: ControllerService) -> asyncio.Task[None] | None:
    """Create the configured queues the state lacks: at once if this primary may write
    (a single controller is ready with its queues), otherwise in the background as soon as
    it may (a term claimed alone writes only once a worker reached it: xce/ha/lease.py)."""
    with contextlib.suppress(XceError):
        await _create_queues(service)
        return None

    async def retry() -> None:
        while True:
            await asyncio.sleep(0.1)
            with contextlib.suppress(XceError):
                await _create_queues(service)
                return

    return asyncio.create_task(retry())


async def _liveness_loop(gateway: WorkerGateway) -> None:
    interval = max(gateway.service.settings.heartbeat_interval_s / 2, 0.1)
    while True:
        await asyncio.sleep(interval)
        try:
            for host, change in await gateway.check_liveness():
                if change == "unavailable":
                    log.warning(
                        "host %s missed its heartbeats: marked unavailable; its jobs "
                        "are requeued in %.0f s unless it comes back (fence)",
                        host,
                        gateway.fence_timeout_s,
                    )
                else:
                    log.warning(
                        "host %s stayed silent past heartbeat deadline + "
                        "fence_timeout_s: its jobs are requeued or ended",
                        host,
                    )
        except Exception:
            log.exception("liveness check failed")


async def _history_loop(history: ClusterHistory, accounting: AccountingFeed | None) -> None:
    """The cluster history of this term: first rebuilt from the durable records (a thread
    reads the accounting store), then a boundary every `history_step_s` that no event
    closed is closed here (xce/controller/cluster_history.py)."""
    try:
        await history.rebuild(accounting)
    except Exception:
        log.exception("cluster history: the rebuild failed; sampling from now on")
    step = history.step
    while True:
        now = history.clock()
        await asyncio.sleep(max((math.floor(now / step) + 1) * step - now, 0.0) + 0.01)
        try:
            history.tick()
        except Exception:
            log.exception("cluster history sample failed")


async def _upload_sweep_loop(files: FileStore, service: ControllerService) -> None:
    """Delete uploads no job used within upload_ttl_s: once at start, then periodically
    (on the standbys too: xce/ha/files.py)."""
    interval = min(max(files.ttl_s / 10, 1.0), 600.0)
    while True:
        try:
            gone = files.sweep_uploads()  # on the loop: the index is the loop's
            if gone:
                service.ship_files(
                    [(name, "drop") for upload in gone for name in upload_names(upload)]
                )
                log.info("deleted %d upload(s) no job used within %.0f s", len(gone), files.ttl_s)
        except Exception:
            log.exception("upload sweep failed")
        await asyncio.sleep(interval)


async def serve(
    config: Config, ready: asyncio.Event | None = None, prefer_primary: bool = True
) -> None:
    """Run a controller candidate until cancelled or signalled (`xce controller`; `xce
    standby` is the same with `prefer_primary=False`). With one candidate it is simply the
    primary; with several, xce/ha/node.py decides the role and switches it on failover."""
    settings = config.controller
    ssl_context = server_ssl_context(config.tls)  # before any state is touched
    check_listener(settings.listen_host, ssl_context is not None, config.tls.insecure)
    if ssl_context is None and not is_loopback(settings.listen_host):
        log.warning("INSECURE: serving plain HTTP on %s (development only)", settings.listen_host)
    check_strict_modes(config)
    prepare_state_dir(settings.state_dir)
    lock = lock_state_dir(settings.state_dir)
    feed = accounting_feed(settings)  # recovery and a standby's replay feed it too
    try:
        node = Node(config, prefer_primary, store_settings(settings, feed))
        await node.run(lambda n, store: run_primary(config, n, store, feed), ready)
    finally:
        if feed is not None:
            feed.close(timeout=2.0)
        os.close(lock)


def accounting_feed(settings: ControllerSettings) -> AccountingFeed | None:
    """The accounting feed of this controller (None when `accounting = false`); a user's
    group is their fairshare group ([scheduler] groups), `default` when none lists them."""
    if not settings.accounting:
        return None
    groups = settings.scheduler.group_map()
    return AccountingFeed(
        settings.state_dir,
        settings.accounting_retention_months,
        lambda user: groups.get(user, "default"),
    )


async def run_primary(
    config: Config, node: Node, store: DurableLog, accounting: AccountingFeed | None = None
) -> str:
    """Serve as primary from `store` until stopped ("stop") or fenced ("step_down")."""
    settings = config.controller
    ssl_context = server_ssl_context(config.tls)
    files = FileStore(
        settings.state_dir / "files",
        settings.max_upload_mb * 1024 * 1024,
        settings.upload_quota_mb * 1024 * 1024,
        settings.upload_ttl_s,
        settings.max_job_outputs_mb * 1024 * 1024,
        reserve_bytes=settings.min_free_disk_mb * 1024 * 1024,
    )
    controller = compose(config, files, store, node, accounting)
    service, gateway = controller.service, controller.gateway
    # Job files count on their owners' quota from the first request: counted from the disk,
    # and those no record holds any more (purged while this candidate was down) deleted.
    await service.job_files.adopt()
    runner = GuardedRunner(
        controller.app, config.guard.connections, access_log=None, shutdown_timeout=2.0
    )
    await runner.setup()
    site = GuardedSite(runner, settings.listen_host, settings.listen_port, ssl_context=ssl_context)
    await node.release_port()  # the door that answered /healthz and votes until now
    await start_site(site)
    if settings.local_socket:
        await local_socket.start(runner, Path(settings.local_socket))
        log.info("controller listening on the local socket %s", settings.local_socket)
    if not node.solo:  # the replication source compose made starts listening
        await node.start_replication()
    queues = await _first_queues(service)
    log.info("controller listening on %s:%s", settings.listen_host, settings.listen_port)
    tasks = [
        *([queues] if queues is not None else []),
        asyncio.create_task(_scheduler_loop(service)),
        asyncio.create_task(_liveness_loop(gateway)),
        asyncio.create_task(_upload_sweep_loop(files, service)),
        asyncio.create_task(_history_loop(controller.cluster_history, accounting)),
        asyncio.create_task(rebuild_predictions(service, accounting)),
        asyncio.create_task(store.run_checkpoints(service.state)),
    ]
    node.mark_ready()
    scheme = "https" if ssl_context else "http"
    print(
        f"xce controller ready on {scheme}://{settings.listen_host}:{settings.listen_port}"
        f" (pid {os.getpid()}, epoch {node.epochs.epoch})",
        flush=True,
    )
    outcome = "stop"
    try:
        outcome = await node.primary_duties()
    finally:
        for task in tasks:
            task.cancel()
        # A checkpoint thread still running must finish before the final checkpoint starts.
        await asyncio.gather(*tasks, return_exceptions=True)
        if node.source is not None:
            await node.source.close()
        service.wake_all()  # long-polling workers get their answer now, not in 20 s
        await runner.cleanup()
        await controller.auth.audit.flush()  # relaxed submission records, before the stop
        await service.job_files.settled()  # deletions under way finish in this term
        files.close()  # this term's file threads: the next term makes its own store
        store.fence = None
        store.replicated = None
        store.purge = None  # the last checkpoint writes no record standbys would not get
        await store.close(service.state)
        log.info(
            "controller %s (checkpoint at record %d)",
            "stopped cleanly" if outcome == "stop" else "stepped down",
            store.checkpoint_seq,
        )
    return outcome
