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
from typing import Any

from xce.ha import door, election
from xce.ha.node_base import NodeBase
from xce.ha.probe import PeerStatus
from xce.telemetry import metrics

log = logging.getLogger("xce.ha")


class Campaigner(NodeBase):
    """A candidate that probes the others and takes part in elections."""

    def claimed_epoch(self, epoch: int) -> None:
        """A client says it has seen a newer epoch (`X-XCE-Epoch`). Anyone can send that
        header, so it only triggers a probe of the other candidates: the step-down happens
        if one of them confirms a newer term."""
        if epoch <= self.epochs.epoch or self.role != "primary" or self._verifying:
            return
        self._verifying = True

        async def verify() -> None:
            try:
                self._heed(await self._probe())
            finally:
                self._verifying = False

        task = asyncio.get_running_loop().create_task(verify())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _initial_role(self) -> str:
        """After recovery: follow a primary if there is one; `xce controller` campaigns at
        once if the others answer and none is better placed; otherwise start as a standby
        (whose failover timer campaigns later, e.g. when no other candidate answers)."""
        if not self.prefer_primary:
            return "standby"
        peers = await self._probe()
        live = [p for p in peers if p.reachable]
        if any(p.role == "primary" for p in live):
            return "standby"
        return "primary" if await self._campaign(peers) else "standby"

    async def _probe(self) -> list[PeerStatus]:
        """Probe the others, and remember since when each has been unreachable (the lone
        claim of a two-candidate cluster needs a whole failover timeout of silence, seen by
        probes of this process: a frozen or restarted candidate starts counting again)."""
        started = time.monotonic()
        if started - self._last_probe > self.ha.failover_timeout_s / 2:
            self._unreachable_since.clear()  # this process was not looking meanwhile
        peers = await self.prober.others()
        self.peers = peers
        self._last_probe = time.monotonic()
        for p in peers:
            if p.reachable:
                self._unreachable_since.pop(p.rank, None)
            else:
                self._unreachable_since.setdefault(p.rank, started)
        return peers

    def _silent_long_enough(self, rank: int) -> bool:
        since = self._unreachable_since.get(rank)
        return since is not None and time.monotonic() - since >= self.ha.failover_timeout_s

    async def _campaign(self, peers: list[PeerStatus]) -> bool:
        """Try to win the next epoch (election.py); True when this candidate may serve it."""
        if time.monotonic() < self._next_campaign:
            return False
        n = len(self.candidates)
        live = [p for p in peers if p.reachable]
        mine = (*self.log_position(), -self.rank)
        if any(p.key > mine for p in live if p.role != "primary"):
            return False  # a better placed candidate is up: let it campaign first
        seen = max([self.epochs.seen] + [p.seen for p in live])
        alone = n == 2 and not live
        if alone:
            if not self._silent_long_enough(1 - self.rank):
                return False
            epoch = election.lone_epoch(seen, self.rank, n)
        elif not election.majority(len(live) + 1, n):
            self._say("no majority of candidates is reachable: not claiming an epoch")
            return False
        else:
            epoch = seen + 1
        if not self.epochs.vote(epoch, self.url):
            return False
        metrics.EPOCH.set(self.epochs.epoch)
        if alone:
            log.warning(
                "the other candidate has been unreachable for %.1f s: claiming "
                "epoch %d alone (lone-claim class of rank %d)",
                self.ha.failover_timeout_s,
                epoch,
                self.rank,
            )
            self._claimed, self._promoting, self._lone = epoch, True, True
            return True
        log_epoch, last_seq = self.log_position()
        request = election.VoteRequest(epoch, self.url, log_epoch, last_seq).as_dict()
        token = self.config.controller.replication_token
        answers = await asyncio.gather(
            *(self.prober.ask_vote(p.rank, request, token) for p in live)
        )
        granted = 1 + sum(1 for a in answers if a and a["granted"])
        for a in answers:
            if a and not a["granted"] and a["epoch"] > self.epochs.seen:
                self.epochs.observe(a["epoch"])
        # A refusal may name a newer epoch (observed above): then this one is over before
        # it began, as in Raft (serving it would write records of that newer epoch)
        if (
            election.majority(granted, n)
            and self.epochs.voted_epoch == epoch
            and self.epochs.epoch == epoch
        ):
            log.warning("won epoch %d with %d of %d votes", epoch, granted, n)
            self._claimed, self._promoting, self._lone = epoch, True, False
            return True
        reasons = "; ".join(a["reason"] for a in answers if a and not a["granted"])
        log.info(
            "lost the vote for epoch %d (%d of %d)%s",
            epoch,
            granted,
            n,
            f": {reasons}" if reasons else "",
        )
        self._next_campaign = time.monotonic() + random.uniform(0.1, 0.6) + 0.2 * self.rank
        return False

    def answer_vote(self, body: Any) -> dict[str, Any]:
        """`POST /api/v1/cluster/vote` on this candidate (the caller is authenticated)."""
        req = election.VoteRequest.parse(body)
        verdict = election.decide(
            self.epochs,
            req,
            candidates=self.candidates,
            me=self.url,
            log_position=self.log_position(),
            busy=self._busy(req),
        )
        if verdict.granted:
            metrics.EPOCH.set(self.epochs.epoch)
            log.warning("voted for %s in epoch %d", req.candidate, req.epoch)
            if self.role == "primary":
                # A switchover target asked: this term is over from this instant (the
                # switchover answers the admin, then steps down fully).
                self.role = "standby"
                if not self.switching:
                    self.step_down_event.set()
        return verdict.as_dict()

    def _busy(self, req: election.VoteRequest) -> str | None:
        """Why this candidate will not vote now: it is a live primary (not handing over),
        or it follows one it heard within the failover timeout (the candidate asking is
        not that primary)."""
        if self._promoting:
            return f"{self.url} won epoch {self._claimed} and is taking over"
        if self.role == "primary":
            return (
                None
                if self.switching
                else f"{self.url} is the primary of epoch {self.epochs.epoch}"
            )
        f = self.follower
        if (
            f is not None
            and f.primary is not None
            and f.primary != req.candidate
            and time.monotonic() - f.last_contact < self.ha.failover_timeout_s
        ):
            return f"this candidate follows {f.primary}, heard within the failover timeout"
        return None

    # --- the port while not serving the API ---------------------------------------------

    async def open_door(self) -> None:
        """Answer /healthz and vote requests (everything else: 503 not_primary) from now
        until the primary's API takes the port over (`release_port`). Open from recovery
        on, through standby time and a promotion, so that the others never see this
        candidate silent while it is alive: a silence they could take for a crash."""
        if self._door is None:
            self._door = await door.serve(self)

    async def release_port(self) -> None:
        """Called by the primary's API right before it listens on the same port."""
        door, self._door = self._door, None
        if door is not None:
            await door.cleanup()
