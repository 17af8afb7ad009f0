"""Request bodies of the administration routes (queues, hosts, users, reservations, the
HA cluster), each declared once as a msgspec Struct (see xce/protocol/bodies.py)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, UnsetType

from xce.core.model import HostFailurePolicy
from xce.core.reservations import Flag
from xce.protocol.bodies import Body, Name, Patch, Seconds, Text1K, Text2K, Text256
from xce.protocol.decoding import refuse

Limit = Annotated[int, Meta(ge=1, le=2**40)]  # within the WAL's Int64
# a user name or an @group of `[scheduler] groups`
Member = Annotated[str, Meta(pattern=r"^@?[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")]
# A weight: an integer is a number too. Bounded (as Limit) so an overflowing literal (1e400
# reads as infinity) is a 400 naming it, not a record no queue listing can render.
Share = Annotated[float, Meta(gt=0, le=2**40)]
PreemptMinRun = Annotated[int, Meta(ge=0, le=10 * 365 * 86400)]
QueuePriority = Annotated[int, Meta(ge=-1000000, le=1000000)]
OnHostFailure = Literal["requeue", "exit"]
PreemptMode = Literal["suspend", "requeue"]
MissingSubmitDir = Literal["fail", "job_dir", ""]
JobEnv = Annotated[str, Meta(max_length=64, pattern=r"^[a-z, ]*$")]
Aliases = Annotated[tuple[Name, ...], Meta(max_length=100, extra_json_schema={"uniqueItems": True})]
Hosts = Annotated[tuple[Name, ...], Meta(max_length=100000)]
Plugins = Annotated[tuple[Name, ...], Meta(max_length=32)]
Shares = Annotated[dict[str, Share], Meta(max_length=100000)]
Users = Annotated[tuple[Member, ...], Meta(max_length=10000)]
Preempt = Annotated[
    tuple[Name, ...], Meta(max_length=1000, extra_json_schema={"uniqueItems": True})
]


def unique(field_name: str, items: Any) -> None:
    """Refuse a list that names an item twice (JSON Schema's uniqueItems)."""
    seen: set[Any] = set()
    for i, item in enumerate(items if items is not UNSET else ()):
        if item in seen:
            raise refuse(f".{field_name}[{i}] repeats an earlier item")
        seen.add(item)


def _share_text(value: float) -> str:
    """A share as the queue record keeps it: 2 and 2.0 both as "2"."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return str(int(value))
    return str(value)


def queue_fields(settings: dict[str, Any]) -> dict[str, Any]:
    """Sent queue settings as `QueueRecord` fields (the policy an enum, shares as sorted
    (who, text) pairs)."""
    out = dict(settings)
    if "on_host_failure" in out:
        out["on_host_failure"] = HostFailurePolicy(out["on_host_failure"])
    if "shares" in out:
        out["shares"] = tuple(sorted((k, _share_text(v)) for k, v in out["shares"].items()))
    return out


class QueueCreate(Body, frozen=True, kw_only=True):
    """`POST /api/v1/queues`."""

    name: Name
    priority: QueuePriority | UnsetType = UNSET
    open: bool | UnsetType = UNSET
    active: bool | UnsetType = UNSET
    hosts: Hosts | UnsetType = UNSET
    description: Text1K | UnsetType = UNSET
    on_host_failure: OnHostFailure | UnsetType = UNSET
    plugins: Plugins | UnsetType = UNSET
    max_running: Limit | UnsetType = UNSET
    max_running_per_user: Limit | UnsetType = UNSET
    shares: Shares | UnsetType = UNSET
    default_walltime_s: Limit | UnsetType = UNSET
    max_walltime_s: Limit | UnsetType = UNSET
    default_memory_mb: Limit | UnsetType = UNSET
    max_memory_mb: Limit | UnsetType = UNSET
    max_slots: Limit | UnsetType = UNSET
    users: Users | UnsetType = UNSET
    preempt: Preempt | UnsetType = UNSET
    preempt_mode: PreemptMode | UnsetType = UNSET
    preempt_min_run_s: PreemptMinRun | UnsetType = UNSET
    aliases: Aliases | UnsetType = UNSET
    job_env: JobEnv | UnsetType | None = UNSET  # None: the controller's job_env
    missing_submit_dir: MissingSubmitDir | UnsetType = UNSET

    def __post_init__(self) -> None:
        unique("preempt", self.preempt)
        unique("aliases", self.aliases)


class QueueModify(Patch, frozen=True, kw_only=True):
    """`PATCH /api/v1/queues/{name}`: any setting but the name and the open/active switches
    (they have their own actions); null clears a limit or default."""

    priority: QueuePriority | UnsetType = UNSET
    hosts: Hosts | UnsetType = UNSET
    description: Text1K | UnsetType = UNSET
    on_host_failure: OnHostFailure | UnsetType = UNSET
    plugins: Plugins | UnsetType = UNSET
    max_running: Limit | UnsetType | None = UNSET
    max_running_per_user: Limit | UnsetType | None = UNSET
    shares: Shares | UnsetType = UNSET
    default_walltime_s: Limit | UnsetType | None = UNSET
    max_walltime_s: Limit | UnsetType | None = UNSET
    default_memory_mb: Limit | UnsetType | None = UNSET
    max_memory_mb: Limit | UnsetType | None = UNSET
    max_slots: Limit | UnsetType | None = UNSET
    users: Users | UnsetType = UNSET
    preempt: Preempt | UnsetType = UNSET
    preempt_mode: PreemptMode | UnsetType = UNSET
    preempt_min_run_s: PreemptMinRun | UnsetType = UNSET
    aliases: Aliases | UnsetType = UNSET
    job_env: JobEnv | UnsetType | None = UNSET
    missing_submit_dir: MissingSubmitDir | UnsetType = UNSET

    def __post_init__(self) -> None:
        super().__post_init__()
        unique("preempt", self.preempt)
        unique("aliases", self.aliases)


class Reason(Body, frozen=True, kw_only=True):
    """Why an administrator closes (or opens) a host, kept with the host."""

    reason: Text256 = ""


class Switchover(Body, frozen=True, kw_only=True):
    """`POST /api/v1/cluster/switchover`: the standby to hand the primary role to."""

    to: Text2K | None = None  # None: the most caught-up standby


class Vote(Body, frozen=True, kw_only=True):
    """`POST /api/v1/cluster/vote` (xce/ha/election.py)."""

    epoch: Annotated[int, Meta(ge=1)]
    candidate: Text2K
    last_epoch: Annotated[int, Meta(ge=0)]
    last_seq: Annotated[int, Meta(ge=0)]


UserName = Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
Password = Annotated[str, Meta(min_length=8, max_length=4096)]


class UserAdd(Body, frozen=True, kw_only=True):
    """`POST /api/v1/users` (the users file of a configfile backend)."""

    user: UserName
    password: Password
    groups: Annotated[tuple[UserName, ...], Meta(max_length=256)] = ()
    roles: Annotated[tuple[UserName, ...], Meta(max_length=64)] = ()


class Passwd(Body, frozen=True, kw_only=True):
    """`POST /api/v1/users/{name}/password`: users give their current password too."""

    password: Password
    old_password: Text1K | None = None


Time = Annotated[float, Meta(ge=0, le=2**40)]  # epoch seconds


class ReservationCreate(Body, frozen=True, kw_only=True):
    """`POST /api/v1/reservations`: hosts set aside from `start` to `end` (or for
    `duration_s`), for `users` or for maintenance."""

    name: Name
    hosts: Annotated[tuple[Name, ...], Meta(min_length=1, max_length=100000)]
    start: Time
    end: Time | None = None
    duration_s: Seconds | None = None
    slots: Annotated[int, Meta(ge=0, le=100000)] = 0
    users: Users = ()
    maintenance: bool = False
    flags: Annotated[
        tuple[Flag, ...],
        Meta(max_length=8, extra_json_schema={"uniqueItems": True}),
    ] = ()
    description: Text1K = ""

    def __post_init__(self) -> None:
        unique("flags", self.flags)
