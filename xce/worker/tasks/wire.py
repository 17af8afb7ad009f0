"""The task service's wire format, shared by the worker and `xce launch`.

Standard library only: `xce launch` runs inside jobs and must start fast. A connection
carries one task, and everything on it is a frame: `channel:u8 | length:u32` (network order)
and `length` bytes.

1. server -> client CHALLENGE: `{"v": 2, "nonce": hex}`, a fresh random nonce per connection;
2. client -> server HELLO (at most MAX_HELLO bytes): `{"v", "job_id", "attempt", "host",
   "proof"}`, where `proof` is `proof()`: HMAC-SHA256 keyed with the attempt's launch
   credential over the nonce and what the client asks for. The credential itself never
   crosses the wire, so one seen on the network is worth nothing on another connection;
3. server -> client READY (empty) once the proof is the attempt's, else one EXIT frame;
4. client -> server REQUEST (at most MAX_REQUEST bytes): `{"argv", "env", "task_id",
   "local_task_id"}`;
5. then client -> server STDIN data, an empty STDIN frame is end of input, and
   server -> client STDOUT, STDERR, and one EXIT frame last, a JSON object
   `{"exit_code": int|null, "signal": int|null, "error": str}` (error: refused or not started).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
from typing import Any

STDIN, STDOUT, STDERR, EXIT = 0, 1, 2, 3
CHALLENGE, HELLO, READY, REQUEST = 4, 5, 6, 7
HEADER = struct.Struct("!BI")
MAX_FRAME = 1 << 20
MAX_REQUEST = 512 * 1024
# A hello is a job id, an attempt, a host name and a proof: a few hundred bytes.
MAX_HELLO = 2048
MAX_CHALLENGE = 256
NONCE_BYTES = 32
VERSION = 2
# What a proof is for, so an HMAC of the same key made for anything else never passes as one.
PROOF_CONTEXT = b"xce task service hello v2\0"


def frame(channel: int, data: bytes) -> bytes:
    return HEADER.pack(channel, len(data)) + data


def exit_frame(exit_code: int | None, sig: int | None = None, error: str = "") -> bytes:
    body = {"exit_code": exit_code, "signal": sig, "error": error}
    return frame(EXIT, json.dumps(body).encode())


def challenge_frame(nonce: bytes) -> bytes:
    return frame(CHALLENGE, json.dumps({"v": VERSION, "nonce": nonce.hex()}).encode())


def read_challenge(data: bytes) -> bytes:
    """The nonce of a CHALLENGE frame's body; ValueError if it is not one of this version."""
    body = json.loads(data)
    if not isinstance(body, dict) or body.get("v") != VERSION:
        raise ValueError(f"the task service does not speak version {VERSION}")
    nonce = bytes.fromhex(str(body.get("nonce", "")))
    if len(nonce) != NONCE_BYTES:
        raise ValueError("the task service sent a bad challenge")
    return nonce


def proof(credential: str, nonce: bytes, job_id: str, attempt: int, host: str) -> str:
    """The answer to a challenge (hex): HMAC-SHA256(credential, nonce || context), the context
    naming the attempt and the host asked, so a proof is good for one connection's nonce and
    one host's attempt only."""
    context = PROOF_CONTEXT + f"{job_id}\0{attempt}\0{host}".encode()
    return hmac.new(credential.encode(), nonce + context, hashlib.sha256).hexdigest()


def hello_frame(credential: str, nonce: bytes, job_id: str, attempt: int, host: str) -> bytes:
    body = {
        "v": VERSION,
        "job_id": job_id,
        "attempt": attempt,
        "host": host,
        "proof": proof(credential, nonce, job_id, attempt, host),
    }
    return frame(HELLO, json.dumps(body, separators=(",", ":")).encode())


def request_frame(request: dict[str, Any]) -> bytes:
    return frame(REQUEST, json.dumps(request, separators=(",", ":")).encode())
