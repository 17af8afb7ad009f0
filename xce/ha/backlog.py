"""Records for standbys: the newest from memory (a ring of the newest `RING_BYTES` the WAL
writer made durable), older ones read back from WAL segments.

Records leave only once durable here, in the exact bytes the WAL holds. A standby that is
behind the ring catches up from the segments in batches of `BATCH_BYTES`, each resuming where
the previous one stopped in the same segment.
"""

from __future__ import annotations

import asyncio
from collections import deque

from xce.ha.sessions import DiskCursor
from xce.store.durable import DurableLog
from xce.store.recovery import wal_dir
from xce.store.wal.framing import CorruptRecord, read_frames
from xce.store.wal.reader import list_segments, records_start

BATCH_BYTES = 1024 * 1024
RING_BYTES = 64 * 1024 * 1024


class Backlog:
    """The records a standby link sends, from memory or from disk."""

    def __init__(self, store: DurableLog) -> None:
        self.store = store
        self.ring: deque[tuple[int, bytes]] = deque()
        self._ring_bytes = 0

    @property
    def durable_seq(self) -> int:
        return self.store.writer.durable_seq

    def add(self, batch: list[tuple[int, bytes]]) -> None:
        """Keep a group the WAL writer made durable (the newest `RING_BYTES`, contiguous)."""
        for seq, data in batch:
            if self.ring and self.ring[-1][0] != seq - 1:
                self.ring.clear()
                self._ring_bytes = 0
            self.ring.append((seq, data))
            self._ring_bytes += len(data)
        while self._ring_bytes > RING_BYTES and len(self.ring) > 1:
            self._ring_bytes -= len(self.ring.popleft()[1])

    def from_ring(self, cursor: int) -> list[tuple[int, bytes]] | None:
        if not self.ring or self.ring[0][0] > cursor:
            return None
        start = cursor - self.ring[0][0]
        out, size = [], 0
        for i in range(start, len(self.ring)):
            seq, data = self.ring[i]
            if seq > self.durable_seq or size >= BATCH_BYTES:
                break
            out.append((seq, data))
            size += len(data)
        return out

    def first_on_disk(self) -> int:
        segments = list_segments(wal_dir(self.store.state_dir))
        return segments[0][0] if segments else self.durable_seq + 1

    def from_disk(self, cursor: int, last: int, at: DiskCursor) -> list[tuple[int, bytes]]:
        """Runs in a thread: records `cursor`.. (at most `last`) read back from segments,
        resuming from `at` where the previous batch stopped in the same segment. What was
        read of the segment being written stays valid (records are only appended); when
        that copy runs out before `last`, the file is read again from where it stopped."""
        segments = list_segments(wal_dir(self.store.state_dir))
        out: list[tuple[int, bytes]] = []
        size = 0
        resume = (at.path, at.data, at.seq, at.offset)
        at.path, at.data = None, b""
        for i, (first, path) in enumerate(segments):
            following = segments[i + 1][0] if i + 1 < len(segments) else None
            if following is not None and following <= cursor:
                continue
            fresh = not (resume[0] == path and resume[2] == cursor)
            if fresh:
                data, seq = path.read_bytes(), first
                offset = records_start(data, path)  # after the segment's header
            else:
                _, data, seq, offset = resume
            while True:
                try:
                    for fr in read_frames(data, offset):
                        if seq > last or size >= BATCH_BYTES:
                            at.path, at.data, at.seq, at.offset = path, data, seq, fr.offset
                            return out
                        if seq >= cursor:
                            chunk = data[fr.offset : fr.end]
                            out.append((seq, chunk))
                            size += len(chunk)
                        seq += 1
                        offset = fr.end
                except CorruptRecord:
                    if fresh or following is not None:
                        return out  # the tail being written right now
                if fresh or following is not None:
                    break
                data, fresh = path.read_bytes(), True  # an older copy of the active segment
        return out

    async def record_crc(self, seq: int) -> int | None:
        """The CRC of our record `seq`, from memory or the WAL segments."""
        from xce.store.wal.framing import FRAME_HEADER

        found = self.from_ring(seq)
        if not found or found[0][0] != seq:
            if seq < self.first_on_disk():
                return None
            found = await asyncio.get_running_loop().run_in_executor(
                None, self.from_disk, seq, seq, DiskCursor()
            )
        if not found or found[0][0] != seq:
            return None
        return int(FRAME_HEADER.unpack_from(found[0][1], 0)[1])
