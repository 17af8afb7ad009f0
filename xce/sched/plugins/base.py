"""The four extension points of a scheduling pass, as small protocols.

    order    which pending job is tried next (within one queue-priority level)
    filter   whether a host may ever run a job (static for the pass: online, queue hosts,
             select[]); free slots and memory are checked by the host pool itself
    score    which of the hosts that fit is best (lower key first): first-fit, pack, spread
    reserve  what to do when a job does not fit (EASY backfill: reserve the earliest start)

A plugin is a class with `name`, `kind`, the capabilities of its kind (class attributes
the pass reads instead of testing plugin names) and the method of its kind, in its own
module under xce/sched/plugins/, listed in the registry (xce/sched/plugins/__init__.py).
A plugin from elsewhere that leaves out a capability gets the safe answer (the helpers at
the end of this module).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol

from xce.core.model import JobSpec, QueueRecord
from xce.sched.snapshot import HostView, PendingArray, PendingJob, Snapshot

if TYPE_CHECKING:
    from xce.sched.passes.hostpool import HostPool
    from xce.sched.passes.reservation import Reservation

Item = PendingJob | PendingArray


@dataclass(slots=True)
class OrderContext:
    """What order plugins may read. `running_slots` and `group_slots` include the jobs this
    pass has already placed (the pipeline updates them before asking for the next job)."""

    now: float
    queue: QueueRecord
    usage_hours: Mapping[str, float]  # user -> decayed core-hours, running jobs included
    groups: Mapping[str, str]  # user -> fairshare group
    # read-only to plugins (a pass that counts nothing hands one empty mapping for both)
    running_slots: Mapping[str, int] = field(default_factory=dict)  # user -> slots in use
    group_slots: Mapping[str, int] = field(default_factory=dict)  # group -> slots in use
    snapshot: Snapshot | None = None  # the pass's view (multifactor reads its settings)
    # Seconds a pending job is expected to run (xce/sched/predict.py), in a pass that
    # predicts; None otherwise. (The pass's own: predictions of specs alike are shared.)
    predict: Callable[[JobSpec], float | None] | None = None
    # Filled by an order that puts starving jobs first (`short-first`): their ids (an
    # array's number as text); the pass makes their reservation by walltimes.
    starved: set[str] | None = None

    def group_of(self, user: str) -> str:
        return self.groups.get(user, "default")


class OrderPlugin(Protocol):
    name: ClassVar[str]
    kind: ClassVar[str]
    # True when the order is submission order: the queues at one priority level that use
    # it are merged into one stream by submission, and the pass reads that stream as it
    # is, without calling `order` (a plugin that also filters or reorders must say False)
    submission_order: ClassVar[bool]
    # True when the order reads usage and slots in use (OrderContext): the pass then keeps
    # running tallies, a cost per running job per pass
    reads_usage: ClassVar[bool]
    # Optional `predicts`: True when the order reads run-time predictions
    # (`OrderContext.predict`); a pass hands them only to queues whose plugins say so.
    # Optional `wakes_at(submit_time, walltime_s, settings)`: when the order of a waiting
    # job changes with no event (a starvation guard); the simulator runs a pass then.

    def order(self, items: Collection[Item], ctx: OrderContext) -> Iterator[Item]:
        """Yield every item once; `items` come sorted by submission (a list, or a
        queue's live view, which may only be iterated)."""
        ...


class FilterPlugin(Protocol):
    name: ClassVar[str]
    kind: ClassVar[str]

    def accepts(self, host: HostView, spec: JobSpec, queue: QueueRecord) -> bool:
        """Whether `host` may run `spec` at all (decided once per pass and job shape)."""
        ...

    def refuses_any(self, spec: JobSpec, queue: QueueRecord) -> bool:
        """False when `accepts` is True for every host for this job and queue (no `-R`,
        no queue host list): the pass then does not ask per host."""
        ...

    # Optional class attribute `fixed`: True when `accepts` reads only a host's fixed
    # parts (name, size, attributes, devices, `schedulable`), never its free slots or
    # memory, so its answers may be kept from pass to pass while hosts and queues do not
    # change (xce/sched/passes/memo.py). A filter that does not say is asked every pass.


class ScorePlugin(Protocol):
    name: ClassVar[str]
    kind: ClassVar[str]
    # True when the key depends on free slots/memory (it then changes as jobs are placed)
    dynamic: ClassVar[bool]
    # True when placing a job can make a host's key better (pack); False when only worse
    # (spread). Assumed True when a plugin does not say.
    improving: ClassVar[bool]
    # False when every key is equal (first-fit): hosts keep name order and are not sorted
    ranks: ClassVar[bool]

    def key(self, pool: HostPool, i: int) -> tuple:
        """Sort key of host number `i` in `pool`; the lowest key is chosen."""
        ...


class ReservePlugin(Protocol):
    name: ClassVar[str]
    kind: ClassVar[str]
    # True when a multi-host job's reservation is the earliest set of hosts that can hold
    # it (xce/sched/passes/multihost.py, EASY); False: `reserve` answers for it as for any job
    host_sets: ClassVar[bool]
    # True when a job that cannot start stops the whole pass (strict FCFS): the simulator
    # then skips passes until a job ends, since nothing behind the head can start
    blocks_queue: ClassVar[bool]

    def reserve(
        self, pool: HostPool, hosts: Sequence[int], spec: JobSpec, now: float
    ) -> Reservation | None:
        """A reservation for `spec`, which fits none of `hosts` now, or None."""
        ...

    # Optional, read once per queue (`QueuePolicy`): `predicts` (True: the reservation is
    # timed by run-time predictions and later jobs are judged by theirs, not by walltimes),
    # `shortest_first` (True: once the reservation is held, the queue's remaining jobs are
    # tried shortest predicted first) and `default_order` (the order plugin a queue that
    # names none gets with this reservation, instead of `fcfs`).


def fixed(filter_plugin: FilterPlugin) -> bool:
    return bool(getattr(filter_plugin, "fixed", False))


def submission_order(order: OrderPlugin) -> bool:
    return bool(getattr(order, "submission_order", False))


def reads_usage(order: OrderPlugin) -> bool:
    return bool(getattr(order, "reads_usage", True))


def ranks(score: ScorePlugin) -> bool:
    return bool(getattr(score, "ranks", True))


def reserves_host_sets(reserve: ReservePlugin) -> bool:
    return bool(getattr(reserve, "host_sets", False))


def blocks_queue(reserve: ReservePlugin | None) -> bool:
    return reserve is not None and bool(getattr(reserve, "blocks_queue", False))


def predicts(plugin: OrderPlugin | ReservePlugin | None) -> bool:
    return plugin is not None and bool(getattr(plugin, "predicts", False))


def shortest_first(reserve: ReservePlugin | None) -> bool:
    return reserve is not None and bool(getattr(reserve, "shortest_first", False))
