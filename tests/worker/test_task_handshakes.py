"""The pool of task service connections that have not proven a credential
(xce/worker/tasks/handshake.py), with real connections on loopback: a bound reached drops
the oldest pending connection of the newcomer's address, or of the address holding most,
never the newcomer and never a quiet address's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from xce.worker.tasks.handshake import Handshakes, address_group

Opener = Callable[[str], Awaitable[asyncio.StreamWriter]]


@pytest.fixture
async def connect() -> AsyncIterator[Opener]:
    """Opens a connection from a loopback address; yields the server's end of it."""
    accepted: asyncio.Queue[asyncio.StreamWriter] = asyncio.Queue()

    async def serve(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await accepted.put(writer)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    clients: list[asyncio.StreamWriter] = []

    async def open_from(source: str) -> asyncio.StreamWriter:
        _, client = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
        clients.append(client)
        return await asyncio.wait_for(accepted.get(), 10)

    yield open_from
    for client in clients:
        client.close()
    server.close()
    await server.wait_closed()


async def _enter(pool: Handshakes, connect: Opener, source: str) -> asyncio.StreamWriter:
    writer = await connect(source)
    pool.enter(source, writer)
    return writer


async def test_one_address_past_its_bound_loses_its_own_oldest(connect: Opener) -> None:
    pool = Handshakes(total=10, per_peer=2)
    other = await _enter(pool, connect, "127.0.0.2")
    first = await _enter(pool, connect, "127.0.0.1")
    second = await _enter(pool, connect, "127.0.0.1")
    third = await _enter(pool, connect, "127.0.0.1")
    assert first.transport.is_closing()
    assert not any(w.transport.is_closing() for w in (other, second, third))
    assert list(pool.peers["127.0.0.1"]) == [second, third] and pool.count == 3


async def test_a_full_pool_drops_from_the_busiest_address_not_a_quiet_one(
    connect: Opener,
) -> None:
    pool = Handshakes(total=4, per_peer=4)
    quiet = await _enter(pool, connect, "127.0.0.2")
    flood = [await _enter(pool, connect, "127.0.0.1") for _ in range(3)]
    newcomer = await _enter(pool, connect, "127.0.0.3")
    assert flood[0].transport.is_closing()
    assert not any(w.transport.is_closing() for w in (quiet, newcomer, *flood[1:]))
    assert pool.count == 4
    # a connection that proved its credential (or went) leaves the pool and frees its place
    pool.leave("127.0.0.2", quiet)
    pool.leave("127.0.0.2", quiet)  # twice is once
    assert pool.count == 3 and "127.0.0.2" not in pool.peers


def test_addresses_one_attacker_has_as_cheaply_as_one_are_one_group() -> None:
    """Any user of a host may connect from any of 127/8 (or ::1), and a site's hosts may
    use any address of their IPv6 /64: counted apart, they would be as many quiet peers."""
    assert {address_group(a) for a in ("127.0.0.1", "127.9.8.7", "::1", "::ffff:127.0.0.2")} == {
        "loopback"
    }
    assert address_group("2001:db8:1:2::5") == address_group("2001:db8:1:2:ffff::9")
    assert address_group("2001:db8:1:2::5") != address_group("2001:db8:1:3::5")
    assert address_group("fe80::1%eth0") == address_group("fe80::2")
    assert address_group("10.0.0.1") != address_group("10.0.0.2")
    assert address_group("::ffff:10.0.0.1") == address_group("10.0.0.1")
    assert address_group("not an address") == "not an address"


async def test_flood_from_many_loopback_addresses_counts_as_one_group(connect: Opener) -> None:
    """A flood from many of 127/8 fills its one group's share and then drops its own
    oldest; a connection from another host keeps its place."""
    pool = Handshakes(total=8, per_peer=4)
    remote = await connect("127.0.0.1")
    pool.enter("10.0.0.1", remote)  # as if from another host
    flood = []
    for i in range(12):
        source = f"127.0.{i + 2}.1"
        writer = await connect(source)
        pool.enter(address_group(source), writer)
        flood.append(writer)
    assert not remote.transport.is_closing()
    assert all(w.transport.is_closing() for w in flood[:8])
    assert not any(w.transport.is_closing() for w in flood[8:])
    assert pool.count == 5
