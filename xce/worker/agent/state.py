"""The worker's state: its attempts (running, starting, ended), pending reports, its host's
devices and containment, and the controller client.

`AgentState` holds what xce/worker/agent/worker_agent.py's `WorkerAgent` and its parts
(reports.py, reconcile.py, link.py, and the task service) share; each part gets it in its
constructor. Attempts are keyed by (job id, attempt).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any
from urllib.parse import quote

import msgspec

from xce.auth.pki import client_ssl_context
from xce.client import XceClient
from xce.client.errors import ca_note
from xce.config.settings import Config
from xce.protocol.relay_keys import RelaySigner
from xce.worker.agent import tail
from xce.worker.agent.hostinfo import cgroup_namespace
from xce.worker.attempt import staging
from xce.worker.attempt.inputcache import CACHE_DIR, InputCache
from xce.worker.attempt.running import RunningJob
from xce.worker.attempt.spool import Spool
from xce.worker.cgroups import CgroupBackend, detect
from xce.worker.devices import gpus
from xce.worker.keeper import fence
from xce.worker.keeper.client import KeeperLauncher
from xce.worker.tasks.shares import ShareHolder

Key = tuple[str, int]
_JSON = {"Content-Type": "application/json"}


class AgentState:
    """A worker's state, shared by its parts (xce/worker/agent/worker_agent.py runs them)."""

    def __init__(self, config: Config, client: XceClient | None = None) -> None:
        self.config = config
        self.settings = config.worker
        self.host = self.settings.name
        note = ca_note(config.tls.ca_file, f"[tls] ca_file in {config.path or 'the config'}")
        self.client = client or XceClient(
            config.controllers,
            self.settings.token or None,
            ssl_context=client_ssl_context(config.tls),
            insecure=config.tls.insecure,
            ca_note=note,
            transfer_idle_timeout_s=self.settings.transfer_idle_timeout_s,
        )
        # The heartbeat relay this worker's heartbeats go through (xce/worker/agent/relay.py):
        # a client of its own, speaking the controller's heartbeat route with this
        # worker's token, under the same TLS rules as the controller's client.
        self.relay_client: XceClient | None = None
        if self.settings.heartbeat_relay:
            self.relay_client = XceClient(
                [self.settings.heartbeat_relay],
                self.settings.token or None,
                ssl_context=client_ssl_context(config.tls),
                insecure=config.tls.insecure,
                ca_note=note,
            )
        # The relay key of this worker's latest registration and the number of its last
        # relayed heartbeat (xce/protocol/relay_keys.py).
        self.relay_signer = RelaySigner()
        self.running: dict[Key, RunningJob] = {}
        # Spawned but not yet in `running`: a second answer in that window must not start
        # the same attempt again.
        self.starting: set[Key] = set()
        self.ended: OrderedDict[Key, None] = OrderedDict()
        # Finish reports not yet taken by the controller (xce/worker/agent/reports.py).
        self.pending: dict[Key, dict[str, Any]] = {}
        # The attempts whose reports are pending: their directories go once a report is taken.
        self.report_jobs: dict[Key, RunningJob] = {}
        # Reports the controller took, kept a while: if an answer still lists the attempt
        # (a relaxed-fsync controller lost it in a crash) the report is sent again.
        self.delivered: OrderedDict[Key, dict[str, Any]] = OrderedDict()
        self.version = -1
        self.registered = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()  # background tasks, cancelled at shutdown
        self.output = tail.OutputPusher()
        self.spool = Spool(self.settings.spool_dir, self.settings.job_root())
        # Array inputs this host fetched once for all its tasks (root's, beside `state`).
        self.inputs = InputCache(self.spool.root / CACHE_DIR)
        namespace = cgroup_namespace(self.host, self.settings.spool_dir)
        self.backend: CgroupBackend = detect(
            self.settings.cgroup, self.settings.cgroup_parent, namespace
        )
        # Devices by kind, configured or detected once at start (xce/worker/devices/gpus.py).
        self.devices = gpus.host_devices(self.settings.gres, self.settings.gpu_device_path)
        self.shares = ShareHolder(self.backend, self.settings.pids_limit, self.devices)
        # `xce launch`: the directory of this worker's own `xce` that goes first
        # on every job's PATH (set by WorkerAgent.run once installed).
        self.launch_bin = ""
        self.launcher = KeeperLauncher(self.backend.kind, self.settings.cgroup_parent, namespace)
        # The fence (xce/worker/keeper/fence.py): the controller sets the timeout when we register.
        self.contact = fence.Contact(0.0, fence.DEFAULT_FENCE_TIMEOUT_S)
        # Per file and per job, as the controller says (xce/worker/attempt/staging.py).
        self.output_limits = staging.OutputLimits()
        # The heartbeat interval the controller asked for (register and heartbeat answers;
        # None from a controller that does not say): a large cluster's controller asks for
        # a longer one than this worker's own, which stays the shortest it sends.
        self.told_interval_s: float | None = None

    # --- bookkeeping --------------------------------------------------------------------

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        """Run `coro` in the background, kept until it ends (cancelled by `cancel_all`)."""
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    def remember_ended(self, key: Key) -> None:
        self.ended[key] = None
        while len(self.ended) > 100_000:
            self.ended.popitem(last=False)

    async def post(self, path: str, message: msgspec.Struct, timeout: float | None = None) -> Any:
        """Send one protocol message (a Struct of xce/protocol/worker.py, which the controller
        decodes from the same declaration): its defaults are left out."""
        data = msgspec.json.encode(message)
        return await self.client.request("POST", path, data=data, headers=_JSON, timeout=timeout)

    @property
    def base(self) -> str:
        """The API path of this worker."""
        return f"/api/v1/workers/{quote(self.host)}"
