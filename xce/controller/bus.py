"""The live change stream: which jobs, arrays, hosts and queues changed, in commit order.

`ControllerService.commit` hands every durable batch of events to its `committed` hooks; the
composition (xce/server/compose.py) gives the bus that hook list, and the bus joins it
when its first subscriber arrives, so until someone subscribes a controller pays nothing for
the stream. From then on every batch reaches `EventBus.publish`. The bus
turns each event into the keys it touched (`("job", "17[3]")`, `("host", "w1")`, ...) and
numbers them. It keeps only keys, never views: a subscriber's handler renders the *current*
view of a key when it sends it, so publishing costs O(1) per event on the controller's hot
path and a burst of changes to one job is sent once.

Promises:
- Every change committed after a subscription started reaches that subscriber, in order, or
  the subscriber is told to re-fetch (`Change.kind == "resync"`). Nothing blocks the
  controller: each subscriber has a bounded queue; a full queue is emptied and replaced by a
  single resync marker.
- A client that reconnects with the last id it saw (`<stream>-<seq>`) gets every change after
  it from the bus's history, or a resync when the history no longer reaches back that far or
  the id belongs to another stream (another controller, or this one before a restart).
"""

from __future__ import annotations

import asyncio
import secrets
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from xce.core import events as ev
from xce.core.state import ClusterState

HISTORY = 20_000
QUEUE_SIZE = 5_000


@dataclass(frozen=True, slots=True)
class Change:
    """One changed object: `kind` is job, array, host, queue or resync; `user` owns a job."""

    seq: int
    kind: str
    key: str
    user: str | None = None


Visible = Callable[[Change], bool]


class Subscription:
    """One consumer's bounded queue; `overflowed` means it must re-fetch everything."""

    def __init__(self, bus: EventBus, visible: Visible, size: int) -> None:
        self.bus = bus
        self.visible = visible
        self.queue: asyncio.Queue[Change] = asyncio.Queue(size)

    def offer(self, change: Change) -> None:
        if not self.visible(change):
            return
        try:
            self.queue.put_nowait(change)
        except asyncio.QueueFull:
            # A slow reader: forget what it has not read and tell it to re-fetch.
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(Change(change.seq, "resync", "overflow"))

    async def get_batch(self, timeout: float) -> list[Change]:
        """Every queued change (at least one), or [] after `timeout` seconds of silence."""
        try:
            first = await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            return []
        batch = [first]
        while not self.queue.empty():
            batch.append(self.queue.get_nowait())
        return batch

    def close(self) -> None:
        self.bus.subscribers.discard(self)


class EventBus:
    """Numbers committed changes and fans them out to subscribers (see the module doc)."""

    def __init__(
        self,
        state: ClusterState,
        hooks: list[Callable[[list[ev.Event]], None]] | None = None,
        history: int = HISTORY,
        queue_size: int = QUEUE_SIZE,
    ) -> None:
        self.state = state
        # The commit hooks `publish` joins on the first subscription (None: the caller
        # calls `publish` itself).
        self._hooks = hooks
        self.stream = secrets.token_hex(4)
        self.seq = 0
        self.history: deque[Change] = deque(maxlen=history)
        self.queue_size = queue_size
        self.subscribers: set[Subscription] = set()
        self._ran_on: dict[str, tuple[str, ...]] = {}  # active job -> its hosts

    def event_id(self, seq: int) -> str:
        return f"{self.stream}-{seq}"

    def publish(self, events: Iterable[ev.Event]) -> None:
        """Called once per durable commit batch; never awaits, never raises on a reader."""
        for event in events:
            for kind, key, user in self._keys(event):
                self.seq += 1
                change = Change(self.seq, kind, key, user)
                self.history.append(change)
                for sub in list(self.subscribers):
                    sub.offer(change)

    def subscribe(self, last_id: str | None, visible: Visible) -> tuple[Subscription, bool]:
        """A new subscription and whether it resumes `last_id` (False: re-fetch first)."""
        if self._hooks is not None:
            self._hooks.append(self.publish)
            self._hooks = None
        sub = Subscription(self, visible, self.queue_size)
        resumed = False
        since = self._parse(last_id)
        if since is not None:
            oldest = self.history[0].seq if self.history else self.seq + 1
            if since == self.seq or oldest <= since + 1:
                resumed = True
                for change in self.history:
                    if change.seq > since:
                        sub.offer(change)
        self.subscribers.add(sub)
        return sub, resumed

    def _parse(self, last_id: str | None) -> int | None:
        if not last_id:
            return None
        stream, _, seq = last_id.strip().rpartition("-")
        if stream != self.stream or not seq.isdigit() or int(seq) > self.seq:
            return None
        return int(seq)

    def _keys(self, event: ev.Event) -> list[tuple[str, str, str | None]]:
        state = self.state
        if isinstance(event, ev.ReservationAdded):
            return [("reservation", event.reservation.name, None)]
        if isinstance(event, ev.ReservationDeleted):
            return [("reservation", event.name, None)]
        if isinstance(event, (ev.QueueCreated,)):
            return [("queue", event.queue.name, None)]
        if isinstance(
            event, (ev.QueueOpened, ev.QueueClosed, ev.QueueActivated, ev.QueueDeactivated)
        ):
            return [("queue", event.name, None)]
        if isinstance(
            event,
            (
                ev.HostRegistered,
                ev.HostOpened,
                ev.HostClosed,
                ev.HostDrainStarted,
                ev.HostUnavailable,
                ev.HostAvailable,
            ),
        ):
            return [("host", event.name, None)]
        if isinstance(
            event, (ev.ArraySubmitted, ev.ArrayHeld, ev.ArrayReleased, ev.ArrayCancelled)
        ):
            array = state.arrays.get(event.number)
            return [("array", str(event.number), array.spec.user if array else None)]
        if isinstance(event, ev.JobSubmitted):
            return [("job", str(event.number), event.spec.user)]
        if isinstance(event, ev.JobModified) and event.job_id not in state.jobs:
            return [("array", event.job_id, event.spec.user)]  # a whole array's new spec
        job_id = getattr(event, "job_id", None)
        if job_id is None:
            return []
        job = state.jobs.get(job_id)
        user = job.spec.user if job else None
        keys: list[tuple[str, str, str | None]] = [("job", job_id, user)]
        if job is not None and job.array_id is not None and isinstance(event, ev.JobStarted):
            keys.append(("array", str(job.array_id), user))  # its pending rest shrank
        if isinstance(event, ev.JobUsageReported):
            return keys
        # A requeued or lost job no longer names its host: remember where it ran, so the host
        # whose slots it freed is sent too.
        if isinstance(event, ev.JobStarted):  # every host of a multi-host job
            self._ran_on[job_id] = tuple(p.host for p in event.hosts) or (event.host,)
        hosts = self._ran_on.get(job_id) or ((job.host,) if job and job.host else ())
        if job is None or not job.state.active:
            self._ran_on.pop(job_id, None)
        keys.extend(("host", host, None) for host in hosts)
        return keys
