"""The connections of the task service that have not proven a credential yet.

Anyone who can reach a host can open connections to its task service, so a connection that
has not answered the challenge (xce/worker/tasks/wire.py) is cheap to make and must stay
cheap to hold: it may take no more than HANDSHAKE_S to send its hello, and at most
MAX_PENDING of them (MAX_PENDING_PER_PEER from one address) are held at once. A newcomer
beyond either bound is not refused: the *oldest* pending connection of its address (or, with
the whole pool full, of the address holding most) is dropped to make room. A real launch
answers its challenge within a round trip, so idle or dripping connections, however many,
are what gets dropped, never the launch that arrives after them; and one address (a job's
host, where its hostile code runs) cannot crowd out the launches from other hosts. Only
connections that have proven a credential count against the service's task limit.
"""

from __future__ import annotations

import asyncio

from xce.worker.tasks.request import TaskRefused
from xce.worker.tasks.wire import HEADER, TAG_BYTES, NotProven, Session

__all__ = [
    "HANDSHAKE_S",
    "MAX_PENDING",
    "MAX_PENDING_PER_PEER",
    "Handshakes",
    "peer_address",
    "read_frame",
    "read_sealed",
]

# How long a connection may take from its accept to a complete hello: a launch answers
# at once; a slow or silent one is dropped after this.
HANDSHAKE_S = 5.0
MAX_PENDING = 256
MAX_PENDING_PER_PEER = 64


class Handshakes:
    """The pending connections by peer address, oldest first (dicts keep insertion order)."""

    def __init__(self, total: int = MAX_PENDING, per_peer: int = MAX_PENDING_PER_PEER) -> None:
        self.total = total
        self.per_peer = per_peer
        self.peers: dict[str, dict[asyncio.StreamWriter, None]] = {}
        self.count = 0

    def enter(self, peer: str, writer: asyncio.StreamWriter) -> None:
        """Hold a new connection, dropping the oldest of its peer's (or of the busiest
        peer's) when a bound is reached."""
        mine = self.peers.setdefault(peer, {})
        if len(mine) >= self.per_peer:
            self._drop_oldest(peer)
        elif self.count >= self.total:
            self._drop_oldest(max(self.peers, key=lambda p: len(self.peers[p])))
        self.peers.setdefault(peer, {})[writer] = None
        self.count += 1

    def leave(self, peer: str, writer: asyncio.StreamWriter) -> None:
        """The connection proved its credential, was refused or went: it is not pending."""
        mine = self.peers.get(peer)
        if mine is None or writer not in mine:
            return
        del mine[writer]
        self.count -= 1
        if not mine:
            del self.peers[peer]

    def _drop_oldest(self, peer: str) -> None:
        oldest = next(iter(self.peers[peer]))
        self.leave(peer, oldest)
        # Its reads end at once (end of stream) and its serving coroutine finishes there.
        oldest.transport.abort()


def peer_address(writer: asyncio.StreamWriter) -> str:
    """The connection's remote address (its port left out): what the pools count by."""
    peer = writer.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else ""


async def read_frame(reader: asyncio.StreamReader, channel: int, limit: int, what: str) -> bytes:
    """One frame of `channel` of at most `limit` bytes; TaskRefused for anything else (a
    length is checked before a byte of the body is read, so no one makes the worker buffer
    more than `limit`)."""
    got, length = HEADER.unpack(await reader.readexactly(HEADER.size))
    if got != channel:
        raise TaskRefused(f"expected the {what} (is this an `xce launch` of this build?)")
    if length > limit:
        raise TaskRefused(f"the {what} is longer than {limit} bytes")
    return await reader.readexactly(length)


async def read_sealed(
    reader: asyncio.StreamReader, session: Session, channel: int, limit: int, what: str
) -> bytes:
    """The payload of the next sealed frame, of `channel`, from the client: TaskRefused where
    its tag is not the session's at that place (a frame put in by anyone between)."""
    body = await read_frame(reader, channel, limit + TAG_BYTES, what)
    try:
        return session.open(channel, body)
    except NotProven:
        raise TaskRefused(f"the {what} fails its check (not sent by the launch)") from None
