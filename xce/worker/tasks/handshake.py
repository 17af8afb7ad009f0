"""The connections of the task service that have not proven a credential yet.

Anyone who can reach a host can open connections to its task service, so a connection that
has not answered the challenge (xce/worker/tasks/wire.py) is cheap to make and must stay
cheap to hold: it may take no more than HANDSHAKE_S to send its hello, and at most
MAX_PENDING of them (MAX_PENDING_PER_PEER from one group of addresses, `address_group`) are
held at once. A newcomer beyond either bound is not refused: the *oldest* pending connection
of its group (or, with the whole pool full, of the group holding most) is dropped to make
room. A real launch answers its challenge within a round trip, so idle or dripping
connections, however many, are what gets dropped, never the launch that arrives after them;
and one host (a job's host, where its hostile code runs) cannot crowd out the launches from
other hosts. A group is what one attacker has as cheaply as one address: all of loopback
(any user of this host can connect from any of 127/8, or ::1), an IPv6 /64, one IPv4
address. A connection leaves the pool as soon as its hello is read; one whose attempt is
not (yet) known here waits for its assignment in a pool of its own of the same kind
(`TaskService.waiting`), so idle connections never push out a hello that was sent. Only
connections that have proven a credential count against the service's task limit.
"""

from __future__ import annotations

import asyncio
import ipaddress

from xce.worker.tasks.request import TaskRefused
from xce.worker.tasks.wire import HEADER, TAG_BYTES, NotProven, Session

__all__ = [
    "HANDSHAKE_S",
    "MAX_PENDING",
    "MAX_PENDING_PER_PEER",
    "Handshakes",
    "address_group",
    "peer_address",
    "read_frame",
    "read_sealed",
]

# How long a connection may take from its accept to a complete hello: a launch answers
# at once; a slow or silent one is dropped after this.
HANDSHAKE_S = 5.0
MAX_PENDING = 256
# Half the pool: loopback (all of this host's users, the jobs' launches to it among them) is
# one group, and a launch is dropped only when this many newer connections of its group come
# in before its hello does; the other half stays for the other hosts.
MAX_PENDING_PER_PEER = 128


class Handshakes:
    """The pending connections by peer group (`address_group`), oldest first (dicts keep
    insertion order)."""

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


def address_group(address: str) -> str:
    """What the pools count a remote address by: "loopback" for all of 127/8 and ::1 (anyone
    on this host has them all), the /64 of an IPv6 address (one site's hosts get a /64 and
    may use any address of it), an IPv4 address as it is (an IPv4-mapped IPv6 one too)."""
    try:
        ip: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(
            address.split("%", 1)[0]
        )
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return "loopback"
    if isinstance(ip, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network(f"{ip}/64", strict=False))
    return str(ip)


def peer_address(writer: asyncio.StreamWriter) -> str:
    """The group of the connection's remote address (`address_group`): what the pools count
    by."""
    peer = writer.get_extra_info("peername")
    return address_group(str(peer[0])) if isinstance(peer, tuple) and peer else ""


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
