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
import os
import random
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from xce import metrics
from xce.auth.pki import client_ssl_context, server_ssl_context
from xce.config import Config
from xce.core.errors import InvalidRequest, NotPrimary, XceError
from xce.ha import door, election
from xce.ha.epochs import EpochStore
from xce.ha.files import FileSpace, users_path_of
from xce.ha.follower import Follower
from xce.ha.lease import Lease
from xce.ha.probe import PeerStatus, Prober
from xce.ha.source import ReplicationSource
from xce.store.durable import DurableLog, StoreSettings

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


def self_rank(config: Config) -> int:
    """Which entry of `cluster.controllers` this controller is."""
    s = config.controller
    candidates = list(config.controllers)
    if s.url:
        if s.url not in candidates:
            raise InvalidRequest(f"controller.url {s.url} is not in cluster.controllers")
        return candidates.index(s.url)
    matches = []
    for i, url in enumerate(candidates):
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        if port != s.listen_port:
            continue
        if s.listen_host in ("0.0.0.0", "::", "") or parts.hostname == s.listen_host:
            matches.append(i)
    if len(candidates) == 1 and not matches:
        return 0
    if len(matches) != 1:
        raise InvalidRequest(
            f"cannot tell which of cluster.controllers is this controller (listen "
            f"{s.listen_host}:{s.listen_port}); set controller.url to its entry"
        )
    return matches[0]


class Node:
    def __init__(self, config: Config, prefer_primary: bool, settings: StoreSettings) -> None:
        self.config = config
        self.ha = config.ha
        self.candidates = list(config.controllers)
        self.rank = self_rank(config)
        self.url = self.candidates[self.rank]
        self.prefer_primary = prefer_primary
        self.store_settings = settings
        self.state_dir: Path = config.controller.state_dir
        self.epochs = EpochStore(self.state_dir)
        self.role = "starting"
        self.primary_url: str | None = None
        self.stop_event = asyncio.Event()
        self.step_down_event = asyncio.Event()
        self.switching = False
        self.lease: Lease | None = None
        self.source: ReplicationSource | None = None
        self.follower: Follower | None = None
        self.store: DurableLog | None = None
        self.peers: list[PeerStatus] = []
        self.prober = Prober(self.candidates, self.rank, client_ssl_context(config.tls))
        self.terms_started = 0
        self.last_takeover_s: float | None = None
        self._claimed = 0  # the epoch this candidate won and is about to serve
        self._log: DurableLog | None = None  # the recovered log before a role is chosen
        self._unreachable_since: dict[int, float] = {}
        self._next_campaign = 0.0
        self._last_probe = 0.0
        self._promoting = False  # won an epoch, not serving it yet: votes are refused
        self._lone = False  # the epoch being served was claimed alone (election.py)
        self._door: web.AppRunner | None = None  # /healthz + vote while not serving the API
        self.voters = door.VoterCheck(config, self.state_dir)  # the door's vote route
        self._verifying = False
        self._last_said = ("", 0.0)
        self._background: set[asyncio.Task[None]] = set()
        metrics.EPOCH.set(self.epochs.epoch)

    @property
    def file_space(self) -> FileSpace:
        """The files that travel beside the records (xce/ha/files.py)."""
        return FileSpace(self.state_dir, users_path_of(self.config))

    # --- what others see ----------------------------------------------------------------

    @property
    def lone_rank(self) -> int | None:
        """This candidate's rank while it serves an epoch it claimed alone, else None (job
        numbers then come from blocks of its own class: xce/controller/numbers.py)."""
        return self.rank if self._lone and self.role == "primary" else None

    @property
    def solo(self) -> bool:
        return len(self.candidates) == 1

    @property
    def seq(self) -> int:
        if self.role == "primary" and self.store is not None:
            return self.store.writer.durable_seq
        return self.log_position()[1]

    @property
    def replication_address(self) -> str:
        s = self.config.controller
        host = s.replication_host or s.listen_host
        port = s.replication_port or s.listen_port + 1
        advertised = urlsplit(self.url).hostname or host
        if host not in ("0.0.0.0", "::", ""):
            advertised = host
        return f"{advertised}:{port}"

    def log_position(self) -> tuple[int, int]:
        """(epoch of the last record, its sequence) of this candidate's log: what a vote
        compares (election.decide)."""
        if self.role == "primary" and self.store is not None:
            return self.store.last_epoch, self.store.writer.next_seq - 1
        if self.follower is not None:
            return self.follower.last_epoch, self.follower.durable_seq
        if self._log is not None:
            return self._log.last_epoch, self._log.writer.next_seq - 1
        return 0, 0

    def health(self) -> dict[str, Any]:
        log_epoch, seq = self.log_position()
        return {
            "status": "ok",
            "role": self.role,
            "epoch": self.epochs.epoch,
            "seq": seq,
            "log_epoch": log_epoch,
            "seen": self.epochs.seen,
            "rank": self.rank,
            "url": self.url,
            "primary": self.url if self.role == "primary" else self.primary_url,
            "replication": self.replication_address if self.role == "primary" else None,
        }

    def view(self) -> dict[str, Any]:
        """The `ha` part of GET /api/v1/cluster."""
        me = {
            "url": self.url,
            "rank": self.rank,
            "reachable": True,
            "role": self.role,
            "epoch": self.epochs.epoch,
            "seq": self.seq,
            "primary": self.url,
            "self": True,
        }
        seq = self.seq
        peers = [
            {
                **p.as_dict(),
                "self": False,
                "lag_records": max(seq - p.seq, 0) if p.reachable else None,
            }
            for p in self.peers
        ]
        return {
            "epoch": self.epochs.epoch,
            "role": self.role,
            "rank": self.rank,
            "mode": self.ha.replication,
            "degraded": bool(self.source and self.source.degraded),
            "failover_timeout_s": self.ha.failover_timeout_s,
            "candidates": sorted([{**me, "lag_records": 0}, *peers], key=lambda c: c["rank"]),
            "standbys": self.source.view() if self.source else [],
            "history": [list(h) for h in self.epochs.history],
        }

    # --- fencing ------------------------------------------------------------------------

    def fence(self) -> None:
        """Raise NotPrimary unless this node may write now (DurableLog.check_writable)."""
        if self.role != "primary":
            raise NotPrimary(f"this controller is a {self.role}, not the primary")
        if self.switching:
            raise NotPrimary("a switchover is in progress: the primary role is moving")
        why = self.lease.refusal() if self.lease else None
        if why:
            raise NotPrimary(why)

    def observe_epoch(self, epoch: int, rank: int | None = None) -> None:
        """An epoch seen on the wire (`rank`: that of a primary claiming it); a newer one
        makes a primary step down. A second primary of this node's own epoch is impossible
        under the vote rule: if one is ever seen, say so loudly and step down (stepping down
        is always safe; the next election settles it)."""
        mine = self.epochs.epoch
        if epoch > mine:
            self.epochs.observe(epoch)
            metrics.EPOCH.set(epoch)
        same = epoch == mine and rank is not None and rank != self.rank
        if same and self.role == "primary":
            log.error(
                "IMPOSSIBLE: %s is also primary of epoch %d (this is a bug: one "
                "primary per epoch is the vote rule's promise); stepping down",
                self.candidates[rank],
                epoch,
            )
        if (epoch > mine or same) and self.role == "primary":
            if not same:
                log.error("a newer primary exists (epoch %d, mine %d): stepping down", epoch, mine)
            self.role = "standby"  # refuse writes from this instant
            self.step_down_event.set()

    def _heed(self, peers: list[PeerStatus]) -> None:
        """Let every reachable candidate's epoch (and a primary's rank) fence this node."""
        for p in peers:
            if p.reachable:
                self.observe_epoch(p.epoch, p.rank if p.role == "primary" else None)

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

    # --- the role loop ------------------------------------------------------------------

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
        if election.majority(granted, n) and self.epochs.voted_epoch == epoch:
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

    async def _primary(
        self, store: DurableLog, run_primary: PrimaryRunner, ready: asyncio.Event | None
    ) -> str:
        if self.solo:
            self.epochs.begin_solo_term(store.writer.next_seq)
        else:
            self.epochs.begin_term(self._claimed, store.writer.next_seq, self.url)
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
            self.store = None
            self.source = None
            self.lease = None
            if self.role == "primary":
                self.role = "stopped"

    def make_source(
        self, store: DurableLog, verify: Callable[[str], None], state: object
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

    # --- standby ------------------------------------------------------------------------

    async def _standby(
        self, ready: asyncio.Event | None, store: DurableLog | None = None
    ) -> DurableLog | None:
        """Follow primaries until promoted (returns the log to serve from) or stopped.
        `store`: the log recovered at start, if this is the first role."""
        self.role = "standby"
        self._promoting = False
        s = self.config.controller
        await self.open_door()
        follower = Follower(
            self.state_dir,
            self.store_settings,
            self.epochs,
            self.url,
            s.replication_token,
            client_ssl_context(self.config.tls),
            store=store,
            space=self.file_space,
        )
        self._log = None
        self.follower = follower
        follower.start_checkpoints()
        print(f"xce standby ready on {self.url} (pid {os.getpid()})", flush=True)
        if ready is not None:
            ready.set()
        promoted = False
        try:
            while not self.stop_event.is_set():
                primary = await self._find_primary()
                if primary is not None and primary.replication:
                    self.primary_url = primary.url
                    link = asyncio.create_task(
                        follower.follow(
                            primary.url, primary.replication, self.ha.failover_timeout_s
                        )
                    )
                    stop = asyncio.create_task(self.stop_event.wait())
                    await asyncio.wait([link, stop], return_when=asyncio.FIRST_COMPLETED)
                    stop.cancel()
                    if not link.done():
                        link.cancel()
                    try:
                        await link
                    except asyncio.CancelledError:
                        pass
                    except (XceError, OSError, TimeoutError, EOFError) as exc:
                        self._say(
                            f"replication from {primary.url} ended: "
                            f"{getattr(exc, 'message', None) or exc or type(exc).__name__}"
                        )
                    if follower.promote_requested:
                        follower.promote_requested = False
                        self._next_campaign = 0.0
                        if await self._campaign(await self._probe()):
                            promoted = True
                            break
                        log.error("asked to take over, but the vote was lost: following again")
                silent = time.monotonic() - follower.last_contact
                if silent > self.ha.failover_timeout_s and await self._should_take_over():
                    log.warning("no primary for %.1f s: taking over", silent)
                    self.last_takeover_s = silent
                    promoted = True
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop_event.wait(), 0.2)
        finally:
            self._log = follower.store  # what log_position reports until the term begins
            self.follower = None
            if not promoted:
                await self.release_port()
                await follower.close()
        if not promoted:
            return None
        await follower.stop_checkpoints()
        return follower.store

    async def _find_primary(self) -> PeerStatus | None:
        peers = await self._probe()
        found = [
            p for p in peers if p.reachable and p.role == "primary" and p.epoch >= self.epochs.epoch
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
        peers = await self._probe()
        live = [p for p in peers if p.reachable]
        if any(p.role == "primary" and p.epoch >= self.epochs.epoch for p in live):
            return False
        return await self._campaign(peers)

    def _say(self, text: str) -> None:
        """A warning that a retry loop would repeat: once, then at most every 30 s."""
        now = time.monotonic()
        if text != self._last_said[0] or now - self._last_said[1] > 30:
            log.warning("%s", text)
            self._last_said = (text, now)

    def headers(self) -> dict[str, str]:
        return {"X-XCE-Role": self.role, "X-XCE-Epoch": str(self.epochs.epoch)}
