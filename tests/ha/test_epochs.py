"""Epochs and their history (xce/ha/epochs.py): durable, monotonic, and divergence points."""

from __future__ import annotations

from pathlib import Path

from xce.ha.epochs import EpochStore


def test_terms_are_durable_and_increase(tmp_path: Path) -> None:
    store = EpochStore(tmp_path)
    assert store.epoch == 0
    assert store.begin_term(0, 1) == 1
    assert store.begin_term(5, 40) == 6  # above every epoch seen elsewhere
    again = EpochStore(tmp_path)
    assert again.epoch == 6
    assert again.history == [(1, 1), (6, 40)]
    assert (tmp_path / "epoch.json").stat().st_mode & 0o777 == 0o600


def test_observe_only_moves_forward(tmp_path: Path) -> None:
    store = EpochStore(tmp_path)
    assert store.observe(3)
    assert not store.observe(2)
    assert EpochStore(tmp_path).epoch == 3


def test_end_of_an_epoch_is_where_the_next_began(tmp_path: Path) -> None:
    store = EpochStore(tmp_path)
    store.adopt_history([(1, 1), (2, 91), (4, 200)])
    assert store.end_of(1) == 90  # a tail of epoch 1 past record 90 diverged
    assert store.end_of(2) == 199
    assert store.end_of(3) == 199  # an epoch this history never had ended before 4 began
    assert store.end_of(4) is None  # still the newest term
    assert store.epoch == 4
