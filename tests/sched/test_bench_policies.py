"""bench/policies.py, the table of `predictive` against EASY: which targets a row meets, and
a small run over the synthetic traces and an SWF file (decisions only, never timings)."""

from __future__ import annotations

from pathlib import Path

from bench.policies import Figures, run, table, targets_missed
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
