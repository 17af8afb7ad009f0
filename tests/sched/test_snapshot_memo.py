"""The controller's snapshot memo reuses views of unchanged pending jobs, and only those."""

from __future__ import annotations

from tests.unit.helpers import T0, new_state, submit
from xce.core import events as ev
from xce.core.deps import DepStatus
from xce.sched.snapshot import PendingMemo, snapshot_of


def test_memo_reuses_unchanged_and_refreshes_changed_jobs() -> None:
    state = new_state(hosts={"h": (1, 100)})
    a, b = submit(state), submit(state)
    waits = submit(state, dependency=f"afterok:{a}")
    memo: PendingMemo = {}
    first = {j.job_id: j for j in snapshot_of(state, memo=memo).jobs}
    assert first[waits].deps is DepStatus.WAITING
    state.apply(ev.JobStarted(T0, a, "h"))
    state.apply(ev.JobFinished(T0 + 1, a, 0, 0))
    state.apply(ev.JobStarted(T0 + 2, b, "h"))
    state.apply(ev.JobRequeued(T0 + 3, b))  # a new record for b, pending again
    second = {j.job_id: j for j in snapshot_of(state, memo=memo).jobs}
    assert set(second) == {b, waits}
    assert second[waits].deps is DepStatus.SATISFIED  # re-evaluated, not reused
    assert second[b] is not first[b] and second[b].job_id == b
    third = {j.job_id: j for j in snapshot_of(state, memo=memo).jobs}
    assert third[b] is second[b]  # unchanged: the same view
    assert snapshot_of(state, memo=memo).jobs == snapshot_of(state).jobs
