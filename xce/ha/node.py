"""One controller candidate: decides its role, then runs as primary or standby, and switches.

The candidates are `cluster.controllers`, in priority order (LSF's master list); there is no
Raft log replication, but epochs are claimed with Raft's term vote (xce/ha/election.py). The
rules, all in this module, `election.py` and `xce/ha/lease.py`:

- **Start**: a candidate recovers its log first, then asks the others (`/healthz`). If a
  primary answers, it follows it as a standby. `xce controller` may otherwise campaign at
  once when the others answer; `xce standby` (and a candidate that reaches no one) starts by
  following and campaigns only after the failover timeout.
- **Failover**: a standby that has not heard its primary (records or heartbeats) for
  `failover_timeout_s`, and finds no primary among the others, campaigns: it votes for
  itself for epoch = highest seen + 1 and asks the others; with a majority (two candidates:
  the other's vote, or the lone-claim rule of election.py) it starts the term: the epoch and
  its first record are written durably, and it serves. The log it followed is already its
  state: nothing to replay. A lost campaign backs off for a short random time.
- **No flapping**: a better-ranked candidate that comes back finds a primary and follows
  it, unless `cluster.reclaim` is set; then the primary hands over once it is caught up.
- **Fencing**: every frame, probe answer, request and response carries the epoch. A
  primary that sees a newer one steps down at once and follows; a primary without its lease
  refuses writes (NotPrimary, 503). Another primary of the *same* epoch cannot exist; if one
  is ever seen, both sides log an error and step down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from xce.config.settings import Config
from xce.core.errors import NotPrimary
from xce.core.state import ClusterState
from xce.ha.campaign import Campaign
from xce.ha.node_base import NodeState
from xce.ha.primary_role import PrimaryRole
from xce.ha.source import ReplicationSource
from xce.ha.standby_role import StandbyRole
from xce.store.durable import DurableLog, StoreSettings

__all__ = ["Node", "PrimaryRunner", "start_site"]

log = logging.getLogger("xce.ha")

PrimaryRunner = Callable[["Node", DurableLog], Awaitable[str]]


async def start_site(site: web.BaseSite, attempts: int = 50) -> None:
    """Listen, retrying for a few seconds: on a role switch the other phase's listener on
    the same port may still be closing."""
    for attempt in range(attempts):
        try:
            await site.start()
            return
        except OSError:
            # A failed start leaves the site registered with its runner, and starting it
            # again would then raise "already registered" instead of the real error
            # (address in use): stop() unregisters it.
            await site.stop()
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(0.1)


class Node(NodeState):
    """One candidate: its state (node_base.py), its elections (`campaign`: campaign.py),
    and the role object `run` swaps on each transition (`current_role`: a `PrimaryRole`,
    primary_role.py, or a `StandbyRole`, standby_role.py; None before the first)."""

    def __init__(self, config: Config, prefer_primary: bool, settings: StoreSettings) -> None:
        super().__init__(config, prefer_primary, settings)
        self.campaign = Campaign(self)
        self.current_role: PrimaryRole | StandbyRole | None = None

    async def run(self, run_primary: PrimaryRunner, ready: asyncio.Event | None) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.stop_event.set)
        try:
            if self.solo:
                await self._primary(
                    DurableLog.open(self.state_dir, self.store_settings), run_primary, ready
                )
                return
            # Recover first: the log this candidate holds is what it may claim an epoch with.
            store: DurableLog | None = DurableLog.open(self.state_dir, self.store_settings)
            self._log = store
            await self.open_door()
            role = await self.campaign.initial_role()
            while not self.stop_event.is_set():
                if role == "primary":
                    if store is None:
                        store = DurableLog.open(self.state_dir, self.store_settings)
                    self._log = None
                    outcome = await self._primary(store, run_primary, ready)
                    store = None
                    if outcome == "stop":
                        return
                    role = "standby"
                else:
                    store = await self._standby(ready, store)
                    if store is None:
                        return
                    role = "primary"
        finally:
            await self.release_port()
            await self.prober.close()

    async def _primary(
        self, store: DurableLog, run_primary: PrimaryRunner, ready: asyncio.Event | None
    ) -> str:
        """Become the primary: the role object serves the term from `store`."""
        primary = PrimaryRole(self, ready)
        self.current_role = primary
        return await primary.serve(store, run_primary)

    async def _standby(
        self, ready: asyncio.Event | None, store: DurableLog | None = None
    ) -> DurableLog | None:
        """Become a standby: follow until promoted (the log to serve from) or stopped."""
        standby = StandbyRole(self)
        self.current_role = standby
        return await standby.serve(ready, store)

    # --- elections, whatever the role (campaign.py) -------------------------------------

    def claimed_epoch(self, epoch: int) -> None:
        self.campaign.claimed_epoch(epoch)

    def answer_vote(self, body: Any) -> dict[str, Any]:
        return self.campaign.answer_vote(body)

    async def open_door(self) -> None:
        await self.campaign.open_door()

    async def release_port(self) -> None:
        await self.campaign.release_port()

    # --- the primary's server calls these while it serves (primary_role.py) -------------

    def _serving(self) -> PrimaryRole:
        role = self.current_role
        if not isinstance(role, PrimaryRole):
            raise NotPrimary("this controller is not serving a term")
        return role

    def make_source(
        self, store: DurableLog, verify: Callable[[str], None], state: ClusterState
    ) -> ReplicationSource:
        return self._serving().make_source(store, verify, state)

    async def start_replication(self) -> None:
        await self._serving().start_replication()

    def mark_ready(self) -> None:
        role = self.current_role
        if isinstance(role, PrimaryRole):
            role.mark_ready()

    async def primary_duties(self) -> str:
        return await self._serving().primary_duties()

    async def switchover(self, target: str | None) -> dict[str, Any]:
        role = self.current_role
        if not isinstance(role, PrimaryRole):
            raise NotPrimary("only the primary can hand over its role")
        return await role.switchover(target)
