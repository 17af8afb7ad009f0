"""The task service's wire format, shared by the worker and `xce launch`.

Standard library only: `xce launch` runs inside jobs and must start fast. A connection
carries one task. The client sends one JSON line (the request, at most MAX_REQUEST bytes),
then frames; the server answers with frames only. A frame is `channel:u8 | length:u32`
(network order) and `length` bytes. Client -> server: STDIN data, an empty STDIN frame is
end of input. Server -> client: STDOUT, STDERR, and one EXIT frame last, a JSON object
`{"exit_code": int|null, "signal": int|null, "error": str}` (error: refused or not started).
"""

from __future__ import annotations

import json
import struct
from typing import Any

STDIN, STDOUT, STDERR, EXIT = 0, 1, 2, 3
HEADER = struct.Struct("!BI")
MAX_FRAME = 1 << 20
MAX_REQUEST = 512 * 1024
VERSION = 1


def frame(channel: int, data: bytes) -> bytes:
    return HEADER.pack(channel, len(data)) + data


def exit_frame(exit_code: int | None, sig: int | None = None, error: str = "") -> bytes:
    body = {"exit_code": exit_code, "signal": sig, "error": error}
    return frame(EXIT, json.dumps(body).encode())


def request_line(request: dict[str, Any]) -> bytes:
    return json.dumps({"v": VERSION, **request}, separators=(",", ":")).encode() + b"\n"
