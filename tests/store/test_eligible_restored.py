"""Eligible times across an upgrade: a checkpoint of a build before they were kept has job
and array rows without the field. Their pending jobs have been eligible since submission
(or their begin time), not since whenever they start after the upgrade."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tests.store.test_checkpoint_format import write_file
from xce.core import events as ev
from xce.core.arrayspec import parse_array_spec
from xce.core.model import JobRecord, JobSpec, QueueRecord
from xce.core.state import ClusterState
from xce.store.checkpoint import checkpoint_name
from xce.store.recovery import checkpoint_dir, recover
from xce.wire import packing
from xce.wire.plain import _plans, pack_records, to_plain

SPEC = JobSpec(user="u", queue="normal", command="true")


def without_eligible_times(records: list[Any]) -> bytes:
    """Pack rows as a build before `eligible_time` was appended wrote them: cut there."""
    if not records or not isinstance(records[0], JobRecord):
        if records and hasattr(records[0], "eligible_time"):  # arrays
            cut = [f.py for f in _plans(type(records[0]))].index("eligible_time")
            return packing.pack(("records", None, tuple(to_plain(r)[:cut] for r in records)))
        return pack_records(records)
    cut = [f.py for f in _plans(JobRecord)].index("eligible_time")
    specs: dict[Any, int] = {}
    for job in records:
        specs.setdefault(job.spec, len(specs))
    table = [to_plain(spec) for spec in specs]
    rows = tuple(to_plain(j, {"spec": specs[j.spec]})[:cut] for j in records)
    return packing.pack(("jobs", tuple(table), rows))


def test_pending_jobs_of_an_older_checkpoint_keep_their_wait(tmp_path: Path) -> None:
    state = ClusterState()
    for e in [
        ev.QueueCreated(1.0, QueueRecord("normal")),
        ev.JobSubmitted(5.0, 1, SPEC),
        ev.JobSubmitted(6.0, 2, dataclasses.replace(SPEC, begin_time=100.0)),
        ev.ArraySubmitted(8.0, 3, SPEC, parse_array_spec("1-3").indices, None),
    ]:
        state.apply(e)
    path = checkpoint_dir(tmp_path) / checkpoint_name(5)
    path.parent.mkdir(parents=True, mode=0o700)
    write_file(path, state, 3, without_eligible_times)
    got = recover(tmp_path).state
    assert got.jobs["1"].eligible_time == 5.0
    assert got.jobs["2"].eligible_time == 100.0  # its begin time
    assert got.arrays[3].eligible_time == 8.0
    # and a start keeps it (it no longer becomes the start time)
    got.apply(ev.HostRegistered(9.0, "h1", 8, 1000))
    got.apply(ev.JobStarted(50.0, "1", "h1"))
    assert got.jobs["1"].eligible_time == 5.0
