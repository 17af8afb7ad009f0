"""Deleting a job's files on the controller when its records are done with them.

Nothing else deletes a job's inputs and outputs, and they count on the owner's quota
(xce/store/job_bytes.py), so they go:

- with the job: the retention event `JobsPurged` drops the record, and the job's whole
  directory (inputs and every task's outputs) goes after it;
- when it is killed before it ever started (`JobKilled`, `ArrayCancelled`): its inputs,
  which nothing will read (xce/core/file_owners.py says when; such a job cannot be
  requeued).

The events are the durable change; the files follow them once the batch is durable (a
`committed` hook), on this primary's disk and, as a `drop` of the same logical names, on
every connected standby (the replication link's file operations, xce/ha/files.py, which
send it after the records). A crash between the commit and the deletion, or a standby that
was not connected, leaves files no record needs: each primary term starts by deleting
those (`adopt`), so the figures after a restart are those from before it.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Future
from typing import TYPE_CHECKING

from xce.core import events as ev
from xce.core.file_owners import inputs_spent, owners
from xce.core.state_base import parse_job_id
from xce.store.replicated_names import FILES

if TYPE_CHECKING:
    from xce.controller.service import ControllerService

log = logging.getLogger("xce.controller.job_files")


def job_dir_name(number: int, inputs_only: bool = False) -> str:
    """The logical name of a job's directory (or its inputs) on the replication link."""
    return f"{FILES}jobs/{number}" + ("/inputs" if inputs_only else "")


class JobFileDeletion:
    """Deletes job files after the events that end their use; see the module docstring."""

    def __init__(self, service: ControllerService) -> None:
        self.service = service
        self.pending: set[asyncio.Future[None]] = set()  # deletions still running

    def committed(self, batch: list[ev.Event]) -> None:
        """A durable batch: delete what its purges and kills leave unused."""
        whole: list[int] = []
        killed: set[int] = set()
        for event in batch:
            if isinstance(event, ev.JobsPurged):
                whole.extend(parse_job_id(ident)[0] for ident in event.ids)
            elif isinstance(event, ev.JobKilled):
                killed.add(parse_job_id(event.job_id)[0])
            elif isinstance(event, ev.ArrayCancelled):
                killed.add(event.number)
        state = self.service.state
        inputs = sorted(n for n in killed if inputs_spent(state, n))
        if not whole and not inputs:
            return
        files = self.service.files
        for number in whole:
            self._track(files.delete_job_files(number))
        for number in inputs:
            self._track(files.delete_job_files(number, inputs_only=True))
        self.service.ship_files(
            [(job_dir_name(n), "drop") for n in whole]
            + [(job_dir_name(n, inputs_only=True), "drop") for n in inputs]
        )

    def abandon(self, number: int) -> None:
        """A submission whose inputs were attached was refused by its commit: no record
        will ever hold them (the next submission may take its number)."""
        self._track(self.service.files.delete_job_files(number))
        self.service.ship_files([(job_dir_name(number), "drop")])

    def _track(self, deletion: Future[None]) -> None:
        done = asyncio.wrap_future(deletion)
        self.pending.add(done)
        done.add_done_callback(self._finished)

    def _finished(self, done: asyncio.Future[None]) -> None:
        self.pending.discard(done)
        if not done.cancelled() and done.exception() is not None:
            log.error("deleting job files failed: %s", done.exception())

    async def settled(self) -> None:
        """Until the deletions started so far have run (tests, a clean stop)."""
        if self.pending:
            await asyncio.gather(*list(self.pending), return_exceptions=True)

    async def adopt(self) -> None:
        """At a primary term's start: count the job directories the records hold on their
        owners and delete the rest (xce/store/files.py `adopt`)."""
        held, spent = owners(self.service.state)
        removed = await self.service.files.adopt(held, spent)
        if removed:
            log.info("deleted the files of %d job(s) no record holds any more", len(removed))
