"""The jobs table model: stable keys, in-place updates, sort, filter, arrays, targets."""

from __future__ import annotations

from typing import Any

from xce.console.filter import parse_filter
from xce.console.model import JobModel


def job(job_id: str, state: str = "PEND", **extra: Any) -> dict[str, Any]:
    row = {
        "id": job_id,
        "kind": "job",
        "user": "alice",
        "state": state,
        "queue": "normal",
        "host": None,
        "name": f"n{job_id}",
        "submit_time": 1000.0,
        "start_time": None,
        "end_time": None,
        "array_id": None,
        "usage": {"cpu_time_s": 0.0, "max_rss_bytes": 0},
    }
    row.update(extra)
    return row


def test_updates_in_place_do_not_reorder_unless_the_sort_key_moves() -> None:
    model = JobModel(clock=lambda: 2000.0)
    model.load([job("2"), job("10"), job("1")])
    model.rebuild()
    assert model.visible == ["1", "2", "10"]
    assert model.upsert(job("2", usage={"cpu_time_s": 5.0, "max_rss_bytes": 1})) is False
    assert not model.dirty
    model.set_sort("cpu", descending=True)
    model.rebuild()
    assert model.visible[0] == "2"
    assert model.upsert(job("10", usage={"cpu_time_s": 9.0, "max_rss_bytes": 1})) is True
    model.rebuild()
    assert model.visible == ["10", "2", "1"]


def test_filter_and_removal() -> None:
    model = JobModel()
    model.load([job("1", "RUN"), job("2"), job("3", "RUN", user="bob")])
    model.set_filter(parse_filter("state=RUN user=alice"))
    model.rebuild()
    assert model.visible == ["1"]
    assert model.upsert(job("2", "RUN")) is True  # now matches
    model.rebuild()
    assert model.visible == ["1", "2"]
    model.remove("1")
    model.rebuild()
    assert model.visible == ["2"]


def test_arrays_collapse_under_one_parent_and_actions_target_the_array() -> None:
    model = JobModel(clock=lambda: 2000.0)
    model.load(
        [
            job("5[1]", "RUN", array_id="5", start_time=1500.0),
            job("5[2]", "DONE", array_id="5"),
            {**job("5[3-8]", array_id="5"), "kind": "array_pending", "tasks": 6},
            job("6"),
        ]
    )
    model.rebuild()
    assert model.visible == ["@5", "6"]
    assert model.cells("@5")[0] == "+5[8]" and model.cells("@5")[2] == "RUN"
    model.toggle("@5")
    model.rebuild()
    assert model.visible == ["@5", "5[1]", "5[2]", "5[pending]", "6"]
    assert model.cells("5[1]")[7] == "8:20"  # run time from the injected clock
    assert model.targets("5[pending]") == ["5"]
    model.selected.update({"6", "@5"})
    assert model.targets(None) == ["5", "6"]
    assert model.cells("6")[0] == "*6"
    model.set_array_pending("5", None)
    model.rebuild()
    assert "5[pending]" not in model.rows and model.job_count() == 3
