"""Live output for the controller's tail route (`xce job peek`, the console's tail pane).

While a job runs, the new bytes of its stdout and stderr travel to the controller inside
the worker's heartbeat (xce/controller/tails.py keeps the last of them in memory). Nothing
is sent for output that did not grow, so an idle worker's heartbeats are as before; while
some job's output grows the heartbeat goes out every `PUSH_S` seconds instead of every
heartbeat interval. One request per worker, never one per job.

Bounded per heartbeat: `CHUNK_BYTES` per stream and `BUDGET_BYTES` for the whole worker
(jobs take turns first, so none starves). A writer faster than that is sampled: the worker
sends its latest `CHUNK_BYTES` and the reader sees a gap (`truncated`); the complete files
are uploaded when the job ends, as before. The offsets a chunk was sent from only advance
once the controller has answered, so a lost heartbeat is simply sent again.

A controller that refuses the output (413: the body is over its limit; 400: an older
controller that does not know the field) still gets its heartbeat, sent again without
output: on 413 the budget halves, on 400 the live tail is switched off for this worker.
"""

from __future__ import annotations

import base64
import logging
import os
from dataclasses import dataclass
from typing import Any

from xce.worker.attempt.running import RunningJob

log = logging.getLogger("xce.worker.tail")

CHUNK_BYTES = 64 * 1024
BUDGET_BYTES = 256 * 1024
MIN_BUDGET_BYTES = 4 * 1024
PUSH_S = 2.0


@dataclass(frozen=True)
class Chunk:
    job: RunningJob
    stream: str
    offset: int
    data: bytes


class OutputPusher:
    """Collects the new output of running jobs for one heartbeat (see the module doc)."""

    def __init__(self, chunk_bytes: int = CHUNK_BYTES, budget_bytes: int = BUDGET_BYTES) -> None:
        self.chunk_bytes = chunk_bytes
        self.budget_bytes = budget_bytes
        self.enabled = True
        self._turn = 0

    def collect(self, jobs: list[RunningJob]) -> list[Chunk]:
        """New bytes since what the controller took; reads only (cheap: fstat + pread)."""
        if not self.enabled or not jobs:
            return []
        chunks: list[Chunk] = []
        left = self.budget_bytes
        first = self._turn % len(jobs)
        self._turn += 1
        for job in jobs[first:] + jobs[:first]:
            for stream, fd in list(job.readers.items()):
                if left <= 0:
                    return chunks
                try:
                    size = os.fstat(fd).st_size
                except OSError:
                    continue
                sent = job.sent.get(stream, 0)
                if size < sent:  # the job truncated its own output: carry on from there
                    job.sent[stream] = sent = size
                if size == sent:
                    continue
                offset = max(sent, size - self.chunk_bytes)
                want = min(size - offset, self.chunk_bytes, left)
                try:
                    data = os.pread(fd, want, offset)
                except OSError:
                    continue
                if data:
                    chunks.append(Chunk(job, stream, offset, data))
                    left -= len(data)
        return chunks

    @staticmethod
    def report(chunks: list[Chunk]) -> dict[tuple[str, int], dict[str, Any]]:
        """The `output` field of each running-job report, by job key."""
        out: dict[tuple[str, int], dict[str, Any]] = {}
        for c in chunks:
            out.setdefault(c.job.key, {})[c.stream] = {
                "offset": c.offset,
                "data": base64.b64encode(c.data).decode("ascii"),
            }
        return out

    @staticmethod
    def taken(chunks: list[Chunk]) -> None:
        """The controller has these: later heartbeats send what follows them."""
        for c in chunks:
            end = c.offset + len(c.data)
            if end > c.job.sent.get(c.stream, 0):
                c.job.sent[c.stream] = end

    def refused(self, status: int, message: str) -> None:
        """The controller refused a heartbeat that carried output (see the module doc)."""
        if status == 413 and self.budget_bytes // 2 >= MIN_BUDGET_BYTES:
            self.budget_bytes //= 2
            self.chunk_bytes = min(self.chunk_bytes, self.budget_bytes)
            log.warning(
                "heartbeat with job output too large (%s): sending at most %d bytes "
                "of output per heartbeat",
                message,
                self.budget_bytes,
            )
            return
        self.enabled = False
        log.warning(
            "the controller refused job output in heartbeats (%s %s): the live "
            "tail is off for this worker",
            status,
            message,
        )
