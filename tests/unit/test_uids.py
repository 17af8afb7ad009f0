"""The controller's memory of uid lookups (xce/controller/uids.py) and of metric children."""

from __future__ import annotations

from xce.controller import uids
from xce.controller.uids import UidCache
from xce.telemetry import metrics


def test_answers_are_kept_for_the_ttl_then_asked_again() -> None:
    now = [100.0]
    table = {"alice": 1000}
    asked: list[str] = []

    def lookup(name: str) -> int | None:
        asked.append(name)
        return table.get(name)

    cache = UidCache(lookup, ttl_s=10.0, clock=lambda: now[0])
    assert cache.uid("alice") == 1000
    assert cache.uid("ghost") is None  # an unknown name is remembered too
    table["alice"], table["ghost"] = 0, 1001
    now[0] += 9.9
    assert (cache.uid("alice"), cache.uid("ghost")) == (1000, None)
    assert asked == ["alice", "ghost"]
    now[0] += 0.2  # past the ttl: an edited account is seen
    assert (cache.uid("alice"), cache.uid("ghost")) == (0, 1001)
    assert asked == ["alice", "ghost", "alice", "ghost"]


def test_the_memory_is_bounded() -> None:
    cache = UidCache(lambda name: len(name))
    for i in range(uids.MAX_NAMES + 10):
        cache.uid(f"user{i}")
    assert len(cache._known) <= uids.MAX_NAMES


def test_labelled_children_are_the_metric_s_own() -> None:
    before = metrics.REGISTRY.get_sample_value("xce_submissions_total", {"kind": "job"}) or 0.0
    child = metrics.labelled(metrics.SUBMISSIONS, "job")
    assert metrics.labelled(metrics.SUBMISSIONS, "job") is child
    assert child is metrics.SUBMISSIONS.labels("job")
    child.inc()
    after = metrics.REGISTRY.get_sample_value("xce_submissions_total", {"kind": "job"})
    assert after == before + 1
