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

from aiohttp import web

from xce.ha.epochs import Overtaken
from xce.ha.lease import Lease
from xce.ha.primary_role import PrimaryRole
from xce.ha.standby_role import StandbyRole
from xce.store.durable import DurableLog
from xce.telemetry import metrics

__all__ = ["Node", "PrimaryRunner", "start_site"]

log = logging.getLogger("xce.ha")

PrimaryRunner = Callable[["Node", DurableLog], Awaitable[str]]


async def start_site(site: web.TCPSite, attempts: int = 50) -> None:
    """Listen, retrying for a few seconds: on a role switch the other phase's listener on
    the same port may still be closing."""
    for attempt in range(attempts):
        try:
            await site.start()
            return
        except OSError:
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(0.1)


class Node(PrimaryRole, StandbyRole):
    """One candidate: its state (node_base.py), elections (campaign.py), and the two roles
    (primary_role.py, standby_role.py) that `run` alternates between."""

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
            role = await self._initial_role()
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
        if self.solo:
            self.epochs.begin_solo_term(store.writer.next_seq)
        else:
            try:
                self.epochs.begin_term(self._claimed, store.writer.next_seq, self.url)
            except Overtaken as exc:  # a probe heard of a newer epoch while promoting
                log.warning("%s: following again", exc)
                self._promoting = False
                self._log = store  # its position, until the standby's follower has the log
                await store.writer.sync(durable=True)
                await store.writer.close()
                return "step_down"
        metrics.EPOCH.set(self.epochs.epoch)
        store.writer.epoch = self.epochs.epoch
        self.store = store
        self.role = "primary"
        self._promoting = False
        self.primary_url = self.url
        self.switching = False
        self.step_down_event.clear()
        self.lease = Lease(len(self.candidates), self.ha.lease_s, contact=not self._lone)
        store.fence = self.fence
        self.terms_started += 1
        log.log(
            logging.INFO if self.solo else logging.WARNING,
            "primary for epoch %d at record %d",
            self.epochs.epoch,
            store.writer.next_seq - 1,
        )
        self._ready = ready
        try:
            return await run_primary(self, store)
        finally:
            self._log = store  # its position, until the standby's follower has the log
            self.store = None
            self.source = None
            self.lease = None
            if self.role == "primary":
                self.role = "stopped"
