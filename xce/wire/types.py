"""Which Python types go on the wire, and in what order.

The order of `EVENT_TYPES` gives each event its union ordinal and the order of a dataclass's
fields gives each field its Cap'n Proto ordinal: both are append-only, so old WAL segments and
checkpoints stay readable. `xce/wire/xce.capnp` is generated from this (see `schema.py`) and a
test fails if the committed schema and the dataclasses disagree.
"""

from __future__ import annotations

from xce.core import events as ev
from xce.core.arrayspec import IndexSet
from xce.core.deps import DepTerm
from xce.core.model import (
    ArrayRecord,
    HostRecord,
    HostSlots,
    HostUsage,
    JobRecord,
    JobSpec,
    QueueRecord,
    ReservationRecord,
    Usage,
)

# Append only: the position is the union ordinal in the WAL.
EVENT_TYPES: tuple[type[ev.Event], ...] = (
    ev.QueueCreated,
    ev.QueueOpened,
    ev.QueueClosed,
    ev.QueueActivated,
    ev.QueueDeactivated,
    ev.HostRegistered,
    ev.HostOpened,
    ev.HostClosed,
    ev.HostDrainStarted,
    ev.HostUnavailable,
    ev.HostAvailable,
    ev.JobSubmitted,
    ev.ArraySubmitted,
    ev.JobStarted,
    ev.JobSuspended,
    ev.JobResumed,
    ev.JobKillRequested,
    ev.JobKilled,
    ev.JobRequeued,
    ev.JobHostLost,
    ev.JobFinished,
    ev.JobUsageReported,
    ev.ArrayHeld,
    ev.ArrayReleased,
    ev.ArrayCancelled,
    ev.JobsPurged,
    ev.JobNumbersReserved,
    ev.QueueModified,
    ev.QueueDeleted,
    ev.ReservationAdded,
    ev.ReservationDeleted,
    ev.JobModified,
    ev.JobPreempted,
)

# Structs that appear inside events or checkpoints.
RECORD_TYPES: tuple[type, ...] = (
    Usage,
    DepTerm,
    JobSpec,
    QueueRecord,
    HostRecord,
    JobRecord,
    ArrayRecord,
    ReservationRecord,
    HostSlots,
    HostUsage,
)

SPECIAL = {IndexSet: "IndexSet"}
