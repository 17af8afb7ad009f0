"""Live output of running jobs (LSF's `bpeek`): the last bytes of stdout and stderr, in memory.

Workers send the new bytes of each running job's stdout and stderr with their heartbeats
(xce/worker/agent/tail.py): `{"stream": {"offset": absolute byte offset, "data": base64}}`. This
module keeps, per job attempt and stream, the last `KEEP_BYTES` with their absolute offsets,
so a reader can ask "everything after byte N" and learn when bytes before it were dropped.

Promises and limits:
- Ephemeral by design: nothing here is in the WAL, replicated or checkpointed. A controller
  restart or failover starts with empty buffers; the workers carry on from the offsets they
  had sent, so the first chunk after it shows as a gap (readers see `truncated`).
- A buffer is dropped as soon as its job stops being active (finished, killed, requeued,
  host lost) or starts another attempt; the final outputs are the files the worker uploads
  when the job ends, served by the same route.
- Memory is bounded: `KEEP_BYTES` per stream and `TOTAL_BYTES` for all jobs together; past
  the total, the buffers written least recently go first.
- Chunks are idempotent: a chunk resent after a lost answer overlaps what is held and only
  its new part is kept; a chunk starting past the end (the worker skipped ahead of a fast
  writer, or this controller restarted) starts the buffer again at its offset.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from xce.core import events as ev
from xce.core.state import ClusterState

log = logging.getLogger("xce.controller.tails")

STREAMS = ("stdout", "stderr")
KEEP_BYTES = 256 * 1024
TOTAL_BYTES = 256 * 1024 * 1024


@dataclass
class StreamTail:
    """The last bytes of one stream: `data` holds bytes [start, start + len(data))."""

    start: int = 0
    data: bytearray = field(default_factory=bytearray)

    @property
    def end(self) -> int:
        return self.start + len(self.data)


@dataclass
class JobTail:
    attempt: int
    streams: dict[str, StreamTail] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return sum(len(s.data) for s in self.streams.values())


class OutputTails:
    """The in-memory tails of every active job (see the module docstring)."""

    def __init__(
        self, state: ClusterState, keep_bytes: int = KEEP_BYTES, total_bytes: int = TOTAL_BYTES
    ) -> None:
        self.state = state
        self.keep_bytes = keep_bytes
        self.total_bytes = total_bytes
        self.jobs: OrderedDict[str, JobTail] = OrderedDict()  # least recently written first
        self.size = 0

    # --- writing ------------------------------------------------------------------------

    def accept(self, job_id: str, attempt: int, stream: str, offset: int, data: bytes) -> None:
        """Take one chunk; the caller has checked that this attempt is running there."""
        if stream not in STREAMS or offset < 0 or not data:
            return
        tail = self.jobs.get(job_id)
        if tail is None or tail.attempt != attempt:
            if tail is not None:
                self._drop(job_id)
            tail = self.jobs[job_id] = JobTail(attempt)
        self.jobs.move_to_end(job_id)
        buf = tail.streams.setdefault(stream, StreamTail(offset))
        before = len(buf.data)
        if offset > buf.end:
            # A gap (the worker skipped ahead of a fast writer, or this controller is new):
            # hold this chunk alone.
            buf.start, buf.data = offset, bytearray(data)
        elif offset + len(data) > buf.end:
            buf.data += data[buf.end - offset :]
        # else: a resent chunk that holds nothing new
        excess = len(buf.data) - self.keep_bytes
        if excess > 0:
            del buf.data[:excess]
            buf.start += excess
        self.size += len(buf.data) - before
        while self.size > self.total_bytes and len(self.jobs) > 1:
            self._drop(next(iter(self.jobs)))

    def accept_reports(
        self, host: str, items: Iterable[dict[str, Any]], owns: Callable[[str, str, int], object]
    ) -> int:
        """The `output` parts of a heartbeat's running-job reports; returns bytes taken.

        Reports for attempts the host does not run now are ignored, as are malformed chunks
        (a heartbeat is never refused for its output: that would cost the host its jobs).
        """
        taken = 0
        for item in items:
            output = item.get("output")
            if not output or owns(host, item["job_id"], item["attempt"]) is None:
                continue
            for stream, chunk in output.items():
                try:
                    data = base64.b64decode(chunk["data"], validate=True)
                except (binascii.Error, ValueError, KeyError, TypeError):
                    log.warning(
                        "host %s sent a malformed %s chunk for job %s: ignored",
                        host,
                        stream,
                        item["job_id"],
                    )
                    continue
                self.accept(item["job_id"], item["attempt"], stream, int(chunk["offset"]), data)
                taken += len(data)
        return taken

    # --- reading ------------------------------------------------------------------------

    def snapshot(self, job_id: str, attempt: int, stream: str) -> tuple[int, bytes]:
        """(absolute offset of the first byte held, the bytes held) for one stream."""
        tail = self.jobs.get(job_id)
        if tail is None or tail.attempt != attempt:
            return 0, b""
        buf = tail.streams.get(stream)
        if buf is None:
            return 0, b""
        return buf.start, bytes(buf.data)

    # --- forgetting ---------------------------------------------------------------------

    def _drop(self, job_id: str) -> None:
        tail = self.jobs.pop(job_id, None)
        if tail is not None:
            self.size -= tail.size

    def observe(self, event: ev.Event) -> None:
        """A committed-event listener: drop the tail of a job that is no longer active."""
        if isinstance(event, ev.JobUsageReported):
            return
        job_id = getattr(event, "job_id", None)
        if job_id is None or job_id not in self.jobs:
            return
        job = self.state.jobs.get(job_id)
        if job is None or not job.state.active or job.attempt != self.jobs[job_id].attempt:
            self._drop(job_id)
