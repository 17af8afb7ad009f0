"""The state a controller candidate carries whatever its role, and what others see of it.

`NodeState` holds the role's name, the epochs, the lease and the links (source or follower)
that the role objects set (xce/ha/primary_role.py, standby_role.py; xce/ha/node.py's `Node`
swaps them on each transition, and elections are xce/ha/campaign.py's); it answers health
probes and `GET /api/v1/cluster`, and fences writes (a newer epoch makes a primary step down).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from xce.auth.files import atomic_write
from xce.auth.pki import client_ssl_context
from xce.config.settings import Config
from xce.core.errors import InvalidRequest, NotPrimary
from xce.core.versions import RELEASE
from xce.ha import door
from xce.ha.epochs import EpochStore
from xce.ha.files import FileSpace, users_path_of
from xce.ha.follower import Follower
from xce.ha.lease import Lease
from xce.ha.probe import PeerStatus, Prober
from xce.ha.source import ReplicationSource
from xce.store.durable import DurableLog, StoreSettings
from xce.telemetry import metrics

log = logging.getLogger("xce.ha")


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


def candidate_rows(
    seq: int, peers: list[PeerStatus], standbys: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The other candidates as GET /api/v1/cluster shows them, `seq` being this node's log
    end. A standby's lag is read from what it acknowledged on this primary's stream when it
    has a session (`standbys`, the replication source's view): its own log end, which its
    /healthz shows, says nothing of whether that log is this primary's, and a standby whose
    log diverged shows its old end (a lag of 0) until the checkpoint sent to it is installed."""
    lags = {str(s["node"]): s["lag_records"] for s in standbys if "node" in s}
    rows = []
    for p in peers:
        lag = max(seq - p.seq, 0) if p.reachable else None
        if p.url in lags:
            lag = lags[p.url]  # (None: refused at the door for its versions)
        rows.append({**p.as_dict(), "self": False, "lag_records": lag})
    return rows


class NodeState:
    """A candidate's state, shared by its roles; the role loop is xce/ha/node.py's `Node`.
    `role` names the role for fencing and views ("starting", "primary", "standby",
    "stopped"): it turns "standby" the instant a primary is fenced, before the primary's
    role object has ended."""

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
        self._promoting = False  # won an epoch, not serving it yet: votes are refused
        self._lone = False  # the epoch being served was claimed alone (election.py)
        self.voters = door.VoterCheck(config, self.state_dir)  # the door's vote route
        self._last_said = ("", 0.0)
        # Why this candidate may not take over: the primary it last met writes formats
        # this build cannot read, so its log lacks what that primary acknowledged. Kept in
        # a file (a restart does not make it electable); cleared once it follows a primary.
        self._incompatible_file = self.state_dir / "incompatible"
        self.incompatible: str | None = self._read_incompatible()
        metrics.EPOCH.set(self.epochs.epoch)

    def _read_incompatible(self) -> str | None:
        try:
            return self._incompatible_file.read_text().strip() or None
        except FileNotFoundError:
            return None

    def mark_incompatible(self, why: str) -> None:
        """This standby cannot follow the primary (`why` names both builds): say so once,
        and refuse to campaign until it has followed a primary again."""
        if why != self.incompatible:
            log.error("cannot follow the primary, and will not take over from it: %s", why)
            atomic_write(self._incompatible_file, (why + "\n").encode())
        self.incompatible = why

    def clear_incompatible(self) -> None:
        if self.incompatible is not None:
            log.warning("following a primary this build reads: electable again")
            self._incompatible_file.unlink(missing_ok=True)
            self.incompatible = None

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
        compares (election.decide). The primary's log also while it steps down: its API
        answers votes until it closes (`Route.any_role`), and a log read as empty then
        would grant any shorter one (from the review)."""
        if self.store is not None:
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
            "release": RELEASE,
            "incompatible": self.incompatible,
            # "primary" names the term's holder (elections need it even while it cannot
            # write); whether it accepts writes now, and why not, is here:
            **self.serving(),
        }

    def serving(self) -> dict[str, Any]:
        """`serving`: this node accepts writes now; `reason`: why not, when it does not."""
        why = self.refusal()
        return {"serving": why is None, "reason": why}

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
            **self.serving(),
        }
        standbys = self.source.view() if self.source else []
        peers = candidate_rows(self.seq, self.peers, standbys)
        return {
            "epoch": self.epochs.epoch,
            "role": self.role,
            "rank": self.rank,
            "mode": self.ha.replication,
            "degraded": bool(self.source and self.source.degraded),
            "failover_timeout_s": self.ha.failover_timeout_s,
            "candidates": sorted([{**me, "lag_records": 0}, *peers], key=lambda c: c["rank"]),
            "standbys": standbys,
            "history": [list(h) for h in self.epochs.history],
            "incompatible": self.incompatible,  # this candidate's own, if a standby
        }

    def headers(self) -> dict[str, str]:
        return {"X-XCE-Role": self.role, "X-XCE-Epoch": str(self.epochs.epoch)}

    # --- fencing ------------------------------------------------------------------------

    def refusal(self) -> str | None:
        """Why this node may not write now; None when it may (it serves)."""
        if self.role != "primary":
            return f"this controller is a {self.role}, not the primary"
        if self.switching:
            return "a switchover is in progress: the primary role is moving"
        return self.lease.refusal() if self.lease else None

    def fence(self) -> None:
        """Raise NotPrimary unless this node may write now (DurableLog.check_writable)."""
        why = self.refusal()
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
        if same and rank is not None and self.role == "primary":
            log.error(
                "IMPOSSIBLE: %s is also primary of epoch %d (this is a bug: one "
                "primary per epoch is the vote rule's promise); stepping down",
                self.candidates[rank],
                epoch,
            )
        if (epoch > mine or same) and self.role == "primary":
            if not same and rank is not None:
                log.error("a newer primary exists (epoch %d, mine %d): stepping down", epoch, mine)
            elif not same:  # a candidate voted in a newer epoch (a switchover target does)
                log.warning("a newer epoch is claimed (%d, mine %d): stepping down", epoch, mine)
            self.role = "standby"  # refuse writes from this instant
            self.step_down_event.set()

    def _heed(self, peers: list[PeerStatus]) -> None:
        """Let every reachable candidate's epoch (and a primary's rank) fence this node."""
        for p in peers:
            if p.reachable:
                self.observe_epoch(p.epoch, p.rank if p.role == "primary" else None)

    # --- logging ------------------------------------------------------------------------

    def _say(self, text: str) -> None:
        """A warning that a retry loop would repeat: once, then at most every 30 s."""
        now = time.monotonic()
        if text != self._last_said[0] or now - self._last_said[1] > 30:
            log.warning("%s", text)
            self._last_said = (text, now)
