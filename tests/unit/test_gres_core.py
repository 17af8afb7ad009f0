"""Generic resources in the core: parsing, device grants held by active jobs only, licenses
counted cluster-wide, and grants that survive a checkpoint and the WAL."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.store.test_checkpoint import commit, open_store, same
from tests.unit.helpers import T0, new_state, spec, submit
from xce.core import events as ev
from xce.core import gres
from xce.core.errors import Conflict, InvalidRequest
from xce.core.model import QueueRecord
from xce.store.recovery import recover

GPUS = (("gpu", "0,1"),)


def gpu_state():
    state = new_state()
    state.apply(ev.HostRegistered(T0, "h1", 8, 4096, (), GPUS))
    return state


def test_parse_counts_reads_the_forms_users_type() -> None:
    assert gres.parse_counts("gpu:2, fpga:1,nic") == {"gpu": 2, "fpga": 1, "nic": 1}
    assert gres.to_pairs({"gpu": 2, "fpga": 0}) == (("gpu", "2"),)
    for bad in ("GPU:1", "gpu:x", "gpu:-1", "gpu:1,gpu:2", "9gpu"):
        with pytest.raises(InvalidRequest):
            gres.parse_counts(bad)


def test_host_pairs_refuse_duplicate_and_odd_ids() -> None:
    assert gres.host_pairs({"gpu": ["0", "1"]}) == GPUS
    assert gres.host_devices(GPUS) == {"gpu": ("0", "1")}
    with pytest.raises(InvalidRequest, match="twice"):
        gres.host_pairs({"gpu": ["0", "0"]})
    with pytest.raises(InvalidRequest, match="not valid"):
        gres.host_pairs({"gpu": ["a b"]})
    # a trailing newline (which `$` lets through) reaches CUDA_VISIBLE_DEVICES and paths
    for odd in ("0\n", "0\x00", "0,1"):
        with pytest.raises(InvalidRequest, match="not valid"):
            gres.host_pairs({"gpu": [odd]})
    with pytest.raises(InvalidRequest, match="not valid"):
        gres.host_pairs({"gpu\n": ["0"]})


def test_granted_devices_are_held_while_active_and_never_twice() -> None:
    state = gpu_state()
    one = submit(state, gres=(("gpu", "1"),))
    two = submit(state, gres=(("gpu", "1"),))
    state.apply(ev.JobStarted(T0, one, "h1", ("gpu:0",)))
    assert state.host_load["h1"].devices == {"gpu:0"}
    assert state.jobs[one].devices == ("gpu:0",)
    with pytest.raises(Conflict, match="in use"):
        state.apply(ev.JobStarted(T0, two, "h1", ("gpu:0",)))
    with pytest.raises(InvalidRequest, match="no device"):
        state.apply(ev.JobStarted(T0, two, "h1", ("gpu:7",)))
    assert state.jobs[two].host is None  # a refused event changed nothing
    state.apply(ev.JobStarted(T0, two, "h1", ("gpu:1",)))
    assert state.host_load["h1"].devices == {"gpu:0", "gpu:1"}
    state.apply(ev.JobFinished(T0 + 1, one, 0, 0))
    assert state.host_load["h1"].devices == {"gpu:1"}
    assert state.jobs[one].devices == ("gpu:0",)  # shown after the end too


def test_licenses_are_counted_across_hosts() -> None:
    state = new_state(hosts={"h1": (4, 100), "h2": (4, 100)})
    a = submit(state, licenses=(("matlab", "2"),))
    b = submit(state, licenses=(("matlab", "1"),))
    state.apply(ev.JobStarted(T0, a, "h1"))
    state.apply(ev.JobStarted(T0, b, "h2"))
    assert state.licenses_in_use() == {"matlab": 3}
    state.apply(ev.JobFinished(T0, a, 0, 0))
    assert state.licenses_in_use() == {"matlab": 1}


async def test_grants_survive_a_checkpoint_and_the_wal(tmp_path: Path) -> None:
    store, state = await open_store(tmp_path)
    await commit(
        store,
        state,
        [
            ev.QueueCreated(0, QueueRecord("normal")),
            ev.HostRegistered(0, "h1", 8, 4096, (), GPUS),
        ],
    )
    job = spec(gres=(("gpu", "1"),), licenses=(("matlab", "1"),))
    await commit(
        store, state, [ev.JobSubmitted(1, 1, job), ev.JobStarted(2, "1", "h1", ("gpu:1",))]
    )
    await store.checkpoint(state, now=10.0)
    await commit(
        store, state, [ev.JobSubmitted(3, 2, job), ev.JobStarted(4, "2", "h1", ("gpu:0",))]
    )
    await store.writer.close()
    got = recover(tmp_path)
    same(got.state, state)
    assert got.state.host_load["h1"].devices == {"gpu:0", "gpu:1"}
    assert got.state.hosts["h1"].gres == GPUS
    assert got.state.licenses_in_use() == {"matlab": 2}


def test_accounting_records_the_gpu_count() -> None:
    from xce.accounting.record import build

    state = gpu_state()
    job = submit(state, gres=(("gpu", "2"),))
    state.apply(ev.JobStarted(T0, job, "h1", ("gpu:0", "gpu:1")))
    state.apply(ev.JobFinished(T0 + 5, job, 0, 0))
    assert build(state.jobs[job], "DONE", T0 + 5, "", 1).req_gpus == 2
