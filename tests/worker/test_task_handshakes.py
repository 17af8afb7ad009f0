"""The pool of task service connections that have not proven a credential
(xce/worker/tasks/handshake.py), with real connections on loopback: a bound reached drops
the oldest pending connection of the newcomer's address, or of the address holding most,
never the newcomer and never a quiet address's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from xce.worker.tasks.handshake import Handshakes

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
