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
from typing import TYPE_CHECKING, Any

from xce.auth.pki import server_ssl_context
from xce.core.errors import InvalidRequest, NotPrimary, XceError
from xce.core.state import ClusterState
from xce.ha.epochs import Overtaken
from xce.ha.lagbound import LagBound
from xce.ha.lease import Lease
from xce.ha.source import ReplicationSource
from xce.store.durable import DurableLog
from xce.telemetry import metrics

if TYPE_CHECKING:
    from xce.ha.node import Node, PrimaryRunner

log = logging.getLogger("xce.ha")


class PrimaryRole:
    """Serving a term: the role object `Node.run` holds while this candidate is the primary
    (`serve`), and what the primary's server calls through the node."""

    def __init__(self, node: Node, ready: asyncio.Event | None) -> None:
        self.node = node
        self.ready = ready

    async def serve(self, store: DurableLog, run_primary: PrimaryRunner) -> str:
        """Begin the term durably, then run the primary until it stops ("stop") or steps
        down ("step_down")."""
        if self.node.solo:
            self.node.epochs.begin_solo_term(store.writer.next_seq)
        else:
            try:
                self.node.epochs.begin_term(
                    self.node._claimed, store.writer.next_seq, self.node.url
                )
            except Overtaken as exc:  # a probe heard of a newer epoch while promoting
                log.warning("%s: following again", exc)
                self.node._promoting = False
                self.node._log = store  # its position, until the standby's follower has the log
                await store.writer.sync(durable=True)
                await store.writer.close()
                return "step_down"
        metrics.EPOCH.set(self.node.epochs.epoch)
        store.writer.epoch = self.node.epochs.epoch
        self.node.store = store
        self.node.role = "primary"
        self.node._promoting = False
        self.node.primary_url = self.node.url
        self.node.switching = False
        self.node.step_down_event.clear()
        self.node.lease = self.new_lease()
        store.fence = self.node.fence
        self.node.terms_started += 1
        log.log(
            logging.INFO if self.node.solo else logging.WARNING,
            "primary for epoch %d at record %d",
            self.node.epochs.epoch,
            store.writer.next_seq - 1,
        )
        try:
            return await run_primary(self.node, store)
        finally:
            self.node._log = store  # its position, until the standby's follower has the log
            self.node.store = None
            self.node.source = None
            self.node.lease = None
            if self.node.role == "primary":
                self.node.role = "stopped"

    def make_source(
        self, store: DurableLog, verify: Callable[[str], None], state: ClusterState
    ) -> ReplicationSource:
        from xce.auth.keys import key_dir

        ha = self.node.ha
        source = ReplicationSource(
            store,
            self.node.epochs,
            key_dir(self.node.state_dir),
            verify,
            state,
            mode=self.node.ha.replication,
            sync_timeout_s=self.node.ha.sync_timeout_s,
            heartbeat_s=self.node.ha.heartbeat_interval_s,
            on_higher_epoch=lambda epoch: self.node.observe_epoch(epoch),
            space=self.node.file_space,
            bound=LagBound(ha.async_max_lag_records, ha.async_max_lag_ms),
        )
        store.replicated = source.wait_replicated
        self.node.source = source
        return source

    async def start_replication(self) -> None:
        assert self.node.source is not None
        s = self.node.config.controller
        host = s.replication_host or s.listen_host
        port = s.replication_port or s.listen_port + 1
        context = server_ssl_context(self.node.config.tls)
        # The port may be briefly held (the old primary's listener, an outgoing connection
        # that took it as its local port): a new primary keeps serving and keeps trying,
        # standbys simply cannot follow until it is free.
        for attempt in range(100):
            try:
                await self.node.source.start(host, port, context)
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
        if self.ready is not None:
            self.ready.set()

    async def primary_duties(self) -> str:
        """Run until stopped ("stop") or fenced/handed over ("step_down")."""
        if self.node.solo:
            await self.node.stop_event.wait()
            return "stop"
        # A fresh lease now that the listeners are up: setting up a large state can take
        # longer than the lease, and that is not a freeze (the ticker starts only here).
        # After a lone claim it starts without contact: writes wait for a worker (or the
        # other candidate), the two-candidate rule of xce/ha/lease.py.
        self.node.lease = self.new_lease()
        tasks = [asyncio.create_task(self._ticker()), asyncio.create_task(self._watch())]
        stop = asyncio.create_task(self.node.stop_event.wait())
        down = asyncio.create_task(self.node.step_down_event.wait())
        try:
            await asyncio.wait([stop, down], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in [*tasks, stop, down]:
                task.cancel()
            await asyncio.gather(*tasks, stop, down, return_exceptions=True)
        if self.node.stop_event.is_set():
            return "stop"
        self.node.role = "standby"
        return "step_down"

    def new_lease(self) -> Lease:
        """A term's lease (xce/ha/lease.py). A worker's request counts for one worker
        heartbeat interval plus the failover timeout, so that with two candidates a lone
        survivor never lapses between two heartbeats of a live worker."""
        ha = self.node.ha
        return Lease(
            len(self.node.candidates),
            ha.lease_s,
            contact=not self.node._lone,
            worker_lease_s=self.node.config.controller.heartbeat_interval_s + ha.failover_timeout_s,
        )

    async def _ticker(self) -> None:
        """Every 0.1 s: the lease's freeze check, and the standbys' acknowledgements as
        contact (they arrive with every heartbeat, so the lease renews between probe rounds,
        and a round slowed by a stopped candidate's timeout does not let it lapse)."""
        while True:
            lease = self.node.lease
            if lease is not None:
                lease.tick()
                if self.node.source is not None:
                    for node, at in self.node.source.contacts().items():
                        if node != self.node.url and node in self.node.candidates:
                            lease.reached(node, at)
            await asyncio.sleep(0.1)

    async def _watch(self) -> None:
        """Probe the other candidates: renew the lease, notice newer primaries, reclaim."""
        while True:
            started = time.monotonic()
            peers = await self.node.campaign.probe()
            self.node._heed(peers)
            if self.node.role != "primary":
                return
            lease = self.node.lease
            if lease is not None:
                # Every candidate that answered with no newer epoch (a newer one has made
                # this primary step down above) reached it no earlier than the round began.
                for p in peers:
                    if p.reachable and p.epoch <= self.node.epochs.epoch:
                        lease.reached(p.url, started)
                lease.probed(started)
            if self.node.ha.reclaim and self.node.source is not None and not self.node.switching:
                better = [
                    s
                    for s in self.node.source.sessions.values()
                    if s.in_sync
                    and s.node in self.node.candidates
                    and self.node.candidates.index(s.node) < self.node.rank
                ]
                if better:
                    log.warning("reclaim: handing the primary role back to %s", better[0].node)
                    with contextlib.suppress(XceError):
                        await self.switchover(better[0].node)
            await asyncio.sleep(
                max(self.node.ha.heartbeat_interval_s - (time.monotonic() - started), 0.05)
            )

    async def switchover(self, target: str | None) -> dict[str, Any]:
        if self.node.role != "primary" or self.node.source is None:
            raise NotPrimary("only the primary can hand over its role")
        if target is not None and target not in self.node.candidates:
            raise InvalidRequest(f"{target} is not one of cluster.controllers")
        if target == self.node.url:
            raise InvalidRequest("this controller is already the primary")
        self.node.switching = True
        try:
            chosen = await self.node.source.hand_over(target)
        except BaseException:
            if self.node.source.handing_to is not None:
                # The other standbys were told to vote for the target: this term must not
                # write again (they no longer stand by it), so it ends here.
                self.node.role = "standby"
                self.node.step_down_event.set()
            else:
                self.node.switching = False
            raise
        self.node.primary_url = chosen
        # Writes stay refused here; wait (briefly) until the new primary serves, so that the
        # answer names its term.
        epoch = self.node.epochs.epoch + 1
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            peer = await self.node.prober.one(self.node.candidates.index(chosen))
            if peer.reachable and peer.role == "primary" and peer.serving:
                epoch = peer.epoch
                break
            await asyncio.sleep(0.1)
        # Let the answer leave before the listener goes away.
        asyncio.get_running_loop().call_later(0.3, self.node.step_down_event.set)
        return {"primary": chosen, "previous": self.node.url, "epoch": epoch}
