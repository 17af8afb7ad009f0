"""bench/policies.py, the table of `predictive` against EASY: which targets a row meets, and
a small run over the synthetic traces and an SWF file (decisions only, never timings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.policies import Figures, predictive_settings, rows_for, run, table, targets_missed
from xce.sched.sim.lublin import lublin
from xce.sched.sim.swf import write_swf

EASY = Figures(slowdown=10.0, utilisation=0.70, max_wait_s=1000.0, avg_wait_s=100.0)


def test_a_row_meets_the_four_targets_or_names_those_it_misses() -> None:
    assert targets_missed(Figures(5.0, 0.695, 1500.0, 100.0), EASY) == []
    assert targets_missed(Figures(5.1, 0.69, 1501.0, 101.0), EASY) == [
        "slowdown",
        "utilisation",
        "max wait",
        "avg wait",
    ]


def test_a_slowdown_target_below_the_floor_of_1_is_marked_unreachable() -> None:
    # EASY's average 1.34: half of it is 0.67, below what any job's slowdown can be
    low = Figures(slowdown=1.34, utilisation=0.70, max_wait_s=1000.0, avg_wait_s=100.0)
    mine = Figures(slowdown=1.09, utilisation=0.70, max_wait_s=1000.0, avg_wait_s=90.0)
    rows = rows_for("t", {"easy": low, "predictive": mine})
    assert rows[1][-1] == "missed: slowdown (unreachable: best 0.75x)"
    # where halving is possible a miss is a plain miss
    rows = rows_for("t", {"easy": EASY, "predictive": Figures(5.1, 0.70, 1000.0, 100.0)})
    assert rows[1][-1] == "missed: slowdown"


def test_set_gives_the_predictive_settings_checked_as_the_config_is() -> None:
    assert predictive_settings([]) is None
    settings = predictive_settings(["order_trust=4", "guard_factor=2"])
    assert settings is not None and (settings.order_trust, settings.guard_factor) == (4.0, 2.0)
    with pytest.raises(ValueError, match="order_trust"):
        predictive_settings(["order_trust=0"])
    with pytest.raises(ValueError, match="KEY=VALUE"):
        predictive_settings(["order_trust"])
    # `none` unsets what has a default (the settings before those defaults)
    unset = predictive_settings(["order_trust=none", "guard_max_s=None", "wait_factor=none"])
    assert unset is not None
    assert (unset.order_trust, unset.guard_max_s, unset.wait_factor) == (None, None, None)


def test_medians_are_taken_figure_by_figure() -> None:
    runs = [
        Figures(1.0, 0.5, 30.0, 3.0),
        Figures(3.0, 0.7, 10.0, 1.0),
        Figures(2.0, 0.6, 20.0, 2.0),
    ]
    assert Figures.median(runs) == Figures(2.0, 0.6, 20.0, 2.0)


def test_the_table_has_a_row_per_policy_and_trace(tmp_path: Path) -> None:
    trace = tmp_path / "t.swf"
    trace.write_text(write_swf(lublin(300, seed=4, users=5, estimates=True), {"MaxProcs": "128"}))
    rows = run(["predictive"], [1], 300, [trace], echo=lambda _: None)
    assert [row[1] for row in rows] == ["easy", "predictive"] * 5  # 4 synthetic + the file
    assert rows[-2][0].startswith("t.swf (300 jobs, 128 slots)")
    assert all(row[-1] == "all met" or row[-1].startswith("missed: ") for row in rows[1::2])
    shown = table(rows).splitlines()
    assert shown[0].startswith("trace") and len(shown) == 2 + len(rows)
