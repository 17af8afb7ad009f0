"""A multi-host job whose `span[ptile=N]` no set of hosts can meet is refused with what is
wrong with the tiles (the hosts are too small or too few), not with a slot total that
would seem to suffice (an API review's finding)."""

from __future__ import annotations

from tests.unit.helpers import T0, new_state, submit
from xce.core.model import HostRecord, QueueRecord
from xce.sched import snapshot_of
from xce.sched.admission.multihost import multi_host_refusal
from xce.sched.expr import parse_requirement
from xce.sched.passes.pipeline import plan

QUEUE = QueueRecord("normal")


def _refusal(slots: int, resources: str, sizes: list[int], memory_mb: int = 0) -> str | None:
    hosts = [HostRecord(f"n{i}", size, 64000) for i, size in enumerate(sizes)]
    req = parse_requirement(resources)
    return multi_host_refusal(req, slots, memory_mb, False, 0, QUEUE, hosts)


def test_no_host_as_big_as_the_tile_says_so() -> None:
    why = _refusal(16, "span[ptile=8]", [4, 4, 4, 4])
    assert why == (
        "no set of hosts of queue 'normal' can ever hold this job: span[ptile=8] puts 8 "
        "slots on each host and no host has 8 (the largest has 4)"
    )


def test_too_few_hosts_of_the_tile_size_says_how_many_it_needs() -> None:
    why = _refusal(24, "span[ptile=8]", [8, 4, 4, 4, 4])
    assert why == (
        "no set of hosts of queue 'normal' can ever hold this job: span[ptile=8] spreads "
        "24 slots over 3 hosts of at least 8 slots; it has 1 host of 8 slots or more"
    )


def test_the_rest_needs_a_host_of_its_own() -> None:
    why = _refusal(10, "span[ptile=4]", [4, 4, 1, 1])
    assert why is not None and "2 hosts of at least 4 slots and one more of at least 2" in why


def test_a_shape_the_hosts_can_take_is_not_refused() -> None:
    assert _refusal(10, "span[ptile=4]", [4, 4, 2]) is None
    assert _refusal(24, "span[ptile=8]", [8, 8, 8, 4]) is None


def test_too_few_slots_in_all_keeps_the_total() -> None:
    why = _refusal(16, "span[ptile=2]", [4, 4, 4])
    assert why == (
        "no set of hosts of queue 'normal' can ever hold this job (16 slots; its hosts "
        "have 12 slots in all)"
    )


def test_hosts_of_the_tile_size_without_the_memory_keep_the_total() -> None:
    why = _refusal(8, "span[ptile=4]", [4, 4], memory_mb=128000)
    assert why is not None and "its hosts have 8 slots in all" in why


def test_a_waiting_job_whose_tiles_fit_no_host_set_says_why_not_that_it_waits_for_room() -> None:
    """A job kept with defer (or submitted before the hosts changed) waits for ever: its
    reason says what is wrong with the tiles instead of "waiting for free slots"."""
    state = new_state(hosts={f"h{i}": (4, 1000) for i in range(4)})
    tiles, fits, short = (
        submit(state, slots=16, resources="span[ptile=8]"),
        submit(state, slots=8, resources="span[ptile=4]"),
        submit(state, slots=64, resources="span[ptile=4]"),
    )
    result = plan(snapshot_of(state), T0)
    assert [p.job_id for p in result.placements] == [fits]
    texts = result.texts()
    assert texts[tiles] == (
        "no set of hosts is big enough: span[ptile=8] puts 8 slots on each host and no "
        "host has 8 (the largest has 4)"
    )
    assert texts[short] == "no set of hosts is big enough"  # fewer slots in all
