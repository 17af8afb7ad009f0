"""`GuardedSite`: a TCP listener whose TLS handshakes the connection guard also bounds.

Over TLS, asyncio hands a connection to its protocol (`GuardedHandler`, where the guard
counts connections per address and starts its header timeout) only once the handshake has
finished, and a handshake may take 60 s (asyncio's default). So a client that opens
connections and never speaks TLS was neither counted nor timed out: one address could hold
as many half-open connections as the process has descriptors, and the controller, its door
or a relay would stop accepting anyone. `GuardedSite` listens on sockets of its own
(`_Listener`) that count each accepted connection against `max_connections_per_address`
before any byte of TLS (one over the cap is closed at once: no HTTP answer can be sent
before the handshake) until that socket closes, and bounds the handshake by the guard's
`header_timeout_s`. Without TLS it is aiohttp's `TCPSite`: the handler counts a plain
connection the moment it is made, and answers one over the cap with a 503 naming why.
"""

from __future__ import annotations

import asyncio
import functools
import socket
from ssl import SSLContext
from typing import Any

from aiohttp import web

from xce.listen.connections import ConnectionGuard, GuardedRunner

REFUSED_PER_CALL = 256  # connections over the cap one accept call closes before it yields


class _Counted(socket.socket):
    """An accepted connection that gives its place back to the guard when it closes."""

    release: Any = None  # the guard's release for its address, once

    def close(self) -> None:
        release, self.release = self.release, None
        if release is not None:
            release()
        super().close()


class _Listener(socket.socket):
    """A listening socket that counts what it accepts per source address."""

    guard: ConnectionGuard

    def accept(self) -> tuple[socket.socket, Any]:
        # Connections over the cap are closed here and the next one taken in the same
        # call, so that a flood from one address does not cost a round of the event loop
        # each while the connections behind it wait (at most REFUSED_PER_CALL: then
        # asyncio ends this round of accepts and takes the rest on the next).
        for _ in range(REFUSED_PER_CALL):
            fd, addr = self._accept()  # type: ignore[attr-defined]
            conn = _Counted(self.family, self.type, self.proto, fileno=fd)
            address = str(addr[0]) if isinstance(addr, tuple) and addr else "local"
            if not self.guard.admit(address, accepted=True):
                conn.close()
                continue
            conn.release = functools.partial(self.guard.release, address, accepted=True)
            if socket.getdefaulttimeout() is None and self.gettimeout():
                conn.setblocking(True)  # as socket.accept does (asyncio sets it non-blocking)
            return conn, addr
        raise ConnectionAbortedError("connections over the guard's cap, refused")


class GuardedSite(web.BaseSite):
    """`web.TCPSite` for a `GuardedRunner`, with TLS handshakes counted and timed (module
    docstring). Listens on every address `host` resolves to."""

    __slots__ = ("_host", "_port", "_servers")

    def __init__(
        self,
        runner: GuardedRunner,
        host: str,
        port: int,
        *,
        ssl_context: SSLContext | None = None,
        backlog: int = 128,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        self._host, self._port = host, port
        self._servers: list[asyncio.AbstractServer] = []

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        runner = self._runner
        assert isinstance(runner, GuardedRunner) and runner.server is not None
        loop = asyncio.get_running_loop()
        if self._ssl_context is None:
            self._server = await loop.create_server(
                runner.server, self._host, self._port, backlog=self._backlog, reuse_address=True
            )
            self._servers = [self._server]
            return
        timeout = runner.guard.settings.header_timeout_s or None
        listeners = self._listeners(runner.guard)
        try:
            for listener in listeners:
                server = await loop.create_server(
                    runner.server,
                    sock=listener,
                    ssl=self._ssl_context,
                    backlog=self._backlog,
                    ssl_handshake_timeout=timeout,
                )
                self._servers.append(server)
                self._server = self._servers[0]  # stop() closes the first through BaseSite
        except BaseException:
            for listener in listeners[len(self._servers) :]:  # no server holds these
                listener.close()
            raise

    def _listeners(self, guard: ConnectionGuard) -> list[_Listener]:
        """One bound socket per address `host` resolves to, as asyncio's create_server
        makes them (address reuse on, IPv6 sockets IPv6 only)."""
        infos = socket.getaddrinfo(
            self._host or None, self._port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        made: list[_Listener] = []
        try:
            for family, kind, proto, _, address in dict.fromkeys(
                (i[0], i[1], i[2], i[3], i[4]) for i in infos
            ):
                listener = _Listener(family, kind, proto)
                made.append(listener)
                listener.guard = guard
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                listener.bind(address)
        except BaseException:
            for listener in made:
                listener.close()
            raise
        return made

    async def stop(self) -> None:
        for server in self._servers[1:]:
            server.close()
        self._servers = []
        await super().stop()
