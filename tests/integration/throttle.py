"""A TCP proxy for transfer tests: a slow link in front of the controller, with faults.

Runs its own event loop in a thread, so tests (blocking) and the processes they start
(the CLI, a worker) reach the controller through `proxy.url`. Per connection and direction
it relays at most `down_rate` (controller -> client) or `up_rate` (client -> controller)
bytes per second (0: as fast as it can). Faults, each used once and then cleared:

* `cut_after = N`: the first connection that has relayed N bytes towards the client is
  closed there (a download broken mid-body; small answers never reach N);
* `flip_at = N`: the byte at offset N of the first stream towards the client that gets that
  far is inverted (a damaged body that TCP did not catch);
* `pause_after = N` with `pause_s`: that stream stops for `pause_s` after N bytes (a stall).

`sent` keeps the first `capture_bytes` of what clients sent to the controller (a worker's
requests: its finish reports, say), to look into; `down_bytes` counts what it relayed
towards clients (how far a download has come).

Like a real link, and unlike a loopback socket, it holds little of what it was sent and not
yet relayed (`RECEIVE_BUFFER` in the kernel, a piece in hand): a sender's bytes are
acknowledged about as fast as they are carried, so it sees the link's pace.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from typing import Any

CAPTURE_BYTES = 64 << 20
RECEIVE_BUFFER = 64 << 10


class ThrottleProxy:
    def __init__(self, upstream_port: int, down_rate: int = 0, up_rate: int = 0) -> None:
        self.upstream_port = upstream_port
        self.down_rate = down_rate
        self.up_rate = up_rate
        self.cut_after: int | None = None
        self.flip_at: int | None = None
        self.pause_after: int | None = None
        self.pause_s = 0.0
        self.cuts = self.flips = self.pauses = 0
        self.connections = 0
        self.down_bytes = 0
        self.sent = bytearray()
        self.capture_bytes = CAPTURE_BYTES
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.AbstractServer | None = None
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self._thread.start()
        ready.wait(10)
        assert self._server is not None
        self.port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        listener = socket.socket()
        # inherited by the accepted sockets: what clients send waits on their side
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
        listener.bind(("127.0.0.1", 0))
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, sock=listener, limit=RECEIVE_BUFFER)
        )
        ready.set()
        self._loop.run_forever()

    def close(self) -> None:
        def stop() -> None:
            if self._server is not None:
                self._server.close()
            for task in asyncio.all_tasks(self._loop):
                task.cancel()
            self._loop.stop()

        self._loop.call_soon_threadsafe(stop)
        self._thread.join(10)

    def captured(self) -> bytes:
        with self._lock:
            return bytes(self.sent)

    # --- relaying -----------------------------------------------------------------------

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.connections += 1
        upstream = socket.socket()
        # ...and the controller's: what it sends waits on its side too, so a controller
        # killed mid-file leaves no more of it here than its own send buffer held.
        upstream.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
        upstream.setblocking(False)
        try:
            await asyncio.get_running_loop().sock_connect(
                upstream, ("127.0.0.1", self.upstream_port)
            )
            server_r, server_w = await asyncio.open_connection(sock=upstream, limit=RECEIVE_BUFFER)
        except OSError:
            upstream.close()
            client_w.close()
            return
        up = asyncio.ensure_future(self._pump(client_r, server_w, down=False))
        down = asyncio.ensure_future(self._pump(server_r, client_w, down=True))
        try:
            await asyncio.wait([up, down], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (up, down):
                task.cancel()
            for writer in (client_w, server_w):
                with contextlib.suppress(Exception):
                    writer.close()

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, down: bool
    ) -> None:
        offset = 0
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while True:
                rate = self.down_rate if down else self.up_rate
                piece = max(1024, rate // 20) if rate else 1 << 16
                data = await reader.read(piece)
                if not data:
                    with contextlib.suppress(OSError):
                        writer.write_eof()
                    return
                if down:
                    data, stop = await self._faults(data, offset)
                else:
                    self._capture(data)
                    stop = False
                offset += len(data)
                if down:
                    self.down_bytes += len(data)
                writer.write(data)
                await writer.drain()
                if stop:
                    writer.transport.abort()  # a reset, as a broken link looks
                    return
                if rate:
                    await asyncio.sleep(len(data) / rate)

    async def _faults(self, data: bytes, offset: int) -> tuple[bytes, bool]:
        """`data` (starting at `offset` of a stream to a client) after the faults."""
        end = offset + len(data)
        flip = self.flip_at
        if flip is not None and offset <= flip < end:
            self.flip_at = None
            self.flips += 1
            changed = bytearray(data)
            changed[flip - offset] ^= 0xFF
            data = bytes(changed)
        pause = self.pause_after
        if pause is not None and offset <= pause < end:
            self.pause_after = None
            self.pauses += 1
            await asyncio.sleep(self.pause_s)
        cut = self.cut_after
        if cut is not None and offset <= cut < end:
            self.cut_after = None
            self.cuts += 1
            return data[: cut - offset], True
        return data, False

    def _capture(self, data: bytes) -> None:
        with self._lock:
            room = self.capture_bytes - len(self.sent)
            if room > 0:
                self.sent += data[:room]

    def __enter__(self) -> ThrottleProxy:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
