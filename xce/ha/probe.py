"""Asking the other candidates who they are (`GET /healthz`: role, epoch, log end) and for
their vote (`POST /api/v1/cluster/vote`, xce/ha/election.py)."""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from typing import Any

import aiohttp


@dataclass(frozen=True)
class PeerStatus:
    url: str
    rank: int
    reachable: bool
    role: str = ""
    epoch: int = 0
    seq: int = 0
    primary: str | None = None
    replication: str | None = None  # host:port of a primary's replication listener
    error: str = ""
    log_epoch: int = 0  # epoch of the last record in its log
    seen: int = 0  # the highest epoch it has seen or voted in
    serving: bool = False  # it accepts writes now
    reason: str = ""  # why it does not, when it does not

    @property
    def key(self) -> tuple[int, int, int]:
        """Who should lead among live candidates: longest log (epoch of its last record,
        then its sequence), best rank. Votes decide; this only spares futile campaigns."""
        return (self.log_epoch, self.seq, -self.rank)

    def as_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "rank": self.rank,
            "reachable": self.reachable,
            "role": self.role or None,
            "epoch": self.epoch,
            "seq": self.seq,
            "primary": self.primary,
            "serving": self.serving if self.reachable else None,
            "reason": (self.reason or None) if self.reachable else None,
            "error": self.error or None,
        }


class Prober:
    def __init__(
        self,
        candidates: list[str],
        me: int,
        ssl_context: ssl.SSLContext | None,
        timeout: float = 1.0,
    ) -> None:
        self.candidates = candidates
        self.me = me
        self.ssl_context = ssl_context
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    def _get(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self.ssl_context or True, force_close=True),
                timeout=aiohttp.ClientTimeout(total=self.timeout),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def one(self, rank: int) -> PeerStatus:
        url = self.candidates[rank]
        try:
            async with self._get().get(url + "/healthz") as resp:
                body = await resp.json(content_type=None)
            epoch = int(body.get("epoch", 0))
            return PeerStatus(
                url,
                rank,
                True,
                str(body.get("role", "")),
                epoch,
                int(body.get("seq", 0)),
                body.get("primary"),
                body.get("replication"),
                log_epoch=int(body.get("log_epoch", epoch)),
                seen=int(body.get("seen", epoch)),
                serving=bool(body.get("serving", body.get("role") == "primary")),
                reason=str(body.get("reason") or ""),
            )
        except (aiohttp.ClientError, TimeoutError, ValueError, AttributeError, OSError) as exc:
            return PeerStatus(url, rank, False, error=str(exc) or type(exc).__name__)

    async def others(self) -> list[PeerStatus]:
        ranks = [r for r in range(len(self.candidates)) if r != self.me]
        return list(await asyncio.gather(*(self.one(r) for r in ranks)))

    async def ask_vote(
        self, rank: int, request: dict[str, Any], token: str
    ) -> dict[str, Any] | None:
        """One candidate's answer to a vote request; None if it did not answer usably."""
        url = self.candidates[rank]
        try:
            async with self._get().post(
                url + "/api/v1/cluster/vote",
                json=request,
                headers={"Authorization": f"Bearer {token}"},
            ) as resp:
                body = await resp.json(content_type=None)
            if resp.status != 200 or not isinstance(body, dict):
                return None
            return {
                "granted": bool(body.get("granted")),
                "epoch": int(body.get("epoch", 0)),
                "reason": str(body.get("reason", "")),
            }
        except (aiohttp.ClientError, TimeoutError, ValueError, AttributeError, OSError):
            return None
