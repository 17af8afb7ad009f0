"""The epoch (generation number) of primary terms, kept durably in the state directory.

Every term a candidate starts as primary gets an epoch one higher than any it has seen, and
`epoch.json` records it before the first write of the term, with the WAL position the term
starts at (`history`: [[epoch, first_seq], ...], Kafka's leader-epoch idea). Frames, requests
and responses carry the epoch, so an old primary meets a higher one and steps down; and a
standby that rejoins is checked against the history: records it holds past the point where
its epoch ended were never part of the new primary's log, so it must start over from a
checkpoint instead of continuing from a diverged tail.
"""

from __future__ import annotations

import json
from pathlib import Path

from xce.auth.files import atomic_write


class EpochStore:
    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "epoch.json"
        self.epoch = 0
        self.history: list[tuple[int, int]] = []
        if self.path.exists():
            data = json.loads(self.path.read_text())
            self.epoch = int(data["epoch"])
            self.history = [(int(e), int(s)) for e, s in data.get("history", [])]

    def _save(self) -> None:
        data = {"epoch": self.epoch, "history": [list(h) for h in self.history]}
        atomic_write(self.path, json.dumps(data).encode(), 0o600)

    def observe(self, epoch: int) -> bool:
        """Adopt a higher epoch seen on the wire; True if it was new."""
        if epoch <= self.epoch:
            return False
        self.epoch = epoch
        self._save()
        return True

    def begin_term(self, at_least: int, first_seq: int) -> int:
        """Start a primary term: a new epoch above `at_least` and every epoch seen so far."""
        self.epoch = max(self.epoch, at_least) + 1
        self.history.append((self.epoch, first_seq))
        self._save()
        return self.epoch

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
