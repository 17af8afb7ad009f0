"""Claiming an epoch: who may vote for whom, and which epoch a lone candidate may take.

The rule (docs/ARCHITECTURE.md, HA table), Raft's term vote without Raft's log replication:

- A candidate first votes for itself (persisted in epoch.json by `EpochStore.vote`), then
  asks every other candidate (`POST /api/v1/cluster/vote`, bearer token with
  cluster:replicate, like the replication link). It is primary for epoch E only once a
  majority of the candidates, itself included, granted E.
- A voter grants E to a candidate only if E is above every epoch it voted in and not below
  one it has seen (or it is the same grant asked again: Raft's rule, where hearing of a
  newer term does not use up the vote in it), the candidate's log is at least as long as its own
  (last record's epoch, then sequence), and it is not following a live primary (nor is one).
  The grant is on disk before the answer leaves.
- Two candidates have no majority without each other. The tie-breaker: when the other has
  been unreachable for the whole failover timeout, a candidate may claim an epoch alone, but
  only an epoch of its own class, (E - 1) % 2 == its rank. Two lone claims can therefore
  never name the same epoch, and a lone claim never collides with a voted one (the other
  candidate would have had to vote for itself and for the claimant). Its writes are then
  bounded by the worker lease (xce/ha/lease.py), as before.

So two primaries of one epoch cannot exist: each holds its own vote for it, a voter votes
once per epoch, majorities intersect, and lone claims are disjoint by class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xce.core.errors import InvalidRequest
from xce.ha.epochs import EpochStore


@dataclass(frozen=True)
class VoteRequest:
    epoch: int
    candidate: str
    last_epoch: int  # epoch of the candidate's last record
    last_seq: int  # its sequence number

    @classmethod
    def parse(cls, body: Any) -> VoteRequest:
        try:
            req = cls(
                int(body["epoch"]),
                str(body["candidate"]),
                int(body["last_epoch"]),
                int(body["last_seq"]),
            )
        except (KeyError, TypeError, ValueError):
            raise InvalidRequest(
                "a vote request needs epoch, candidate, last_epoch and last_seq"
            ) from None
        if req.epoch < 1 or req.last_epoch < 0 or req.last_seq < 0:
            raise InvalidRequest("a vote request's numbers must not be negative")
        return req

    def as_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "candidate": self.candidate,
            "last_epoch": self.last_epoch,
            "last_seq": self.last_seq,
        }


@dataclass(frozen=True)
class Verdict:
    granted: bool
    epoch: int  # the voter's highest epoch seen after deciding: a loser learns it
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"granted": self.granted, "epoch": self.epoch, "reason": self.reason}


def decide(
    epochs: EpochStore,
    req: VoteRequest,
    *,
    candidates: list[str],
    me: str,
    log_position: tuple[int, int],
    busy: str | None,
) -> Verdict:
    """One voter's answer to `req`; a grant is persisted before this returns.

    `busy` says why this voter will not vote now (it is, or follows, a live primary).
    """
    if req.candidate not in candidates or req.candidate == me:
        return Verdict(False, epochs.seen, f"{req.candidate} is not another candidate")
    repeat = (req.epoch, req.candidate) == (epochs.voted_epoch, epochs.voted_for)
    if not repeat:
        if busy:
            return Verdict(False, epochs.seen, busy)
        refusal = epochs.refusal(req.epoch, req.candidate)
        if refusal:
            return Verdict(False, epochs.seen, refusal)
        if (req.last_epoch, req.last_seq) < log_position:
            return Verdict(
                False,
                epochs.seen,
                f"this candidate's log ({log_position[0]}, {log_position[1]}) is "
                f"ahead of {req.candidate}'s ({req.last_epoch}, {req.last_seq})",
            )
    if not epochs.vote(req.epoch, req.candidate):
        return Verdict(False, epochs.seen, f"already voted in epoch {epochs.voted_epoch}")
    return Verdict(True, epochs.seen)


def lone_epoch(seen: int, rank: int, candidates: int = 2) -> int:
    """The smallest epoch above `seen` that the candidate of `rank` may claim alone."""
    epoch = seen + 1
    while (epoch - 1) % candidates != rank:
        epoch += 1
    return epoch


def majority(granted: int, candidates: int) -> bool:
    return granted * 2 > candidates
