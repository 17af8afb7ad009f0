"""Epochs, their history and this candidate's votes (xce/ha/epochs.py): durable, monotonic,
one vote per epoch, and divergence points."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xce.ha.epochs import EpochStore


def claim(store: EpochStore, first_seq: int, at_least: int = 0) -> int:
    """Win the next epoch alone (what a test primary does): vote for itself, begin."""
    epoch = max(store.seen, at_least) + 1
    assert store.vote(epoch, "me")
    return store.begin_term(epoch, first_seq, "me")


def test_terms_are_durable_and_increase(tmp_path: Path) -> None:
    store = EpochStore(tmp_path)
    assert store.epoch == 0
    assert claim(store, 1) == 1
    assert claim(store, 40, at_least=5) == 6  # above every epoch seen elsewhere
    again = EpochStore(tmp_path)
    assert again.epoch == 6
    assert again.history == [(1, 1), (6, 40)]
    assert (tmp_path / "epoch.json").stat().st_mode & 0o777 == 0o600


def test_a_term_needs_this_candidates_own_vote(tmp_path: Path) -> None:
    store = EpochStore(tmp_path)
    with pytest.raises(RuntimeError):
        store.begin_term(1, 1, "me")
    assert store.vote(1, "other")
    with pytest.raises(RuntimeError):  # voted for someone else in that epoch
        store.begin_term(1, 1, "me")


def test_one_grant_per_epoch_and_never_an_old_one(tmp_path: Path) -> None:
    store = EpochStore(tmp_path)
    assert store.vote(3, "a")
    assert store.vote(3, "a")  # the same grant asked again (its answer was lost)
    assert not store.vote(3, "b")  # never twice in one epoch
    assert not store.vote(2, "b")  # never an epoch below one voted in
    store.observe(7)
    assert not store.vote(5, "b")  # nor one below an epoch seen
    assert store.refusal(5, "b") == "epoch 5 is below 7, which this candidate has seen"
    # Hearing of epoch 7 does not use up the vote in it (Raft's rule): the candidate that
    # voted for itself in 7 shows 7 on its health page before it asks for this vote.
    assert store.vote(7, "b")
    assert not store.vote(7, "c")
    assert store.refusal(7, "c") == "this candidate already voted in epoch 7"
    assert store.vote(8, "c")
    assert (store.voted_epoch, store.voted_for, store.epoch) == (8, "c", 8)


def test_a_vote_is_on_disk_before_it_is_answered_and_survives_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import xce.ha.epochs as epochs_module

    store = EpochStore(tmp_path)
    written: list[dict[str, object]] = []
    real = epochs_module.atomic_write

    def spy(path: Path, data: bytes, mode: int = 0o600) -> None:
        real(path, data, mode)  # atomic_write fsyncs the file and its folder
        written.append(json.loads(data))

    monkeypatch.setattr(epochs_module, "atomic_write", spy)
    assert store.vote(4, "a")
    assert written and written[-1]["voted"] == {"epoch": 4, "candidate": "a"}
    restarted = EpochStore(tmp_path)  # a crash right after answering
    assert (restarted.voted_epoch, restarted.voted_for) == (4, "a")
    assert not restarted.vote(4, "b")
    assert restarted.vote(4, "a")
    refused = len(written)
    assert not store.vote(4, "b")
    assert len(written) == refused  # a refusal writes nothing


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
    assert store.first_of(2) == 91 and store.first_of(3) is None


def test_a_file_from_before_votes_were_kept_counts_its_epoch_as_voted(tmp_path: Path) -> None:
    """An epoch.json without a vote (written before votes were kept) may hold the term this
    candidate served: its epoch is not granted again to another (from the review)."""
    (tmp_path / "epoch.json").write_text(json.dumps({"epoch": 5, "history": [[5, 1]]}))
    store = EpochStore(tmp_path)
    assert not store.vote(5, "b") and store.refusal(5, "b") is not None
    assert store.vote(6, "b")
