"""A job's files leave the standbys with it: after a kill before the job started (its
inputs) and after retention's purge (the whole job), as drops on the real replication link;
and a primary never takes back from a standby the inputs a kill deleted."""

from __future__ import annotations

from pathlib import Path

from tests.ha.test_file_replication import chunks, standby, submit_with_input, with_files
from tests.ha.test_replication import SETUP, Primary, follow, stop, until
from xce.core import events as ev
from xce.store.replicated_names import output_name


async def test_kills_and_purges_delete_the_files_on_the_standby_too(tmp_path: Path) -> None:
    p = with_files(Primary(tmp_path, mode="sync"))
    await p.start()
    await p.commit(SETUP)
    f = standby(tmp_path)
    link = await follow(f, p)
    try:
        await until(lambda: any(s.in_sync for s in p.source.sessions.values()))
        held = await submit_with_input(p, b"never read", hold=True)
        ran = await submit_with_input(p, b"read once", hold=False)
        await p.service.commit([ev.JobStarted(4.0, ran, "h1")])
        await p.service.files.save_output(int(ran), ran, "out", chunks(b"result"), owner="alice")
        await p.service.files_replicated(
            p.service.ship_files([(output_name(int(ran), ran, "out"), "put")])
        )
        await p.service.commit([ev.JobFinished(5.0, ran, 0, 0, outputs=("out",))])
        jobs = f.state_dir / "files" / "jobs"
        assert (jobs / held / "inputs" / "in" / "data.csv").read_bytes() == b"never read"
        assert (jobs / ran / "outputs" / ran / "out").read_bytes() == b"result"
        assert p.service.files.usage("alice") == len(b"never read" + b"read once" + b"result")

        await p.service.control(held, "kill")
        await until(lambda: not (jobs / held / "inputs").exists())
        assert not (p.dir / "files" / "jobs" / held / "inputs").exists()
        assert (jobs / ran / "inputs" / "in" / "data.csv").is_file()  # it ran: kept

        assert await p.service.purge_finished(p.service.clock() + 1) == 2
        await until(lambda: not (jobs / ran).exists() and not (jobs / held).exists())
        assert sorted((p.dir / "files" / "jobs").iterdir()) == []
        assert p.service.files.usage("alice") == 0
    finally:
        await stop(link)
        await f.close()
        await p.close()


async def test_a_primary_takes_back_no_inputs_a_kill_deleted(tmp_path: Path) -> None:
    p = with_files(Primary(tmp_path))
    await p.start()
    await p.commit(SETUP)
    f = standby(tmp_path)
    link = await follow(f, p)
    copy = f.state_dir / "files" / "jobs"
    try:
        held = await submit_with_input(p, b"never read", hold=True)
        # Files travel ahead of the records that name them: wait for both.
        await until(
            lambda: held in f.state.jobs and (copy / held / "inputs" / "in" / "data.csv").is_file()
        )
    finally:
        await stop(link)
    try:
        # The standby is away when the job is killed: it keeps its copy of the inputs ...
        await p.service.control(held, "kill")
        await p.service.job_files.settled()
        link = await follow(f, p)
        await until(lambda: f.state.job(held).state.value == "EXIT")
        await until(lambda: all(s.in_sync for s in p.source.sessions.values()))
        # ... and the primary, whose records no longer need them, does not take them back.
        assert not (p.dir / "files" / "jobs" / held / "inputs").exists()
    finally:
        await stop(link)
        await f.close()
        await p.close()
