"""An upload whose client stalls (closed by the guard's body timeout) or vanishes mid-body
costs the controller's log one line each, not a traceback; the controller keeps serving and
keeps nothing of the partial body."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import ADMIN_TOKEN, Cluster

GUARD = "\n[guard]\nbody_timeout_s = 1.0\n"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "cluster")
    c.role_sections["controller"] = GUARD
    c.start_controller()
    try:
        yield c
    finally:
        c.stop()


async def _partial_upload(c: Cluster) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", c.port)
    head = (
        "POST /api/v1/uploads HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {ADMIN_TOKEN}\r\nContent-Length: 1000000\r\n\r\n"
    )
    writer.write(head.encode() + b"x" * 4096)
    await writer.drain()
    return reader, writer


async def test_stalled_and_vanished_uploads_log_one_line_each(cluster: Cluster) -> None:
    reader, writer = await _partial_upload(cluster)
    await asyncio.wait_for(reader.read(), 10)  # the guard closes it after 1 s of silence
    writer.close()
    reader, writer = await _partial_upload(cluster)
    await asyncio.sleep(0.3)
    writer.transport.abort()  # the client vanishes mid-body
    await asyncio.sleep(0.5)

    def ended() -> list[str]:
        lines = cluster.log_text().splitlines()
        return [li for li in lines if "POST /api/v1/uploads ended" in li]

    cluster.wait_for(lambda: len(ended()) == 2, 10, "two upload lines")
    text = cluster.log_text()
    assert "Traceback" not in text and "ConnectionResetError" not in text, text
    assert all("body_timeout_s" in li for li in ended())
    assert cluster.get("/api/v1/uploads")["used_bytes"] == 0  # nothing partial kept
