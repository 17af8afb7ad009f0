"""Resource requirement strings drive placement (select filters, order ranks)."""

from __future__ import annotations

from tests.unit.helpers import T0, new_state, submit
from xce.core import events as ev
from xce.core.state import ClusterState
from xce.sched.passes.pipeline import plan
from xce.sched.snapshot import snapshot_of


def cluster() -> ClusterState:
    state = new_state()
    state.apply(ev.HostRegistered(T0, "a", 4, 8000, (("rack", "r1"), ("type", "X86"))))
    state.apply(
        ev.HostRegistered(T0, "b", 16, 64000, (("gpu", "2"), ("rack", "r2"), ("type", "X86")))
    )
    state.apply(ev.HostRegistered(T0, "c", 8, 32000, (("rack", "r2"), ("type", "ARM"))))
    return state


def placed(state: ClusterState) -> dict[str, str]:
    return {p.job_id: p.host for p in plan(snapshot_of(state), T0).placements}


def test_select_filters_hosts() -> None:
    state = cluster()
    big = submit(state, resources="select[mem>10000 && type==X86]")
    arm = submit(state, resources="type==ARM")
    no_gpu = submit(state, resources="select[!defined(gpu) && maxmem>=8000] order[-mem]")
    assert placed(state) == {big: "b", arm: "c", no_gpu: "c"}


def test_order_ranks_hosts_and_sees_this_pass() -> None:
    state = cluster()
    jobs = [submit(state, slots=4, resources="order[-slots]") for _ in range(3)]
    # Most free slots first: b (16 free), b (12), then b and c tie at 8 and the stable
    # sort keeps name order, so b again.
    assert [placed(state)[j] for j in jobs] == ["b", "b", "b"]


def test_nothing_matches_gives_a_reason() -> None:
    state = cluster()
    job = submit(state, resources="select[type==SPARC]")
    result = plan(snapshot_of(state), T0)
    assert not result.placements
    assert result.texts()[job] == "no online host matches the resource requirement"
