"""Why a pending job waits: a kind and its parameters, rendered to text only at the edge.

The scheduling pass (xce/sched/passes/pipeline.py) and preemption
(xce/sched/passes/preemption.py) decide on reasons by kind (`reason.kind is WaitKind.ROOM`),
never by matching text; the API, the CLI and the console read the rendered text
(`str(reason)`). Reasons are never stored durably nor sent to workers: only the rendered
text leaves the controller.

One frozen value per distinct reason: jobs sharing a spec share the object, as they shared
the string, so a pass over many waiting jobs allocates one per shape, not one per job.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from xce.core.fastinit import fast_init

_T = TypeVar("_T")


class WaitKind(enum.Enum):
    """What a job waits for; the value names it for people and logs."""

    ROOM = "room"  # free slots or memory (maybe holding the EASY reservation)
    PREEMPTED_ENDING = "preempted-ending"  # victims of a preemption for it are ending
    PREEMPTING = "preempting"  # this pass suspends or requeues victims for it
    DEVICES = "devices"  # free devices (GPUs) on hosts that have the slots
    LICENSE = "license"
    TOO_BIG = "too-big"  # no single host could ever hold it
    TOO_FEW = "too-few"  # its hosts together could never hold it
    TOO_FEW_DEVICES = "too-few-devices"
    NO_MATCH = "no-match"  # no online host matches select[]
    NO_HOST = "no-host"  # no online host in the queue
    BEGIN = "begin"  # --begin in the future
    DEPENDENCY = "dependency"
    DEPENDENCY_NEVER = "dependency-never"
    QUEUE_INACTIVE = "queue-inactive"
    QUEUE_LIMIT = "queue-limit"
    USER_LIMIT = "user-limit"
    ARRAY_LIMIT = "array-limit"
    NO_RESERVATION = "no-reservation"  # targets an advance reservation that does not exist
    RESERVATION_PENDING = "reservation-pending"  # ... that has not started
    RESERVATION_ENDED = "reservation-ended"
    RESERVATION_HOLDS = "reservation-holds"  # another advance reservation holds the host


@fast_init
@dataclass(frozen=True, slots=True)
class WaitReason:
    """A kind, its parameters (see the constructors below for what each kind carries) and
    `held`, the EASY reservation the job holds (its description), when it holds one."""

    kind: WaitKind
    params: tuple[Any, ...] = ()
    held: str = ""

    def __str__(self) -> str:
        text = _RENDER[self.kind](*self.params)
        return f"{text} ({self.held})" if self.held else text

    def holding(self, description: str) -> WaitReason:
        """The same reason for the job that holds the reservation `description`."""
        return WaitReason(self.kind, self.params, description)

    def without_reservation(self) -> WaitReason:
        """The same reason without the reservation: what other jobs of its shape read."""
        return WaitReason(self.kind, self.params) if self.held else self


def _devices(asked: tuple[tuple[str, str], ...]) -> str:
    kinds = ", ".join(f"{k} ({v} asked)" for k, v in asked)
    return f"waiting for free devices: {kinds}"


def _preempting(victims: tuple[str, ...], host: str, requeue: bool) -> str:
    how = "requeueing" if requeue else "suspending"
    plural = "s" if len(victims) > 1 else ""
    jobs = ", ".join(victims)
    return f"waiting for free slots or memory ({how} job{plural} {jobs} on host {host})"


def _holds(name: str, slots: int, host: str, start: float, end: float) -> str:
    what = "holds" if slots == 0 else f"holds {slots} slots of"
    return (
        f"reservation {name} {what} host {host} from "
        f"{start:.0f} until {end:.0f} and the job would still be running then"
    )


_RENDER: dict[WaitKind, Callable[..., str]] = {
    WaitKind.ROOM: lambda: "waiting for free slots or memory",
    WaitKind.PREEMPTED_ENDING: lambda host: (
        f"waiting for free slots or memory (preempted jobs on host {host} are ending)"
    ),
    WaitKind.PREEMPTING: _preempting,
    WaitKind.DEVICES: _devices,
    WaitKind.LICENSE: lambda name, asked, free: (
        f"waiting for license {name} ({asked} asked, {free} free)"
    ),
    WaitKind.TOO_BIG: lambda: "no host is big enough",
    WaitKind.TOO_FEW: lambda detail="": (
        f"no set of hosts is big enough: {detail}" if detail else "no set of hosts is big enough"
    ),
    WaitKind.TOO_FEW_DEVICES: lambda kind, count, most: (
        f"no host has {count} {kind} devices (the most is {most})"
    ),
    WaitKind.NO_MATCH: lambda: "no online host matches the resource requirement",
    WaitKind.NO_HOST: lambda: "no online host in the queue",
    WaitKind.BEGIN: lambda at: f"begin time not reached: eligible at {int(at)}",
    WaitKind.DEPENDENCY: lambda: "waiting for dependency",
    WaitKind.DEPENDENCY_NEVER: lambda: "dependency can never be satisfied",
    WaitKind.QUEUE_INACTIVE: lambda queue: f"queue {queue} is inactive",
    WaitKind.QUEUE_LIMIT: lambda queue, limit: (
        f"queue {queue} has reached its limit of {limit} running jobs"
    ),
    WaitKind.USER_LIMIT: lambda user, queue, limit: (
        f"user {user} has reached the limit of {limit} running jobs in queue {queue}"
    ),
    WaitKind.ARRAY_LIMIT: lambda: "array concurrency limit reached",
    WaitKind.NO_RESERVATION: lambda name: f"reservation {name} does not exist",
    WaitKind.RESERVATION_PENDING: lambda name, start: (
        f"waiting for reservation {name} to start at {start:.0f}"
    ),
    WaitKind.RESERVATION_ENDED: lambda name: f"reservation {name} has ended",
    WaitKind.RESERVATION_HOLDS: _holds,
}
assert set(_RENDER) == set(WaitKind), "every kind renders"

# The reasons without parameters, shared by every job that has them.
ROOM = WaitReason(WaitKind.ROOM)
TOO_BIG = WaitReason(WaitKind.TOO_BIG)
TOO_FEW = WaitReason(WaitKind.TOO_FEW)
NO_MATCH = WaitReason(WaitKind.NO_MATCH)
NO_HOST = WaitReason(WaitKind.NO_HOST)
DEPENDENCY = WaitReason(WaitKind.DEPENDENCY)
DEPENDENCY_NEVER = WaitReason(WaitKind.DEPENDENCY_NEVER)
ARRAY_LIMIT = WaitReason(WaitKind.ARRAY_LIMIT)


def begin(at: float) -> WaitReason:
    """A later `--begin` (the CLI shows the epoch as a local time)."""
    return WaitReason(WaitKind.BEGIN, (at,))


def queue_inactive(queue: str) -> WaitReason:
    return WaitReason(WaitKind.QUEUE_INACTIVE, (queue,))


def queue_limit(queue: str, limit: int) -> WaitReason:
    return WaitReason(WaitKind.QUEUE_LIMIT, (queue, limit))


def user_limit(user: str, queue: str, limit: int) -> WaitReason:
    return WaitReason(WaitKind.USER_LIMIT, (user, queue, limit))


def devices(asked: tuple[tuple[str, str], ...]) -> WaitReason:
    """Hosts have the slots and memory but not the devices `asked` ((kind, count) pairs
    as the job spec holds them, the count a decimal string)."""
    return WaitReason(WaitKind.DEVICES, (asked,))


def too_few_tiles(detail: str) -> WaitReason:
    """Enough slots in all, but a `span[ptile=N]` no set of the hosts can meet (`detail`
    says why: no host has N slots, or too few do)."""
    return WaitReason(WaitKind.TOO_FEW, (detail,))


def too_few_devices(kind: str, count: int, most: int) -> WaitReason:
    return WaitReason(WaitKind.TOO_FEW_DEVICES, (kind, count, most))


def license_short(name: str, asked: int, free: int) -> WaitReason:
    return WaitReason(WaitKind.LICENSE, (name, asked, free))


def preempted_ending(host: str) -> WaitReason:
    return WaitReason(WaitKind.PREEMPTED_ENDING, (host,))


def preempting(victims: tuple[str, ...], host: str, requeue: bool) -> WaitReason:
    return WaitReason(WaitKind.PREEMPTING, (victims, host, requeue))


def no_reservation(name: str) -> WaitReason:
    return WaitReason(WaitKind.NO_RESERVATION, (name,))


def reservation_pending(name: str, start: float) -> WaitReason:
    return WaitReason(WaitKind.RESERVATION_PENDING, (name, start))


def reservation_ended(name: str) -> WaitReason:
    return WaitReason(WaitKind.RESERVATION_ENDED, (name,))


def reservation_holds(name: str, slots: int, host: str, start: float, end: float) -> WaitReason:
    return WaitReason(WaitKind.RESERVATION_HOLDS, (name, slots, host, start, end))


class ReasonTexts(Mapping[str, str]):
    """The edge: why each pending job waits, as the API, the CLI and the console read it.

    Holds the last pass's reasons as they came (no copy, no rendering per pass) and renders
    one when it is read; `default` answers for every job the last pass did not name (a full
    cluster skips the pass: every job reads the same text)."""

    __slots__ = ("_reasons", "default")

    def __init__(self, reasons: dict[str, WaitReason] | None = None, default: str = "") -> None:
        self._reasons = reasons if reasons is not None else {}
        self.default = default

    def __getitem__(self, key: str) -> str:
        return str(self._reasons[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self._reasons)

    def __len__(self) -> int:
        return len(self._reasons)

    def __contains__(self, key: object) -> bool:
        return key in self._reasons

    # Mapping.get's two forms; a job the pass did not name reads `default` before `fallback`
    @overload
    def get(self, key: str, /) -> str | None: ...
    @overload
    def get(self, key: str, /, fallback: str | _T) -> str | _T: ...
    def get(self, key: str, /, fallback: object = None) -> object:
        reason = self._reasons.get(key)
        if reason is not None:
            return str(reason)
        return self.default or fallback

    def update(self, more: Mapping[str, WaitReason]) -> None:
        """Add reasons decided after the pass (preemption's)."""
        self._reasons.update(more)
