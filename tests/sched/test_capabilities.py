"""Plugin capabilities decide exactly what the plugin names used to decide, for
every built-in plugin and every combination a queue can choose: the pass and the simulator
read the flags now, so a flag that drifted would change scheduling without a name in sight."""

from __future__ import annotations

import itertools

import pytest

from xce.config.scheduler import BUILTIN_PLUGINS, plugins_problem
from xce.sched.plugins import QueuePolicy, builtin, names
from xce.sched.plugins.base import blocks_queue, reads_usage

ORDERS = [(), *((n,) for n in names("order"))]
SCORES = [(), *((n,) for n in names("score"))]
RESERVES = [(), *((n,) for n in names("reserve"))]
FILTERS = [(), tuple(names("filter"))]
COMBINATIONS = [
    o + s + r + f for o, s, r, f in itertools.product(ORDERS, SCORES, RESERVES, FILTERS)
]


def test_every_builtin_plugin_is_covered() -> None:
    covered = {n for plugins in COMBINATIONS for n in plugins}
    assert covered == set(names())
    assert {"fcfs", "first-fit", "backfill", "strict"} <= covered


@pytest.mark.parametrize("plugins", COMBINATIONS, ids="+".join)
def test_capabilities_equal_the_old_name_tests(plugins: tuple[str, ...]) -> None:
    policy: QueuePolicy = builtin().policy_for(plugins)
    order, score, reserve = policy.order.name, policy.score.name, policy.reserve
    # what the pass (xce/sched/passes/pipeline.py) and ranking (xce/sched/passes/ranking.py)
    # decided by plugin name before the capability flags
    # (`short-first`, the predictive policy's order, came with the flags: it reads
    # predictions, not usage)
    usage_orders = order not in ("fcfs", "short-first")
    assert policy.submission_order == (order == "fcfs")
    assert policy.reads_usage == usage_orders
    assert reads_usage(policy.order) == usage_orders
    assert policy.ranks == (score != "first-fit")
    assert policy.host_sets == (reserve is not None and reserve.name in ("backfill", "predictive"))
    # a predictive reservation with no order chosen orders by `short-first`
    if (
        reserve is not None
        and reserve.name == "predictive"
        and not set(plugins) & set(names("order"))
    ):
        assert order == "short-first"
    assert policy.predicts == (
        order == "short-first" or (reserve is not None and reserve.name == "predictive")
    )
    # the simulator (xce/sched/sim/simulate.py): strict FCFS skips passes until a job ends
    strict_before = order == "fcfs" and reserve is not None and reserve.name == "strict"
    strict_now = policy.submission_order and not policy.reads_usage and blocks_queue(reserve)
    assert strict_now == strict_before
    # the filters: the defaults always, each chosen one once, each with its own test
    assert [f.name for f in policy.filters][:3] == ["online", "queue-hosts", "select"]
    assert len(policy.filter_tests) == len(policy.filters) == len(set(policy.filters))


def test_the_configs_list_of_builtin_plugins_is_the_registrys() -> None:
    """The config file's tables check queue plugins without the scheduler
    (xce/config/scheduler.py): their list must be the registry's, name and kind."""
    registry = builtin()
    assert {name: registry.get(name).kind for name in registry.names()} == BUILTIN_PLUGINS


@pytest.mark.parametrize("plugins", [*COMBINATIONS, ("nope",), ("pack", "spread"), ("fcfs", "x")])
def test_the_configs_check_says_what_the_registry_says(plugins: tuple[str, ...]) -> None:
    try:
        builtin().policy_for(plugins)
        expected = None
    except ValueError as exc:
        expected = str(exc)
    assert plugins_problem(plugins) == expected
