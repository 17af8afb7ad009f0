"""The vote rules (xce/ha/election.py): who grants which epoch to whom, and lone claims."""

from __future__ import annotations

from pathlib import Path

from xce.ha.election import VoteRequest, decide, lone_epoch, majority
from xce.ha.epochs import EpochStore

CANDIDATES = ["http://a", "http://b", "http://c"]


def ask(
    store: EpochStore,
    epoch: int,
    candidate: str,
    log: tuple[int, int] = (1, 10),
    mine: tuple[int, int] = (1, 10),
    busy: str | None = None,
) -> bool:
    req = VoteRequest(epoch, candidate, *log)
    return decide(
        store, req, candidates=CANDIDATES, me="http://c", log_position=mine, busy=busy
    ).granted


def test_no_two_grants_for_one_epoch(tmp_path: Path) -> None:
    voter = EpochStore(tmp_path)
    assert ask(voter, 2, "http://a")
    assert not ask(voter, 2, "http://b")
    assert ask(voter, 2, "http://a")  # repeated, same answer
    assert ask(voter, 3, "http://b")


def test_refuses_epochs_below_one_it_has_seen_and_shorter_logs(tmp_path: Path) -> None:
    voter = EpochStore(tmp_path)
    voter.observe(5)
    assert not ask(voter, 4, "http://a")
    assert not ask(voter, 6, "http://a", log=(1, 9))  # its log is behind this voter's
    assert not ask(voter, 6, "http://a", log=(0, 50))  # an older last epoch is behind too
    assert voter.voted_epoch == 0  # refusals leave nothing behind
    assert ask(voter, 6, "http://a", log=(2, 3))


def test_an_epoch_only_seen_can_still_be_granted(tmp_path: Path) -> None:
    """Raft's rule: seeing epoch 5 (a candidate's own vote for it, on its health page) does
    not use up this voter's vote in 5; one vote per epoch is what keeps one primary."""
    voter = EpochStore(tmp_path)
    voter.observe(5)
    assert ask(voter, 5, "http://a")
    assert not ask(voter, 5, "http://b")
    assert (voter.voted_epoch, voter.voted_for) == (5, "http://a")


def test_a_voter_with_a_live_primary_or_a_stranger_refuses(tmp_path: Path) -> None:
    voter = EpochStore(tmp_path)
    assert not ask(voter, 2, "http://a", busy="follows a live primary")
    assert not ask(voter, 2, "http://evil")
    assert not ask(voter, 2, "http://c")  # itself: it votes for itself elsewhere
    assert voter.voted_epoch == 0


def test_a_restarted_voter_keeps_its_vote(tmp_path: Path) -> None:
    assert ask(EpochStore(tmp_path), 7, "http://a")
    restarted = EpochStore(tmp_path)
    assert not ask(restarted, 7, "http://b")
    assert ask(restarted, 7, "http://a")
    assert restarted.epoch == 7  # and the vote counts as seen: older frames are refused


def test_lone_claims_of_two_candidates_never_share_an_epoch() -> None:
    for seen in range(20):
        a, b = lone_epoch(seen, 0), lone_epoch(seen, 1)
        assert a > seen and b > seen and a != b
        assert (a - 1) % 2 == 0 and (b - 1) % 2 == 1
    assert lone_epoch(0, 0) == 1 and lone_epoch(1, 1) == 2 and lone_epoch(2, 0) == 3


def test_majorities() -> None:
    assert not majority(1, 2) and majority(2, 2)
    assert not majority(1, 3) and majority(2, 3)
    assert majority(3, 5) and not majority(2, 4)
