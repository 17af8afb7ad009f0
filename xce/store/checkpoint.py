"""Checkpoints: the whole state at a WAL position, written without fork() or a long pause.

Taking one copies the four record maps on the event loop (a shallow copy: records are
immutable, so this is application-level copy-on-write and costs milliseconds per 100k jobs);
encoding and writing run in a thread. A file is written to a temporary name, fsynced,
renamed, and the directory fsynced (a rename is durable only then). The newest two are kept:
if the newest fails to verify, recovery falls back to the older one, which is why WAL
segments are deleted only once they are wholly before the *older* kept checkpoint.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xce.core.model import ArrayRecord, HostRecord, JobRecord, QueueRecord, ReservationRecord
from xce.core.state import ClusterState
from xce.core.versions import CHECKPOINT_FORMAT, NewerFormat
from xce.store.wal.framing import CorruptRecord, frame, read_frames
from xce.store.wal.writer import fsync_dir
from xce.wire.codec import WireError, decode_chunk, encode_header, encode_packed
from xce.wire.plain import pack_records

log = logging.getLogger("xce.checkpoint")
# The formats are listed with the others in xce/core/versions.py. Every one up to ours is
# read; a newer one is refused by its header (`NewerFormat`) before any chunk is decoded,
# and recovery stops there rather than falling back to an older checkpoint as if the newer
# one were damaged.
FORMAT_VERSION = CHECKPOINT_FORMAT
READABLE_FORMATS = tuple(range(1, CHECKPOINT_FORMAT + 1))
CHUNK = 20_000
MAX_CHUNK_BYTES = 16 * 1024 * 1024
NAME = re.compile(r"^checkpoint-(\d{20})\.ckpt$")


class CheckpointError(Exception):
    """A checkpoint file that does not verify."""


@dataclass(frozen=True)
class StateCopy:
    """A consistent shallow copy of the state at WAL position `seq`."""

    seq: int
    epoch: int
    next_number: int
    jobs: list[JobRecord]
    arrays: list[ArrayRecord]
    queues: list[QueueRecord]
    hosts: list[HostRecord]
    number_ceiling: int = 0
    # Advance reservations: a packed chunk of kind "reservations" (none written when empty,
    # so a checkpoint without reservations reads as before).
    reservations: list[ReservationRecord] = dataclasses.field(default_factory=list)


def copy_state(state: ClusterState, seq: int, epoch: int = 0) -> StateCopy:
    """Runs on the event loop: list() of each map is the whole pause."""
    return StateCopy(
        seq,
        epoch,
        state.next_number,
        list(state.jobs.values()),
        list(state.arrays.values()),
        list(state.queues.values()),
        list(state.hosts.values()),
        state.number_ceiling,
        list(state.reservations.values()),
    )


def checkpoint_name(seq: int) -> str:
    return f"checkpoint-{seq:020d}.ckpt"


def list_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """(seq, path), newest first."""
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := NAME.match(p.name))]
    return sorted(found, reverse=True)


def write_checkpoint(directory: Path, copy: StateCopy, keep: int = 2) -> Path:
    """Runs in a thread: encode, write, fsync, rename, fsync the directory, prune."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    final = directory / checkpoint_name(copy.seq)
    # A unique temporary name: two writers (a cancelled one still in its thread, and the
    # shutdown checkpoint) must never share a file.
    tmp = final.with_name(f".{final.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb", buffering=1 << 20) as out:
            out.write(
                frame(
                    encode_header(
                        seq=copy.seq,
                        epoch=copy.epoch,
                        nextNumber=copy.next_number,
                        createdAt=time.time(),
                        formatVersion=FORMAT_VERSION,
                        jobs=len(copy.jobs),
                        arrays=len(copy.arrays),
                        numberCeiling=copy.number_ceiling,
                    )
                )
            )
            for kind, records in (
                ("queues", copy.queues),
                ("hosts", copy.hosts),
                ("reservations", copy.reservations),
                ("arrays", copy.arrays),
                ("jobs", copy.jobs),
            ):
                for start in range(0, len(records), CHUNK):
                    for data in _packed(records[start : start + CHUNK]):
                        out.write(frame(encode_packed(kind, data)))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, final)
        fsync_dir(directory)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    for _, old in list_checkpoints(directory)[keep:]:
        old.unlink(missing_ok=True)
    return final


def _packed(records: list[Any]) -> list[bytes]:
    """Pack records, halving the chunk until each piece is comfortably below frame limits."""
    data = pack_records(records)
    if len(data) <= MAX_CHUNK_BYTES or len(records) == 1:
        return [data]
    half = len(records) // 2
    return _packed(records[:half]) + _packed(records[half:])


def read_checkpoint(path: Path) -> tuple[dict[str, Any], ClusterState]:
    """Load and verify one checkpoint; raises `CheckpointError` if anything is off."""
    parts: dict[str, list[Any]] = {
        "jobs": [],
        "arrays": [],
        "queues": [],
        "hosts": [],
        "reservations": [],
    }
    header: dict[str, Any] | None = None
    try:
        for fr in read_frames(path.read_bytes()):
            kind, value = decode_chunk(fr.payload)
            if kind == "header":
                header = value
                if int(value["formatVersion"]) > FORMAT_VERSION:
                    raise NewerFormat(
                        f"checkpoint {path.name}", int(value["formatVersion"]), FORMAT_VERSION
                    )
            else:
                parts[kind].extend(value)
    except (CorruptRecord, WireError, OSError) as exc:
        raise CheckpointError(f"{path.name}: {exc}") from None
    if header is None:
        raise CheckpointError(f"{path.name}: no header")
    if header["formatVersion"] not in READABLE_FORMATS:
        raise CheckpointError(f"{path.name}: format {header['formatVersion']} is unknown")
    if header["jobs"] != len(parts["jobs"]) or header["arrays"] != len(parts["arrays"]):
        raise CheckpointError(f"{path.name}: incomplete (record counts do not match header)")
    state = ClusterState.restore(
        parts["jobs"],
        parts["arrays"],
        parts["queues"],
        parts["hosts"],
        header["nextNumber"],
        header.get("numberCeiling", 0),
        parts["reservations"],
    )
    return header, state
