"""The plugin registry, score plugins, queue host groups and queue limits."""

from __future__ import annotations

from typing import ClassVar

import pytest

from tests.unit.helpers import T0, new_state, submit
from xce.core import events as ev
from xce.core.model import QueueRecord
from xce.core.state import ClusterState
from xce.sched import plugins
from xce.sched.passes.hostpool import HostPool
from xce.sched.passes.pipeline import plan
from xce.sched.snapshot import snapshot_of
from xce.sched.types import Plan


def run(state: ClusterState) -> Plan:
    return plan(snapshot_of(state), T0)


def placed(state: ClusterState) -> list[tuple[str, str]]:
    return [(p.job_id, p.host) for p in run(state).placements]


def test_registry_lists_every_kind() -> None:
    assert plugins.names("order") == [
        "fairshare",
        "fairshare-group",
        "fcfs",
        "multifactor",
        "short-first",
    ]
    assert plugins.names("score") == ["first-fit", "pack", "spread"]
    assert plugins.names("reserve") == ["backfill", "predictive", "strict"]
    assert set(plugins.DEFAULT_FILTERS) <= set(plugins.names("filter"))


def test_unknown_and_clashing_plugins_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown scheduler plugin 'fastest'"):
        plugins.builtin().policy_for(("fastest",))
    with pytest.raises(ValueError, match="'pack' and 'spread' are both score plugins"):
        plugins.builtin().policy_for(("pack", "spread"))


def test_defaults_and_choices() -> None:
    default = plugins.builtin().policy_for(())
    assert (default.order.name, default.score.name, default.reserve) == ("fcfs", "first-fit", None)
    chosen = plugins.builtin().policy_for(("backfill", "spread", "fairshare"))
    assert (chosen.order.name, chosen.score.name, chosen.reserve.name) == (  # type: ignore[union-attr]
        "fairshare",
        "spread",
        "backfill",
    )


class LastHostFirst:
    name: ClassVar[str] = "test-last-host-first"
    kind: ClassVar[str] = "score"
    dynamic: ClassVar[bool] = False

    def key(self, pool: HostPool, i: int) -> tuple:
        return (-i,)


def test_a_new_plugin_is_one_class_in_a_registry_passed_to_the_pass() -> None:
    registry = plugins.PluginRegistry([*plugins.builtin_plugins(), LastHostFirst])
    state = new_state(
        queues=(QueueRecord("normal", plugins=("test-last-host-first",)),),
        hosts={"a": (2, 100), "b": (2, 100)},
    )
    job = submit(state)
    result = plan(snapshot_of(state), T0, registry=registry)
    assert [(p.job_id, p.host) for p in result.placements] == [(job, "b")]
    # the built-in registry did not learn it: nothing registers as a side effect
    assert "test-last-host-first" not in plugins.names()
    with pytest.raises(ValueError, match="unknown scheduler plugin 'test-last-host-first'"):
        plan(snapshot_of(state), T0)


def test_a_plugin_name_is_taken_once() -> None:
    class OtherFcfs(LastHostFirst):
        name: ClassVar[str] = "fcfs"

    with pytest.raises(ValueError, match="the name 'fcfs' is taken by FirstComeFirstServed"):
        plugins.PluginRegistry([*plugins.builtin_plugins(), OtherFcfs])
    registry = plugins.PluginRegistry([LastHostFirst])
    with pytest.raises(ValueError, match="'test-last-host-first' is taken"):
        registry.add(LastHostFirst)


def test_the_shared_builtin_registry_takes_no_more_plugins() -> None:
    with pytest.raises(ValueError, match="this registry is shared"):
        plugins.builtin().add(LastHostFirst)
    assert "test-last-host-first" not in plugins.names()


def test_registries_are_independent() -> None:
    one, two = plugins.PluginRegistry.builtin(), plugins.PluginRegistry.builtin()
    one.add(LastHostFirst)
    assert "test-last-host-first" in one.names("score")
    assert "test-last-host-first" not in two.names("score")


def busy_a() -> ClusterState:
    """a: 4 slots, 3 in use; b: 8 slots idle."""
    state = new_state(hosts={"a": (4, 1000), "b": (8, 1000)})
    running = submit(state, slots=3)
    state.apply(ev.JobStarted(T0, running, "a"))
    return state


def with_plugins(state: ClusterState, *names: str) -> ClusterState:
    state.queues["normal"] = QueueRecord("normal", plugins=names)
    return state


def test_pack_fills_the_busiest_host_first() -> None:
    state = with_plugins(busy_a(), "pack")
    jobs = [submit(state) for _ in range(3)]
    # a has 1 free (tightest), then a is full: b (8 free) takes the rest
    assert placed(state) == [(jobs[0], "a"), (jobs[1], "b"), (jobs[2], "b")]


def test_spread_balances() -> None:
    state = with_plugins(busy_a(), "spread")
    jobs = [submit(state, slots=2) for _ in range(4)]
    # b 8 -> 6 -> 4 -> 2: a (1 free) never fits 2 slots
    assert placed(state) == [(j, "b") for j in jobs]
    state = with_plugins(busy_a(), "spread")
    ones = [submit(state) for _ in range(9)]
    hosts = [h for _, h in placed(state)]
    # b goes 8..1 (ties with a at 1: a is first by name), then a
    assert hosts == ["b"] * 7 + ["a", "b"]
    assert len(ones) == 9


def test_order_expression_ranks_before_the_queue_score() -> None:
    state = with_plugins(busy_a(), "pack")
    state.apply(ev.HostRegistered(T0, "c", 8, 1000, (("speed", "3"),)))
    state.hosts["b"] = state.hosts["b"].__class__(
        **{**_fields(state.hosts["b"]), "attributes": (("speed", "5"),)}
    )
    fast = submit(state, resources="order[-speed]")
    assert placed(state) == [(fast, "b")]


def _fields(record: object) -> dict:
    return {name: getattr(record, name) for name in record.__dataclass_fields__}  # type: ignore[attr-defined]


def test_queue_host_group() -> None:
    queue = QueueRecord("gpu", hosts=("@gpus",))
    state = new_state(queues=(QueueRecord("normal"), queue))
    state.apply(ev.HostRegistered(T0, "a", 4, 1000))
    state.apply(ev.HostRegistered(T0, "g1", 4, 1000, (("group", "gpus"),)))
    job = submit(state, queue="gpu")
    assert placed(state) == [(job, "g1")]


def test_queue_and_user_running_limits() -> None:
    queue = QueueRecord("normal", max_running=4, max_running_per_user=2)
    state = new_state(queues=(queue,), hosts={"h": (16, 1000)})
    running = submit(state, user="carol")
    state.apply(ev.JobStarted(T0, running, "h"))
    a1, a2, a3 = (submit(state, user="alice") for _ in range(3))
    b1, b2 = submit(state, user="bob"), submit(state, user="bob")
    result = run(state)
    assert [p.job_id for p in result.placements] == [a1, a2, b1]
    assert (
        result.texts()[a3] == "user alice has reached the limit of 2 running jobs in queue normal"
    )
    assert result.texts()[b2] == "queue normal has reached its limit of 4 running jobs"


def test_array_tasks_obey_the_user_limit() -> None:
    from tests.unit.helpers import submit_array

    state = new_state(
        queues=(QueueRecord("normal", max_running_per_user=3),), hosts={"h": (16, 1000)}
    )
    number = submit_array(state, "1-10")
    result = run(state)
    assert len(result.placements) == 3
    assert "limit of 3" in result.texts()[str(number)]


def test_full_cluster_skips_the_search_but_names_reasons() -> None:
    state = new_state(hosts={"h": (2, 1000)})
    first = submit(state, slots=2)
    state.apply(ev.JobStarted(T0, first, "h"))
    waiting, huge = submit(state), submit(state, slots=64)
    result = run(state)
    assert result.placements == []
    assert result.texts() == {
        waiting: "waiting for free slots or memory",
        huge: "no set of hosts is big enough",
    }  # it may spread


def test_ascending_free_order_sees_placements_of_other_shapes() -> None:
    # order[slots]: fewest free slots first (a pack by expression); 1- and 2-slot jobs
    # alternate, so each shape's ranking must see the other's placements:
    # a 4 -> 3 (1) -> 1 (2) -> 0 (1); then a is full: b 8 -> 6 (2) -> 5 (1)
    state = new_state(hosts={"a": (4, 1000), "b": (8, 1000)})
    jobs = [submit(state, slots=1 + k % 2, resources="order[slots]") for k in range(5)]
    assert placed(state) == list(zip(jobs, ["a", "a", "a", "b", "b"], strict=True))


def test_memory_order_with_a_score_tie_break() -> None:
    # order[-mem] with spread: most free memory first; equal memory -> most free slots
    state = new_state(
        queues=(QueueRecord("normal", plugins=("spread",)),),
        hosts={"a": (4, 2000), "b": (8, 2000), "c": (2, 1000)},
    )
    jobs = [submit(state, memory_mb=600, resources="order[-mem]") for _ in range(3)]
    # a, b tie on 2000 MB: b has more slots -> b (1400); a (2000) -> a (1400);
    # a/b tie on 1400: b has 7 free vs a 3 -> b
    assert placed(state) == list(zip(jobs, ["b", "a", "b"], strict=True))
