"""Every change to the cluster is one of these events.

The same events are applied live, written to the WAL and shipped to standbys, so recovery,
replication and normal operation share a single code path: `ClusterState.apply`. Events carry
their own time (`at`), which keeps the core free of clock reads and replay deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

from xce.core.arrayspec import IndexSet
from xce.core.model import HostSlots, HostUsage, JobSpec, QueueRecord, ReservationRecord, Usage


@dataclass(frozen=True, slots=True)
class Event:
    at: float


# --- queues -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueCreated(Event):
    queue: QueueRecord


@dataclass(frozen=True, slots=True)
class QueueOpened(Event):
    name: str


@dataclass(frozen=True, slots=True)
class QueueClosed(Event):
    name: str


@dataclass(frozen=True, slots=True)
class QueueActivated(Event):
    name: str


@dataclass(frozen=True, slots=True)
class QueueDeactivated(Event):
    name: str


@dataclass(frozen=True, slots=True)
class QueueModified(Event):
    """The queue's settings replaced by `queue` (same name; open/active as they were)."""

    queue: QueueRecord


@dataclass(frozen=True, slots=True)
class QueueDeleted(Event):
    """Only a queue no live job is in (pending, running, suspended) may go."""

    name: str


# --- hosts --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HostRegistered(Event):
    """A worker (re)joined; resources are updated, the admin state is kept."""

    name: str
    slots: int
    memory_mb: int
    attributes: tuple[tuple[str, str], ...] = ()
    gres: tuple[tuple[str, str], ...] = ()  # devices by kind (xce/core/gres.py)


@dataclass(frozen=True, slots=True)
class HostOpened(Event):
    name: str


@dataclass(frozen=True, slots=True)
class HostClosed(Event):
    name: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class HostDrainStarted(Event):
    name: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class HostUnavailable(Event):
    """Missed heartbeats; its active jobs follow each queue's failure policy (HostJobLost)."""

    name: str


@dataclass(frozen=True, slots=True)
class HostAvailable(Event):
    name: str


# --- jobs ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobSubmitted(Event):
    number: int
    spec: JobSpec
    key: str = ""  # Idempotency-Key: a retry with it returns this job (replicated state)


@dataclass(frozen=True, slots=True)
class JobNumbersReserved(Event):
    """Job (and array) numbers `first`..`last` may be handed out from now on; numbers below
    `first` never used are skipped for good.

    A primary replicates a reservation before it hands out a number from it, and its first
    reservation in a term starts above the highest one it knows (xce/controller/numbers.py):
    a job lost in an async failover leaves its number a gap, never someone else's job.
    """

    first: int
    last: int


@dataclass(frozen=True, slots=True)
class ArraySubmitted(Event):
    number: int
    spec: JobSpec
    indices: IndexSet
    max_concurrent: int | None = None
    key: str = ""  # Idempotency-Key


@dataclass(frozen=True, slots=True)
class JobStarted(Event):
    """Dispatched to a host: the job is RUN and holds its slots from now on."""

    job_id: str
    host: str
    # The devices granted ("gpu:0", ...): in the record so that a restart or a failover
    # hands the job the same ones and never grants them twice.
    devices: tuple[str, ...] = ()
    # A multi-host job's whole allocation, first host = `host` (appended): empty
    # for a single-host job, which holds all its slots on `host`.
    hosts: tuple[HostSlots, ...] = ()


@dataclass(frozen=True, slots=True)
class JobSuspended(Event):
    job_id: str
    by_system: bool = False


@dataclass(frozen=True, slots=True)
class JobResumed(Event):
    job_id: str


@dataclass(frozen=True, slots=True)
class JobKillRequested(Event):
    """Asks the worker to signal an active job; it becomes EXIT when the worker reports, or
    PEND again with a new attempt when `requeue` (a requeue of a running job waits for its
    attempt to end, so the job never runs twice)."""

    job_id: str
    requeue: bool = False


@dataclass(frozen=True, slots=True)
class JobKilled(Event):
    """Ends a job at once: a waiting one, or an active one whose host is gone."""

    job_id: str
    reason: str = "killed"


@dataclass(frozen=True, slots=True)
class JobRequeued(Event):
    job_id: str
    reason: str = "requeued"


@dataclass(frozen=True, slots=True)
class JobHostLost(Event):
    """The job's host became unavailable; `requeue` says which policy applied."""

    job_id: str
    requeue: bool
    host: str = ""  # the lost host, when not the first one of a multi-host job (appended)


@dataclass(frozen=True, slots=True)
class JobFinished(Event):
    job_id: str
    attempt: int
    exit_code: int | None
    exit_signal: int | None = None
    usage: Usage | None = None
    reason: str = ""
    outputs: tuple[str, ...] = ()
    # Each host's part of `usage` for a multi-host job (appended).
    host_usage: tuple[HostUsage, ...] = ()
    # Outputs the worker could not return, each "NAME: why" (appended): the job keeps them
    # and its reason says so, so missing files are never a silent DONE.
    output_problems: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class JobUsageReported(Event):
    job_id: str
    attempt: int
    usage: Usage


@dataclass(frozen=True, slots=True)
class ArrayHeld(Event):
    """Whole-array suspend of the tasks that have not started (PSUSP)."""

    number: int


@dataclass(frozen=True, slots=True)
class ArrayReleased(Event):
    number: int


@dataclass(frozen=True, slots=True)
class ArrayCancelled(Event):
    """Whole-array kill of the tasks that have not started: they never materialise."""

    number: int
    reason: str = "killed"


@dataclass(frozen=True, slots=True)
class JobModified(Event):
    """`xce job modify` (bmod, scontrol update): a job's or a whole array's spec replaced.

    The service validates the change as a submission (queue rules, feasibility); here only
    what keeps the state sound is checked: a pending job may change anything but its
    owner, an active one only its name and walltime.
    """

    job_id: str
    spec: JobSpec


@dataclass(frozen=True, slots=True)
class JobPreempted(Event):
    """A running job makes room for `by` (xce/sched/passes/preemption.py): suspended (SSUSP, its
    slots free, its memory still held) or, with `requeue`, killed and queued again."""

    job_id: str
    by: str
    requeue: bool = False


# --- retention ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobsPurged(Event):
    """Retention: finished plain jobs and whole finished arrays (with their tasks) leave the
    state. The primary writes it before a checkpoint (`ControllerService.purge_finished`),
    so every node drops the same jobs at the same point of the log and no standby purges on
    its own clock. It names ids only (a plain job's id or an array's number): the records
    themselves were logged when they changed."""

    ids: tuple[str, ...]


# --- advance reservations -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReservationAdded(Event):
    """A new advance reservation; its name is unique among the reservations held."""

    reservation: ReservationRecord


@dataclass(frozen=True, slots=True)
class ReservationDeleted(Event):
    """Ends a reservation for good (by hand, or an ended one past retention). Jobs that
    target it stay pending, with a reason naming it."""

    name: str
