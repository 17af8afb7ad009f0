"""The standby's side of a candidate: following primaries until promoted or stopped.

A standby follows the primary it finds (xce/ha/follower.py) and campaigns when it has heard
none for the failover timeout, or when its primary asks it to take over (a switchover).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from typing import TYPE_CHECKING

from xce.auth.pki import client_ssl_context
from xce.core.errors import XceError
from xce.core.versions import NewerFormat
from xce.ha.follower import Follower
from xce.ha.probe import PeerStatus
from xce.ha.protocol import Incompatible
from xce.store.durable import DurableLog

if TYPE_CHECKING:
    from xce.ha.node import Node

log = logging.getLogger("xce.ha")
INCOMPATIBLE_RETRY_S = 2.0  # between attempts to follow a primary this build cannot read


class StandbyRole:
    """Following: the role object `Node.run` holds while this candidate is a standby."""

    def __init__(self, node: Node) -> None:
        self.node = node

    async def serve(
        self, ready: asyncio.Event | None, store: DurableLog | None = None
    ) -> DurableLog | None:
        """Follow primaries until promoted (returns the log to serve from) or stopped.
        `store`: the log recovered at start, if this is the first role."""
        self.node.role = "standby"
        self.node._promoting = False
        await self.node.campaign.open_door()
        follower = self._new_follower(store)
        self.node._log = None
        self.node.follower = follower
        follower.start_checkpoints()
        print(f"xce standby ready on {self.node.url} (pid {os.getpid()})", flush=True)
        if ready is not None:
            ready.set()
        promoted = False
        try:
            promoted = await self._until_promoted(follower)
        finally:
            self.node._log = follower.store  # what log_position reports until the term begins
            self.node.follower = None
            if not promoted:
                await self.node.campaign.release_port()
                await follower.close()
        if not promoted:
            return None
        await follower.stop_checkpoints()
        return follower.store

    def _new_follower(self, store: DurableLog | None) -> Follower:
        follower = Follower(
            self.node.state_dir,
            self.node.store_settings,
            self.node.epochs,
            self.node.url,
            self.node.config.controller.replication_token,
            client_ssl_context(self.node.config.tls),
            store=store,
            space=self.node.file_space,
        )
        follower.on_compatible = self.node.clear_incompatible
        return follower

    async def _until_promoted(self, follower: Follower) -> bool:
        """Follow whichever primary is found; True once this candidate won an epoch (a
        primary silent for the failover timeout, or a switchover asked for it), False when
        stopped."""
        while not self.node.stop_event.is_set():
            primary = await self._find_primary()
            if (
                primary is not None
                and primary.replication
                and await self._follow_until_it_ends(follower, primary.url, primary.replication)
            ):
                return True
            silent = time.monotonic() - follower.last_contact
            if silent > self.node.ha.failover_timeout_s and await self._should_take_over():
                log.warning("no primary for %.1f s: taking over", silent)
                self.node.last_takeover_s = silent
                return True
            with contextlib.suppress(TimeoutError):
                # A primary that refused this build refuses it again: ask less often.
                pause = INCOMPATIBLE_RETRY_S if self.node.incompatible else 0.2
                await asyncio.wait_for(self.node.stop_event.wait(), pause)
        return False

    async def _follow_until_it_ends(self, follower: Follower, url: str, address: str) -> bool:
        """One replication link to the primary at `url` (replication `address`), until it
        ends or this node stops; True when that primary asked this standby to take over and
        it won the vote."""
        self.node.primary_url = url
        link = asyncio.create_task(follower.follow(url, address, self.node.ha.failover_timeout_s))
        stop = asyncio.create_task(self.node.stop_event.wait())
        await asyncio.wait([link, stop], return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if not link.done():
            link.cancel()
        try:
            await link
        except asyncio.CancelledError:
            pass
        except (Incompatible, NewerFormat) as exc:  # NewerFormat: a transferred checkpoint
            self.node.mark_incompatible(exc.message)
        except (XceError, OSError, TimeoutError, EOFError) as exc:
            self.node._say(
                f"replication from {url} ended: "
                f"{getattr(exc, 'message', None) or exc or type(exc).__name__}"
            )
        if follower.promote_requested:
            follower.promote_requested = False
            self.node.campaign.next_campaign = 0.0
            probed = await self.node.campaign.probe()
            if await self.node.campaign.campaign(probed, handover=True):
                return True
            log.error("asked to take over, but the vote was lost: following again")
        return False

    async def _find_primary(self) -> PeerStatus | None:
        peers = await self.node.campaign.probe()
        found = [
            p
            for p in peers
            if p.reachable and p.role == "primary" and p.epoch >= self.node.epochs.epoch
        ]
        if len({p.epoch for p in found}) < len(found):
            log.error(
                "IMPOSSIBLE: two candidates say they are primary of one epoch: %s",
                [(p.url, p.epoch) for p in found],
            )
        if not found:
            return None
        return max(found, key=lambda p: (p.epoch, -p.rank))

    async def _should_take_over(self) -> bool:
        """No primary among the others: campaign for the next epoch (election.py)."""
        peers = await self.node.campaign.probe()
        live = [p for p in peers if p.reachable]
        if any(p.role == "primary" and p.epoch >= self.node.epochs.epoch for p in live):
            return False
        return await self.node.campaign.campaign(peers)
