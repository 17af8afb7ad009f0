"""Elections: probing the other candidates, campaigning for an epoch, answering votes.

While it does not serve the API, the candidate answers probes and votes on its port through
xce/ha/door.py (`open_door`, `release_port`).

The rules are xce/ha/election.py's (Raft's term vote, and the lone claim of a two-candidate
cluster); this is the candidate's side of them: when to campaign, whom to ask, when to refuse
a vote, and the probe of a newer epoch a client claims to have seen.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from xce.ha import door, election
from xce.ha.probe import PeerStatus
from xce.telemetry import metrics

if TYPE_CHECKING:
    from xce.ha.node import Node

log = logging.getLogger("xce.ha")


class Campaign:
    """A candidate's elections, whatever its role: probing the others, campaigning, voting.
    The node's state (node_base.py) is `node`; this keeps only the campaign's own clocks."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.verifying = False
        self.unreachable_since: dict[int, float] = {}
        self.next_campaign = 0.0
        self.last_probe = 0.0
        self.door_app: web.AppRunner | None = None  # /healthz + vote while not serving the API
        self.background: set[asyncio.Task[None]] = set()

    def claimed_epoch(self, epoch: int) -> None:
        """A client says it has seen a newer epoch (`X-XCE-Epoch`). Anyone can send that
        header, so it only triggers a probe of the other candidates: the step-down happens
        if one of them confirms a newer term."""
        if epoch <= self.node.epochs.epoch or self.node.role != "primary" or self.verifying:
            return
        self.verifying = True

        async def verify() -> None:
            try:
                self.node._heed(await self.probe())
            finally:
                self.verifying = False

        task = asyncio.get_running_loop().create_task(verify())
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def initial_role(self) -> str:
        """After recovery: follow a primary if there is one; `xce controller` campaigns at
        once if the others answer and none is better placed; otherwise start as a standby
        (whose failover timer campaigns later, e.g. when no other candidate answers)."""
        if not self.node.prefer_primary:
            return "standby"
        peers = await self.probe()
        live = [p for p in peers if p.reachable]
        if any(p.role == "primary" for p in live):
            return "standby"
        return "primary" if await self.campaign(peers) else "standby"

    async def probe(self) -> list[PeerStatus]:
        """Probe the others, and remember since when each has been unreachable (the lone
        claim of a two-candidate cluster needs a whole failover timeout of silence, seen by
        probes of this process: a frozen or restarted candidate starts counting again)."""
        started = time.monotonic()
        if started - self.last_probe > self.node.ha.failover_timeout_s / 2:
            self.unreachable_since.clear()  # this process was not looking meanwhile
        peers = await self.node.prober.others()
        self.node.peers = peers
        self.last_probe = time.monotonic()
        for p in peers:
            if p.reachable:
                self.unreachable_since.pop(p.rank, None)
            else:
                self.unreachable_since.setdefault(p.rank, started)
        return peers

    def silent_long_enough(self, rank: int) -> bool:
        since = self.unreachable_since.get(rank)
        return since is not None and time.monotonic() - since >= self.node.ha.failover_timeout_s

    async def campaign(self, peers: list[PeerStatus], handover: bool = False) -> bool:
        """Try to win the next epoch (election.py); True when this candidate may serve it.

        `handover`: the primary asked this candidate to take over (a switchover): it
        campaigns even if another candidate looks better placed, which defers to it (the
        primary named it to them, `busy`)."""
        if time.monotonic() < self.next_campaign:
            return False
        if self.node.incompatible is not None:
            # Its log lacks what a primary it could not read acknowledged: taking over
            # would lose those records (docs/upgrades.md). An upgraded build clears this
            # by following a primary once.
            self.node._say(f"not taking over: {self.node.incompatible}")
            return False
        n = len(self.node.candidates)
        live = [p for p in peers if p.reachable]
        mine = (*self.node.log_position(), -self.node.rank)
        if not handover and any(p.key > mine for p in live if p.role != "primary"):
            return False  # a better placed candidate is up: let it campaign first
        seen = max([self.node.epochs.seen] + [p.seen for p in live])
        alone = n == 2 and not live
        if alone:
            if not self.silent_long_enough(1 - self.node.rank):
                return False
            epoch = election.lone_epoch(seen, self.node.rank, n)
        elif not election.majority(len(live) + 1, n):
            self.node._say("no majority of candidates is reachable: not claiming an epoch")
            return False
        else:
            epoch = seen + 1
        if not self.node.epochs.vote(epoch, self.node.url):
            return False
        metrics.EPOCH.set(self.node.epochs.epoch)
        if alone:
            log.warning(
                "the other candidate has been unreachable for %.1f s: claiming "
                "epoch %d alone (lone-claim class of rank %d)",
                self.node.ha.failover_timeout_s,
                epoch,
                self.node.rank,
            )
            self.node._claimed, self.node._promoting, self.node._lone = epoch, True, True
            return True
        log_epoch, last_seq = self.node.log_position()
        request = election.VoteRequest(epoch, self.node.url, log_epoch, last_seq).as_dict()
        token = self.node.config.controller.replication_token
        answers = await asyncio.gather(
            *(self.node.prober.ask_vote(p.rank, request, token) for p in live)
        )
        granted = 1 + sum(1 for a in answers if a and a["granted"])
        for a in answers:
            if a and not a["granted"] and a["epoch"] > self.node.epochs.seen:
                self.node.epochs.observe(a["epoch"])
        # A refusal may name a newer epoch (observed above): then this one is over before
        # it began, as in Raft (serving it would write records of that newer epoch)
        if (
            election.majority(granted, n)
            and self.node.epochs.voted_epoch == epoch
            and self.node.epochs.epoch == epoch
        ):
            log.warning("won epoch %d with %d of %d votes", epoch, granted, n)
            self.node._claimed, self.node._promoting, self.node._lone = epoch, True, False
            return True
        reasons = "; ".join(a["reason"] for a in answers if a and not a["granted"])
        log.info(
            "lost the vote for epoch %d (%d of %d)%s",
            epoch,
            granted,
            n,
            f": {reasons}" if reasons else "",
        )
        self.next_campaign = time.monotonic() + random.uniform(0.1, 0.6) + 0.2 * self.node.rank
        return False

    def answer_vote(self, body: Any) -> dict[str, Any]:
        """`POST /api/v1/cluster/vote` on this candidate (the caller is authenticated)."""
        req = election.VoteRequest.parse(body)
        verdict = election.decide(
            self.node.epochs,
            req,
            candidates=self.node.candidates,
            me=self.node.url,
            log_position=self.node.log_position(),
            busy=self.busy(req),
        )
        if verdict.granted:
            metrics.EPOCH.set(self.node.epochs.epoch)
            log.warning("voted for %s in epoch %d", req.candidate, req.epoch)
            if self.node.role == "primary":
                # A switchover target asked: this term is over from this instant (the
                # switchover answers the admin, then steps down fully).
                self.node.role = "standby"
                if not self.node.switching:
                    self.node.step_down_event.set()
        return verdict.as_dict()

    def busy(self, req: election.VoteRequest) -> str | None:
        """Why this candidate will not vote now: it is a live primary (unless it hands its
        role to the candidate asking), or it follows one it heard within the failover
        timeout (the candidate asking is not that primary, nor the target that primary
        named in a switchover: the others defer to the named target)."""
        if self.node._promoting:
            return f"{self.node.url} won epoch {self.node._claimed} and is taking over"
        source = self.node.source
        if self.node.role == "primary":
            if self.node.switching and source is not None and source.handing_to == req.candidate:
                return None
            if self.node.switching:
                return f"{self.node.url} is handing its role over to another candidate"
            return f"{self.node.url} is the primary of epoch {self.node.epochs.epoch}"
        f = self.node.follower
        timeout = self.node.ha.failover_timeout_s
        if f is not None and f.handover is not None:
            target, at = f.handover
            if target == req.candidate and time.monotonic() - at < timeout:
                return None  # our primary hands its role to this candidate
        if (
            f is not None
            and f.primary is not None
            and f.primary != req.candidate
            and time.monotonic() - f.last_contact < self.node.ha.failover_timeout_s
        ):
            return f"this candidate follows {f.primary}, heard within the failover timeout"
        return None

    # --- the port while not serving the API ---------------------------------------------

    async def open_door(self) -> None:
        """Answer /healthz and vote requests (everything else: 503 not_primary) from now
        until the primary's API takes the port over (`release_port`). Open from recovery
        on, through standby time and a promotion, so that the others never see this
        candidate silent while it is alive: a silence they could take for a crash."""
        if self.door_app is None:
            self.door_app = await door.serve(self.node)

    async def release_port(self) -> None:
        """Called by the primary's API right before it listens on the same port."""
        door, self.door_app = self.door_app, None
        if door is not None:
            await door.cleanup()
