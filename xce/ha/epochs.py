"""The epoch (generation number) of primary terms, and this candidate's votes for them.

An epoch is claimed, not computed (docs/ARCHITECTURE.md, HA table): a candidate becomes
primary for epoch E only once enough candidates granted it E (xce/ha/election.py), and each
voter writes "voted for E (candidate X)" here, durably, *before* it answers. A vote is given
at most once per epoch, never for an epoch at or below one this candidate voted in, and never
for one below an epoch it has seen, so two candidates can never both collect enough votes for
one epoch (Raft's term vote, without Raft's log replication). As in Raft, hearing of epoch E
does not use up the vote in E: a candidate's own vote for E is on its health page at once,
and a voter that saw it there must still be able to grant it E (the primary of a
switchover sees its target's vote before the target's request arrives).

`epoch.json` (0600, atomic + fsync) also keeps the history of terms: [[epoch, first_seq],
...] (Kafka's leader-epoch idea). Frames, requests and responses carry the epoch, so an old
primary meets a higher one and steps down; and a standby that rejoins is checked against
the history: records it holds past the point where its epoch ended were never part of the
new primary's log, so it must start over from a checkpoint instead of continuing from a
diverged tail.
"""

from __future__ import annotations

import json
from pathlib import Path

from xce.auth.files import atomic_write


class Overtaken(RuntimeError):
    """A newer epoch was seen between winning an epoch and beginning its term."""


class EpochStore:
    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "epoch.json"
        self.epoch = 0
        self.history: list[tuple[int, int]] = []
        self.voted_epoch = 0
        self.voted_for = ""
        if self.path.exists():
            data = json.loads(self.path.read_text())
            self.epoch = int(data["epoch"])
            self.history = [(int(e), int(s)) for e, s in data.get("history", [])]
            vote = data.get("voted")
            if vote is None:  # a file from before votes were kept: its epoch counts as
                vote = {"epoch": self.epoch}  # voted in (it may have been this one's term)
            self.voted_epoch = int(vote.get("epoch", 0))
            self.voted_for = str(vote.get("candidate", ""))

    def _save(self) -> None:
        data = {
            "epoch": self.epoch,
            "history": [list(h) for h in self.history],
            "voted": {"epoch": self.voted_epoch, "candidate": self.voted_for},
        }
        atomic_write(self.path, json.dumps(data).encode(), 0o600)

    @property
    def seen(self) -> int:
        """The highest epoch this candidate knows of: its term's, one it observed or voted in."""
        return max(self.epoch, self.voted_epoch)

    def observe(self, epoch: int) -> bool:
        """Adopt a higher epoch seen on the wire; True if it was new."""
        if epoch <= self.epoch:
            return False
        self.epoch = epoch
        self._save()
        return True

    def refusal(self, epoch: int, candidate: str) -> str | None:
        """Why this candidate may not grant `candidate` epoch `epoch` (None: it may).

        Safety needs only one vote per epoch (majorities intersect, lone claims are
        disjoint by class: election.py): an epoch merely seen, never voted in, may still
        be granted, as in Raft, where a newer term resets the vote.
        """
        if epoch == self.voted_epoch and candidate == self.voted_for:
            return None  # the same grant asked again (its answer was lost)
        if epoch <= self.voted_epoch:
            return f"this candidate already voted in epoch {self.voted_epoch}"
        if epoch < self.epoch:
            return f"epoch {epoch} is below {self.epoch}, which this candidate has seen"
        return None

    def vote(self, epoch: int, candidate: str) -> bool:
        """Grant `candidate` epoch `epoch` if this candidate may, and persist it first.

        True for a new grant and for the same grant asked again (a lost answer); False for
        an epoch already voted in or below one seen (`refusal`). The grant is on disk
        (fsync) when this returns: a voter that crashes and restarts keeps its vote.
        """
        if epoch == self.voted_epoch and candidate == self.voted_for:
            return True
        if self.refusal(epoch, candidate) is not None:
            return False
        self.voted_epoch, self.voted_for = epoch, candidate
        self.epoch = epoch  # the vote is seen: frames of older terms are refused from now on
        self._save()
        return True

    def begin_term(self, epoch: int, first_seq: int, candidate: str) -> int:
        """Start the term this candidate won: its own vote for `epoch` must be on disk."""
        if (self.voted_epoch, self.voted_for) != (epoch, candidate):
            raise RuntimeError(
                f"no vote of {candidate} for epoch {epoch} here: refusing to "
                "start a term it did not win"
            )
        if self.epoch > epoch:  # a newer epoch was seen since the vote: this one is over
            raise Overtaken(
                f"epoch {self.epoch} was seen after {candidate} won epoch {epoch}: "
                "refusing to start a term already overtaken"
            )
        self.epoch = epoch
        self.history = [h for h in self.history if h[0] < epoch]
        self.history.append((epoch, first_seq))
        self._save()
        return epoch

    def begin_solo_term(self, first_seq: int) -> int:
        """A single-candidate cluster needs no votes: the next epoch is simply its own."""
        epoch = self.seen + 1
        self.voted_epoch, self.voted_for = epoch, "self"
        self.epoch = epoch
        self.history.append((epoch, first_seq))
        self._save()
        return epoch

    def adopt_history(self, history: list[tuple[int, int]]) -> None:
        """A standby copies its primary's history (sent in the welcome) so that it can judge
        divergence the same way if it is promoted later."""
        self.history = sorted(set(history))
        if self.history:
            self.epoch = max(self.epoch, self.history[-1][0])
        self._save()

    def end_of(self, epoch: int) -> int | None:
        """The last record sequence that belongs to `epoch` in this history, if a later term
        started after it; None if `epoch` is still the newest term known here."""
        for e, first in self.history:
            if e > epoch:
                return first - 1
        return None

    def first_of(self, epoch: int) -> int | None:
        """The first record sequence of `epoch` in this history (None if it has none)."""
        for e, first in self.history:
            if e == epoch:
                return first
        return None
