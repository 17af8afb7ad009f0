"""Asking the other candidates who they are: `GET /healthz` answers role, epoch and log end."""

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

    @property
    def key(self) -> tuple[int, int, int]:
        """Who should lead among live candidates: newest epoch, longest log, best rank."""
        return (self.epoch, self.seq, -self.rank)

    def as_dict(self) -> dict[str, Any]:
        return {"url": self.url, "rank": self.rank, "reachable": self.reachable,
                "role": self.role or None, "epoch": self.epoch, "seq": self.seq,
                "primary": self.primary, "error": self.error or None}


class Prober:
    def __init__(self, candidates: list[str], me: int, ssl_context: ssl.SSLContext | None,
                 timeout: float = 1.0) -> None:
        self.candidates = candidates
        self.me = me
        self.ssl_context = ssl_context
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    def _get(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self.ssl_context or True, force_close=True),
                timeout=aiohttp.ClientTimeout(total=self.timeout))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def one(self, rank: int) -> PeerStatus:
        url = self.candidates[rank]
        try:
            async with self._get().get(url + "/healthz") as resp:
                body = await resp.json(content_type=None)
            return PeerStatus(url, rank, True, str(body.get("role", "")),
                              int(body.get("epoch", 0)), int(body.get("seq", 0)),
                              body.get("primary"), body.get("replication"))
        except (aiohttp.ClientError, TimeoutError, ValueError, AttributeError, OSError) as exc:
            return PeerStatus(url, rank, False, error=str(exc) or type(exc).__name__)

    async def others(self) -> list[PeerStatus]:
        ranks = [r for r in range(len(self.candidates)) if r != self.me]
        return list(await asyncio.gather(*(self.one(r) for r in ranks)))
