"""The seam between the controller and durability.

The controller appends each event as it applies it, in apply order, and acknowledges a
request only after `sync()` returns: that is the whole durability contract. The WAL issue
plugs a group-committing, fsync'ing implementation in here; `MemoryEventLog` is the
non-durable default for a controller started without persistence.
"""

from __future__ import annotations

from typing import Any, Protocol

from xce.core.events import Event


class EventLog(Protocol):
    def check_writable(self) -> None:
        """Raise `Unavailable` if changes cannot be made durable now (checked before apply)."""

    def prepare(self, event: Event, offset: int = 0) -> Any:
        """Encode `event` as the record `offset` places after the next one, before it is
        applied (a commit encodes its whole batch first: offset 0, 1, ...).

        An event that cannot be encoded must fail here, while the state is still untouched,
        never after it was applied (a change in memory that the log cannot hold would make
        the next restart diverge).
        """

    def append(self, prepared: Any) -> None:
        """Queue what `prepare` returned; called right after the event applied, no await
        in between, so the log order is the apply order."""

    async def sync(self, durable: bool = False) -> None:
        """Return once every event appended so far is durable (or raise `Unavailable`).

        Under a relaxed fsync policy it may return earlier, unless `durable` is set.
        """


class MemoryEventLog:
    """Keeps nothing durable; counts what it saw so tests can check the seam is used."""

    def __init__(self) -> None:
        self.appended = 0

    def check_writable(self) -> None:
        return None

    def prepare(self, event: Event, offset: int = 0) -> Event:
        return event

    def append(self, prepared: Any) -> None:
        self.appended += 1

    async def sync(self, durable: bool = False) -> None:
        return None
