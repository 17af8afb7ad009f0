"""A Server-Sent Events reader: bytes in, `StreamEvent`s out (the subset XCE sends).

Handles `id:`, `event:`, multi-line `data:` and `:` comments; ignores `retry:`. Pure apart
from reading the stream, so it is tested on plain byte lines.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One message: `kind` (job, array, host, queue, hello, resync), its id and JSON data."""

    id: str
    kind: str
    data: dict[str, Any]


async def read_events(lines: AsyncIterable[bytes]) -> AsyncIterator[StreamEvent]:
    event_id, kind = "", "message"
    data: list[str] = []
    async for raw in lines:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if data:
                yield StreamEvent(event_id, kind, json.loads("\n".join(data)))
            kind, data = "message", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "id":
            event_id = value
        elif field == "event":
            kind = value
        elif field == "data":
            data.append(value)
