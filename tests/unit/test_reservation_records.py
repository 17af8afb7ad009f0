"""Advance reservations in the core: ReservationAdded / ReservationDeleted through
`ClusterState.apply` (validated whole before any change), a checkpoint and the WAL."""

from __future__ import annotations

from pathlib import Path

import pytest

from xce.core import events as ev
from xce.core.errors import Conflict, InvalidRequest, NotFound
from xce.core.model import QueueRecord, ReservationRecord
from xce.core.state import ClusterState
from xce.store.checkpoint import checkpoint_name, copy_state, read_checkpoint, write_checkpoint

MAINT = ReservationRecord("maint", ("h1",), 1000.0, 2000.0, maintenance=True)
TEAM = ReservationRecord("team", ("h2",), 1000.0, 2000.0, slots=2, users=("alice", "@phys"))


def state_with(*records: ReservationRecord) -> ClusterState:
    state = ClusterState()
    state.apply(ev.QueueCreated(0.0, QueueRecord("normal")))
    for r in records:
        state.apply(ev.ReservationAdded(1.0, r))
    return state


def test_add_and_delete() -> None:
    state = state_with(MAINT, TEAM)
    assert set(state.reservations) == {"maint", "team"}
    state.apply(ev.ReservationDeleted(2.0, "maint"))
    assert set(state.reservations) == {"team"}
    with pytest.raises(NotFound):
        state.apply(ev.ReservationDeleted(3.0, "maint"))


@pytest.mark.parametrize(
    ("record", "error", "words"),
    [
        (ReservationRecord("bad name", ("h1",), 1, 2, maintenance=True), InvalidRequest, "name"),
        (ReservationRecord("r", (), 1, 2, maintenance=True), InvalidRequest, "host"),
        (ReservationRecord("r", ("h1", "h1"), 1, 2, maintenance=True), InvalidRequest, "twice"),
        (ReservationRecord("r", ("h1",), 2, 2, maintenance=True), InvalidRequest, "end after"),
        (ReservationRecord("r", ("h1",), 1, 2, -1, maintenance=True), InvalidRequest, "negative"),
        (
            ReservationRecord("r", ("h1",), 1, 2, users=("a",), maintenance=True),
            InvalidRequest,
            "nobody",
        ),
        (ReservationRecord("r", ("h1",), 1, 2), InvalidRequest, "users"),
        (ReservationRecord("r", ("h1",), 1, 2, users=("a",), flags=("x",)), InvalidRequest, "flag"),
        (ReservationRecord("maint", ("h9",), 1, 2, maintenance=True), Conflict, "exists"),
        (ReservationRecord("r", ("h3", "h1"), 1500, 2500, maintenance=True), Conflict, "h1"),
    ],
)
def test_bad_records_are_refused_and_change_nothing(
    record: ReservationRecord, error: type, words: str
) -> None:
    state = state_with(MAINT)
    with pytest.raises(error, match=words):
        state.apply(ev.ReservationAdded(1.0, record))
    assert state.reservations == {"maint": MAINT}


def test_overlap_flag_and_disjoint_windows_are_accepted() -> None:
    state = state_with(MAINT)
    state.apply(
        ev.ReservationAdded(
            1.0, ReservationRecord("after", ("h1",), 2000.0, 3000.0, users=("bob",))
        )
    )
    state.apply(
        ev.ReservationAdded(
            1.0,
            ReservationRecord("both", ("h1",), 1500.0, 2500.0, users=("bob",), flags=("overlap",)),
        )
    )
    assert len(state.reservations) == 3


def test_a_batch_with_a_bad_reservation_applies_nothing() -> None:
    state = state_with()
    with pytest.raises(Conflict):
        state.check([ev.ReservationAdded(1.0, MAINT), ev.ReservationAdded(1.0, MAINT)])
    assert state.reservations == {}


def test_state_at() -> None:
    assert [MAINT.state_at(t) for t in (999.0, 1000.0, 1999.9, 2000.0)] == [
        "waiting",
        "active",
        "active",
        "ended",
    ]


def test_reservations_survive_a_checkpoint(tmp_path: Path) -> None:
    state = state_with(MAINT, TEAM)
    path = write_checkpoint(tmp_path, copy_state(state, 7))
    assert path.name == checkpoint_name(7)
    _, got = read_checkpoint(path)
    assert got.reservations == state.reservations
    empty = write_checkpoint(tmp_path / "e", copy_state(state_with(), 3))
    assert read_checkpoint(empty)[1].reservations == {}


async def test_ended_reservations_leave_with_retention_and_recovery_agrees(tmp_path: Path) -> None:
    """Before a checkpoint the primary deletes reservations that ended more than
    `finished_retention_s` ago by `ReservationDeleted` records; a checkpoint keeps the rest,
    and recovery (checkpoint + WAL, or the WAL alone) gives the same reservations."""
    from tests.store.test_checkpoint import commit, list_events, open_store, retain
    from xce.store.checkpoint import list_checkpoints
    from xce.store.recovery import checkpoint_dir, recover

    store, state = await open_store(tmp_path, finished_retention_s=100.0)
    retain(store, tmp_path)
    await commit(
        store,
        state,
        [
            ev.QueueCreated(0, QueueRecord("normal")),
            ev.ReservationAdded(1.0, MAINT),
            ev.ReservationAdded(1.0, TEAM),
            ev.ReservationAdded(
                1.0, ReservationRecord("later", ("h1",), 5000.0, 6000.0, maintenance=True)
            ),
        ],
    )
    await store.checkpoint(state, now=2050.0)  # cutoff 1950: nothing ended before it
    assert len(state.reservations) == 3
    await store.checkpoint(state, now=2500.0)  # cutoff 2400: maint and team ended at 2000
    assert set(state.reservations) == {"later"}
    assert [e.name for e in list_events(tmp_path)[-2:]] == ["maint", "team"]  # type: ignore[attr-defined]
    await commit(
        store,
        state,
        [
            ev.ReservationAdded(
                2600.0, ReservationRecord("next", ("h2",), 7000.0, 8000.0, users=("bob",))
            )
        ],
    )
    await store.writer.close()
    assert recover(tmp_path).state.reservations == state.reservations
    for _, path in list_checkpoints(checkpoint_dir(tmp_path)):
        path.unlink()
    assert recover(tmp_path).state.reservations == state.reservations
