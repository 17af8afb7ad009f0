"""The rules a reservation record must keep, checked by `ClusterState.apply` (so replay,
recovery and standbys refuse the same records) and, before that, by the service.

Pure: no clock. Whether a reservation is waiting, active or ended is a question of the time
the caller passes in (`ReservationRecord.state_at`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal, get_args

from xce.core.errors import Conflict, InvalidRequest
from xce.core.model import ReservationRecord

NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
USER = re.compile(r"^@?[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
# `overlap`: may share hosts and time with other reservations (Slurm's OVERLAP flag); the
# scheduler then keeps non-members off for each of them. `ignore_jobs`: made even though
# running jobs will still be running in it (Slurm's IGNORE_JOBS); checked by the service.
Flag = Literal["overlap", "ignore_jobs"]  # the one list: a body field's type, and FLAGS
FLAGS: tuple[str, ...] = get_args(Flag)


def check_reservation(r: ReservationRecord, others: Mapping[str, ReservationRecord]) -> None:
    """Raise `InvalidRequest` for a record that cannot hold, `Conflict` for one that clashes
    with a reservation already held (same name; same host at the same time unless one of
    them has the `overlap` flag)."""
    if not NAME.match(r.name):
        raise InvalidRequest(
            f"reservation name {r.name!r} is not valid (letters, digits, '_', '.', '-'; at most 64)"
        )
    if not r.hosts:
        raise InvalidRequest("a reservation needs at least one host")
    if len(set(r.hosts)) != len(r.hosts):
        raise InvalidRequest("a reservation names a host twice")
    if not r.end > r.start:
        raise InvalidRequest("a reservation must end after it starts")
    if r.slots < 0:
        raise InvalidRequest("slots may not be negative (0 reserves whole hosts)")
    if r.maintenance and r.users:
        raise InvalidRequest("a maintenance reservation is for nobody: give no users")
    if not r.maintenance and not r.users:
        raise InvalidRequest(
            "give the users (or @groups) the reservation is for, or make "
            "it a maintenance reservation"
        )
    for user in r.users:
        if not USER.match(user):
            raise InvalidRequest(f"{user!r} is not a user name or @group")
    for flag in r.flags:
        if flag not in FLAGS:
            raise InvalidRequest(f"unknown reservation flag {flag!r} (known: {', '.join(FLAGS)})")
    if r.name in others:
        raise Conflict(f"reservation {r.name!r} already exists")
    if "overlap" in r.flags:
        return
    for other in others.values():
        if "overlap" in other.flags or other.end <= r.start or r.end <= other.start:
            continue
        shared = sorted(set(other.hosts) & set(r.hosts))
        if shared:
            raise Conflict(
                f"reservation {other.name!r} holds host {shared[0]} from "
                f"{other.start:.0f} to {other.end:.0f}: choose another time or "
                "hosts, or add the overlap flag"
            )


def may_use(r: ReservationRecord, user: str, groups: tuple[str, ...] | list[str]) -> bool:
    """Whether `user` (in fairshare `groups`) may target `r`: never a maintenance one."""
    if r.maintenance:
        return False
    return user in r.users or any(f"@{g}" in r.users for g in groups)
