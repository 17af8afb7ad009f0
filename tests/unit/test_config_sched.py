"""Scheduling keys of the config: per-queue plugins, limits and shares; `[scheduler]`."""

from __future__ import annotations

import pytest

from xce.config.loader import parse_config
from xce.core.errors import ConfigError
from xce.sched.usage import UsageLedger


def test_queue_scheduling_keys() -> None:
    config = parse_config(
        {
            "queue": [
                {
                    "name": "normal",
                    "plugins": ["fairshare", "backfill", "pack"],
                    "max_running": 100,
                    "max_running_per_user": 10,
                    "shares": {"alice": 3, "@physics": 2},
                }
            ],
            "scheduler": {"fairshare_half_life_s": 600, "groups": {"physics": ["alice", "bob"]}},
        }
    )
    (queue,) = config.controller.queues
    assert queue.plugins == ("fairshare", "backfill", "pack")
    assert (queue.max_running, queue.max_running_per_user) == (100, 10)
    assert queue.shares == (("@physics", "2"), ("alice", "3"))
    assert config.controller.scheduler.fairshare_half_life_s == 600.0
    assert config.controller.scheduler.group_map() == {"alice": "physics", "bob": "physics"}


@pytest.mark.parametrize(
    ("queue", "message"),
    [
        ({"plugins": ["fastest"]}, "queue[0].plugins: unknown scheduler plugin 'fastest'"),
        ({"plugins": ["pack", "spread"]}, "queue[0].plugins: plugins 'pack' and 'spread'"),
        ({"plugins": "fcfs"}, "queue[0].plugins must be a list"),
        ({"max_running": 0}, "queue[0].max_running must be positive"),
        ({"max_running_per_user": "5"}, "queue[0].max_running_per_user must be a int"),
        ({"shares": {"alice": -1}}, "queue[0].shares.alice must be positive"),
    ],
)
def test_bad_queue_keys_are_named(queue: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_config({"queue": [{"name": "normal", **queue}]})


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"half_life": 1}, "unknown key scheduler.half_life"),
        ({"fairshare_half_life_s": 0}, "scheduler.fairshare_half_life_s must be a positive"),
        ({"groups": {"physics": "alice"}}, "scheduler.groups.physics must be a list"),
    ],
)
def test_bad_scheduler_keys_are_named(section: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({"scheduler": section})


def test_usage_decays_by_half_life() -> None:
    ledger = UsageLedger(half_life_s=3600)
    ledger.charge("alice", 3600.0, at=0.0)
    assert ledger.usage(3600.0) == {"alice": 1800.0}
    ledger.charge("alice", 200.0, at=3600.0)
    assert ledger.usage(7200.0) == {"alice": 1000.0}
