"""`Applier`: the one place that applies an event to `ClusterState` with its observers.

Events are applied in three places (the controller's `commit`, recovery's WAL replay and a
standby's follower), and each of them feeds the same observers around `state.apply`: every
observer's `before(state, event)` in order, then the apply, then every observer's
`after(state, event, seq)` in order (`seq`: the event's WAL position). Once a batch is
durable, `durable(seq)`; after recovery has replayed the log, `recovered(...)`.

The observers are handed in by whoever composes (xce/server/compose.py and main.py, tests):
this module and the store know none of them (the accounting feed, xce/accounting/feed.py,
is one). The apply path is hot: the observers are a tuple, and nothing is allocated per
event.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from xce.core.events import Event
from xce.core.state import ClusterState


class Observer(Protocol):
    """Told of every applied event, on the applying thread; must not block."""

    def before(self, state: ClusterState, event: Event) -> None:
        """`event` is about to apply to `state` (may raise: the event does not apply)."""

    def after(self, state: ClusterState, event: Event, seq: int) -> None:
        """`event`, WAL record `seq`, has applied to `state`."""

    def durable(self, seq: int) -> None:
        """Everything applied up to WAL record `seq` is durable."""

    def recovered(self, state: ClusterState, checkpoint_seq: int, last_seq: int) -> None:
        """Recovery rebuilt `state` from the checkpoint at `checkpoint_seq` and the WAL
        records after it up to `last_seq`."""


class Applier:
    """A `ClusterState` and the observers fed around each `apply`, in order."""

    __slots__ = ("observers", "state")

    def __init__(self, state: ClusterState, observers: Iterable[Observer] = ()) -> None:
        self.state = state
        self.observers: tuple[Observer, ...] = tuple(observers)

    def apply(self, event: Event, seq: int) -> None:
        """`before` hooks, `state.apply(event)`, `after` hooks; an exception from a hook or
        the apply propagates (the `after` hooks run only once the event applied)."""
        state = self.state
        observers = self.observers
        for observer in observers:
            observer.before(state, event)
        state.apply(event)
        for observer in observers:
            observer.after(state, event, seq)

    def begin(self, event: Event) -> None:
        """The first half of `apply` (`before` hooks and the apply), for a caller that must
        do something (append the record) before the `after` hooks: then `finish`."""
        state = self.state
        for observer in self.observers:
            observer.before(state, event)
        state.apply(event)

    def finish(self, event: Event, seq: int) -> None:
        """The second half of `apply`: the `after` hooks of an event `begin` applied."""
        state = self.state
        for observer in self.observers:
            observer.after(state, event, seq)

    def durable(self, seq: int) -> None:
        for observer in self.observers:
            observer.durable(seq)

    def recovered(self, checkpoint_seq: int, last_seq: int) -> None:
        state = self.state
        for observer in self.observers:
            observer.recovered(state, checkpoint_seq, last_seq)
