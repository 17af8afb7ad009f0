"""The primary's side of a candidate: starting a term, replication, the lease and handover.

A term begins durably (xce/ha/epochs.py) before the API serves; the primary then renews its
lease from probes and standby acknowledgements, steps down when fenced, hands its role over on
`switchover` and, with `cluster.reclaim`, back to a better-ranked candidate once it is in sync.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from xce.auth.pki import server_ssl_context
from xce.core.errors import InvalidRequest, NotPrimary, XceError
from xce.core.state import ClusterState
from xce.ha.campaign import Campaigner
from xce.ha.lease import Lease
from xce.ha.source import ReplicationSource
from xce.store.durable import DurableLog

log = logging.getLogger("xce.ha")


class PrimaryRole(Campaigner):
    """Serving a term: what `Node.run` calls while this candidate is the primary."""

    def make_source(
        self, store: DurableLog, verify: Callable[[str], None], state: ClusterState
    ) -> ReplicationSource:
        from xce.auth.keys import key_dir

        source = ReplicationSource(
            store,
            self.epochs,
            key_dir(self.state_dir),
            verify,
            state,
            mode=self.ha.replication,
            sync_timeout_s=self.ha.sync_timeout_s,
            heartbeat_s=self.ha.heartbeat_interval_s,
            on_higher_epoch=lambda epoch: self.observe_epoch(epoch),
            space=self.file_space,
        )
        store.replicated = source.wait_replicated
        self.source = source
        return source

    async def start_replication(self) -> None:
        assert self.source is not None
        s = self.config.controller
        host = s.replication_host or s.listen_host
        port = s.replication_port or s.listen_port + 1
        context = server_ssl_context(self.config.tls)
        # The port may be briefly held (the old primary's listener, an outgoing connection
        # that took it as its local port): a new primary keeps serving and keeps trying,
        # standbys simply cannot follow until it is free.
        for attempt in range(100):
            try:
                await self.source.start(host, port, context)
                return
            except OSError as exc:
                if attempt == 0:
                    log.error(
                        "cannot listen for replication on %s:%s (%s); retrying",
                        host,
                        port,
                        exc.strerror or exc,
                    )
                await asyncio.sleep(0.1 if attempt < 50 else 1.0)
        log.error(
            "replication listener on %s:%s still unavailable: serving without "
            "standbys until restarted",
            host,
            port,
        )

    def mark_ready(self) -> None:
        ready = getattr(self, "_ready", None)
        if ready is not None:
            ready.set()

    async def primary_duties(self) -> str:
        """Run until stopped ("stop") or fenced/handed over ("step_down")."""
        if self.solo:
            await self.stop_event.wait()
            return "stop"
        # A fresh lease now that the listeners are up: setting up a large state can take
        # longer than the lease, and that is not a freeze (the ticker starts only here).
        # After a lone claim it starts without contact: writes wait for a worker (or the
        # other candidate), the two-candidate rule of xce/ha/lease.py.
        self.lease = Lease(len(self.candidates), self.ha.lease_s, contact=not self._lone)
        tasks = [asyncio.create_task(self._ticker()), asyncio.create_task(self._watch())]
        stop = asyncio.create_task(self.stop_event.wait())
        down = asyncio.create_task(self.step_down_event.wait())
        try:
            await asyncio.wait([stop, down], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in [*tasks, stop, down]:
                task.cancel()
            await asyncio.gather(*tasks, stop, down, return_exceptions=True)
        if self.stop_event.is_set():
            return "stop"
        self.role = "standby"
        return "step_down"

    async def _ticker(self) -> None:
        while True:
            if self.lease is not None:
                self.lease.tick()
            await asyncio.sleep(0.1)

    async def _watch(self) -> None:
        """Probe the other candidates: renew the lease, notice newer primaries, reclaim."""
        while True:
            started = time.monotonic()
            peers = await self._probe()
            self._heed(peers)
            if self.role != "primary":
                return
            lease = self.lease
            if lease is not None:
                # A standby that acknowledged lately counts even if its probe was slow.
                contacted = {p.url for p in peers if p.reachable}
                if self.source is not None:
                    contacted |= {
                        node
                        for node, at in self.source.contacts().items()
                        if started - at < lease.lease_s and node != self.url
                    }
                lease.probed(len(contacted), started)
            if self.ha.reclaim and self.source is not None and not self.switching:
                better = [
                    s
                    for s in self.source.sessions.values()
                    if s.in_sync
                    and s.node in self.candidates
                    and self.candidates.index(s.node) < self.rank
                ]
                if better:
                    log.warning("reclaim: handing the primary role back to %s", better[0].node)
                    with contextlib.suppress(XceError):
                        await self.switchover(better[0].node)
            await asyncio.sleep(
                max(self.ha.heartbeat_interval_s - (time.monotonic() - started), 0.05)
            )

    async def switchover(self, target: str | None) -> dict[str, Any]:
        if self.role != "primary" or self.source is None:
            raise NotPrimary("only the primary can hand over its role")
        if target is not None and target not in self.candidates:
            raise InvalidRequest(f"{target} is not one of cluster.controllers")
        if target == self.url:
            raise InvalidRequest("this controller is already the primary")
        self.switching = True
        try:
            chosen = await self.source.hand_over(target)
        except BaseException:
            self.switching = False
            raise
        self.primary_url = chosen
        # Writes stay refused here; wait (briefly) until the new primary serves, so that the
        # answer names its term.
        epoch = self.epochs.epoch + 1
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            peer = await self.prober.one(self.candidates.index(chosen))
            if peer.reachable and peer.role == "primary":
                epoch = peer.epoch
                break
            await asyncio.sleep(0.1)
        # Let the answer leave before the listener goes away.
        asyncio.get_running_loop().call_later(0.3, self.step_down_event.set)
        return {"primary": chosen, "previous": self.url, "epoch": epoch}
