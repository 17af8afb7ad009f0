"""Queue and host administration: create, modify, delete, open/close, (de)activate a
queue; open, close or drain a host.

`Administration` checks an operator's change against the state and commits its event through
the service it is given. A queue's settings are checked as a whole (plugins the service's
registry knows, defaults within maximums, the queues it preempts exist) whichever way they
arrive."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from xce.core import events as ev
from xce.core import queue_rules
from xce.core.errors import Conflict, InvalidRequest
from xce.core.model import HostAdmin, QueueRecord

if TYPE_CHECKING:
    from xce.controller.service import ControllerService


class Administration:
    """Queue and host actions, committed through `service`."""

    def __init__(self, service: ControllerService) -> None:
        self.service = service

    def _check_queue(self, queue: QueueRecord) -> None:
        """A queue's settings hold together: known plugins, defaults within maximums, the
        queues it preempts exist."""
        problem = queue_rules.check_preempt(queue, self.service.state.queues)
        if problem:
            raise InvalidRequest(problem)
        try:
            self.service.registry.policy_for(queue.plugins)
        except ValueError as exc:
            raise InvalidRequest(f"plugins: {exc}") from None
        problem = queue_rules.check_settings(queue)
        if problem:
            raise InvalidRequest(problem)

    async def create_queue(self, queue: QueueRecord) -> QueueRecord:
        if queue.name in self.service.state.queues:
            raise Conflict(f"queue {queue.name!r} already exists")
        self._check_queue(queue)
        await self.service.commit([ev.QueueCreated(self.service.clock(), queue)])
        return self.service.state.queues[queue.name]

    async def modify_queue(self, name: str, changes: dict[str, object]) -> QueueRecord:
        """New settings for a queue (`changes` of QueueRecord fields, validated by the API
        schema); its jobs keep what they were submitted with."""
        old = self.service.state.queue(name)
        unknown = (
            set(changes)
            - {f.name for f in dataclasses.fields(QueueRecord)}
            - {"name", "open", "active"}
        )
        fixed = set(changes) & {"name", "open", "active"}
        if unknown or fixed:
            raise InvalidRequest(
                f"cannot modify {', '.join(sorted(unknown | fixed))} of a "
                "queue (open/close and activate/deactivate have their own "
                "actions)"
            )
        new = dataclasses.replace(old, **changes)  # type: ignore[arg-type]
        self._check_queue(new)
        if new != old:
            await self.service.commit([ev.QueueModified(self.service.clock(), new)])
        return self.service.state.queues[name]

    async def delete_queue(self, name: str) -> None:
        """Delete a queue no live job is in; finished jobs keep its name."""
        self.service.state.queue(name)
        if name == self.service.settings.default_queue:
            raise Conflict(
                f"queue {name!r} is the default queue ([controller] "
                "default_queue): choose another default first"
            )
        await self.service.commit([ev.QueueDeleted(self.service.clock(), name)])

    async def queue_action(self, name: str, action: str) -> QueueRecord:
        queue = self.service.state.queue(name)
        now = self.service.clock()
        table = {
            "open": (queue.open, ev.QueueOpened),
            "close": (not queue.open, ev.QueueClosed),
            "activate": (queue.active, ev.QueueActivated),
            "deactivate": (not queue.active, ev.QueueDeactivated),
        }
        if action not in table:
            raise InvalidRequest(f"unknown queue action {action!r} (use {', '.join(table)})")
        already, event_type = table[action]
        if not already:
            await self.service.commit([event_type(now, name)])
        return self.service.state.queues[name]

    async def host_action(self, name: str, action: str, reason: str = "") -> None:
        host = self.service.state.host(name)
        now = self.service.clock()
        events: list[ev.Event]
        if action == "open":
            events = [] if host.admin is HostAdmin.OPEN else [ev.HostOpened(now, name)]
        elif action == "close":
            events = [ev.HostClosed(now, name, reason or "closed by admin")]
        elif action == "drain":
            events = [ev.HostDrainStarted(now, name, reason or "drained by admin")]
        else:
            raise InvalidRequest(f"unknown host action {action!r} (use open, close, drain)")
        await self.service.commit(events)
