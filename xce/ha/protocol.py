"""Replication frames: `ReplMessage` (xce/ha/replication.capnp) on an asyncio stream.

Each message is framed like a WAL record (length, CRC32, payload), so a truncated or bit-
flipped frame is caught before Cap'n Proto sees it. Decoding copies every field out of the
message (pycapnp readers must not outlive `from_bytes`) into a plain `Message`; anything
malformed raises `ProtocolError`, which both sides answer by dropping the connection.
"""

from __future__ import annotations

import asyncio
import zlib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import capnp

from xce.core.errors import XceError
from xce.core.versions import (
    CHECKPOINT_FORMAT,
    RELEASE,
    REPLICATION_PROTOCOL,
    WAL_FORMAT,
    skew_problem,
)
from xce.store.wal.framing import FRAME_HEADER, frame

SCHEMA_PATH = Path(__file__).with_name("replication.capnp")
MAX_MESSAGE = 32 * 1024 * 1024
TRAVERSAL_LIMIT = MAX_MESSAGE // 8 * 2  # in words
KINDS = (
    "hello",
    "welcome",
    "records",
    "ack",
    "heartbeat",
    "snapshotChunk",
    "authFiles",
    "refuse",
    "promote",
    "fileData",
    "fileAck",
    "fileWant",
    "handOver",
)


INCOMPATIBLE = "incompatible: "  # the start of a refusal that no retry will cure


class Incompatible(XceError):
    """The other side's build writes what this one cannot read (or the skew rule forbids
    the pair): a standby that meets it stops following and may not take over."""

    code = "replication_incompatible"


def versions() -> dict[str, Any]:
    """This build's release and formats, as hello and welcome carry them."""
    return {
        "release": RELEASE,
        "walFormat": WAL_FORMAT,
        "checkpointFormat": CHECKPOINT_FORMAT,
        "protocol": REPLICATION_PROTOCOL,
    }


def cannot_follow(primary: dict[str, Any], primary_url: str = "the primary") -> str | None:
    """Why a standby of this build may not follow a primary whose welcome is `primary`
    (formats it cannot read); None when it may. A field of 0 is a build before versions
    were sent: format 1."""
    release = str(primary.get("release") or "before 0.2.0")
    for what, key, ours in (
        ("WAL", "walFormat", WAL_FORMAT),
        ("checkpoint", "checkpointFormat", CHECKPOINT_FORMAT),
    ):
        theirs = int(primary.get(key) or 1)
        if theirs > ours:
            return (
                f"{primary_url} (xce {release}) writes {what} format {theirs}; this standby "
                f"(xce {RELEASE}) reads ≤ {ours}: upgrade this standby before following it"
            )
    return None


def cannot_serve(standby: dict[str, Any], node: str) -> str | None:
    """Why a primary of this build refuses the standby whose hello is `standby`: it cannot
    read the records or checkpoints written here, or the skew rule forbids the pair."""
    release = str(standby.get("release") or "")
    shown = release or "before 0.2.0"
    for what, key, ours in (
        ("WAL", "walFormat", WAL_FORMAT),
        ("checkpoint", "checkpointFormat", CHECKPOINT_FORMAT),
    ):
        theirs = int(standby.get(key) or 1)
        if theirs < ours:
            return (
                f"standby {node} (xce {shown}) reads {what} format ≤ {theirs}; this primary "
                f"(xce {RELEASE}) writes {ours}: upgrade the standby"
            )
    return skew_problem(release, f"standby {node}") if release else None


class ProtocolError(XceError):
    """A replication frame that is truncated, corrupt, too large or not a ReplMessage."""

    code = "replication_protocol"


@cache
def schema() -> Any:
    return capnp.load(str(SCHEMA_PATH), imports=[])


@dataclass
class Message:
    """One decoded frame: `kind` is the union member, `body` its fields as Python values."""

    kind: str
    epoch: int
    body: dict[str, Any] = field(default_factory=dict)


def encode(kind: str, epoch: int, body: Any = None) -> bytes:
    """`body` is a dict of fields, a list of (name, bytes) for authFiles, or text for refuse."""
    if kind not in KINDS:
        raise ValueError(f"unknown replication message {kind!r}")
    msg = schema().ReplMessage.new_message(epoch=epoch)
    if kind == "refuse":
        msg.refuse = str(body)
    elif kind == "authFiles":
        files = msg.init("authFiles", len(body))
        for i, (name, data) in enumerate(body):
            files[i].name = name
            files[i].data = data
    else:
        part = msg.init(kind)
        for key, value in (body or {}).items():
            setattr(part, key, value)
    return frame(msg.to_bytes())


def decode(payload: bytes) -> Message:
    try:
        with schema().ReplMessage.from_bytes(
            payload, traversal_limit_in_words=TRAVERSAL_LIMIT
        ) as msg:
            kind = msg.which()
            epoch = int(msg.epoch)
            if kind == "refuse":
                return Message(kind, epoch, {"text": str(msg.refuse)})
            if kind == "authFiles":
                return Message(
                    kind, epoch, {"files": [(str(f.name), bytes(f.data)) for f in msg.authFiles]}
                )
            part = getattr(msg, kind)
            body = {}
            for name in part.schema.fieldnames:
                value = getattr(part, name)
                if isinstance(value, (bytes, memoryview)):
                    value = bytes(value)
                elif not isinstance(value, (str, int, float, bool)):
                    # List(UInt64) (epoch histories) or List(Text) (wanted files)
                    value = [v if isinstance(v, str) else int(v) for v in value]
                body[name] = value
            return Message(str(kind), epoch, body)
    except ProtocolError:
        raise
    except Exception as exc:  # pycapnp raises KjException and friends
        first = (str(exc).splitlines() or [""])[0][:200]
        raise ProtocolError(f"not a replication message: {first}") from None


async def read_message(reader: asyncio.StreamReader) -> Message:
    """The next message; `ProtocolError` for damage, `EOFError` when the peer closed."""
    try:
        head = await reader.readexactly(FRAME_HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            raise EOFError("the peer closed the replication link") from None
        raise ProtocolError("truncated frame header") from None
    length, crc = FRAME_HEADER.unpack(head)
    if length == 0 or length > MAX_MESSAGE:
        raise ProtocolError(f"frame length {length} is out of range")
    padded = length + (-(FRAME_HEADER.size + length) % 8)
    try:
        data = await reader.readexactly(padded)
    except asyncio.IncompleteReadError:
        raise ProtocolError("truncated frame") from None
    payload = data[:length]
    if zlib.crc32(payload, zlib.crc32(length.to_bytes(4, "little"))) != crc:
        raise ProtocolError("frame checksum mismatch")
    return decode(payload)


async def send(writer: asyncio.StreamWriter, kind: str, epoch: int, body: Any = None) -> None:
    writer.write(encode(kind, epoch, body))
    await writer.drain()
