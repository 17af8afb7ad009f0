"""Devices and licenses during one scheduling pass.

Like slots and memory, free devices and free licenses only go down within a pass, so a host
that lacks the devices a job shape asks for can be dropped from that shape's candidates for
the rest of the pass (xce/sched/passes/hostpool.py), and a spec short of a license stays short.
The pass grants specific device ids, lowest first in the host's declared order, and hands
them to the controller in the `Placement`, which writes them into `JobStarted`.

A pass without any device or license request pays nothing here: the tables are built on
the first request that needs them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from xce.core import gres
from xce.core.model import JobSpec
from xce.sched import reasons as why
from xce.sched.reasons import WaitReason
from xce.sched.snapshot import HostView


class DevicePool:
    """Free device ids per host and kind, and free licenses, for one pass."""

    def __init__(self, hosts: Sequence[HostView], licenses: Mapping[str, int] | None) -> None:
        self._hosts = hosts
        self._free: list[dict[str, list[str]]] | None = None
        self.licenses = dict(licenses or {})

    def _table(self) -> list[dict[str, list[str]]]:
        if self._free is None:
            table: list[dict[str, list[str]]] = []
            for view in self._hosts:
                free: dict[str, list[str]] = {}
                for name in view.free_devices:
                    kind, device = gres.split_grant(name)
                    free.setdefault(kind, []).append(device)
                table.append(free)
            self._free = table
        return self._free

    def has(self, i: int, asked: Mapping[str, int]) -> bool:
        free = self._table()[i]
        return all(len(free.get(kind, ())) >= count for kind, count in asked.items())

    def take(self, i: int, asked: Mapping[str, int]) -> tuple[str, ...]:
        """Grant `asked` on host `i` (its caller checked `has`): the ids leave the pool."""
        free = self._table()[i]
        out: list[str] = []
        for kind, count in sorted(asked.items()):
            ids = free.get(kind, [])
            out.extend(gres.grant_name(kind, d) for d in ids[:count])
            del ids[:count]
        return tuple(out)

    def short_license(self, spec: JobSpec) -> WaitReason | None:
        """Why `spec` cannot have its licenses now, or None when it can."""
        for name, count in gres.counts_of(spec.licenses).items():
            free = self.licenses.get(name, 0)
            if free < count:
                return why.license_short(name, count, free)
        return None

    def take_licenses(self, spec: JobSpec) -> None:
        for name, count in gres.counts_of(spec.licenses).items():
            self.licenses[name] = self.licenses.get(name, 0) - count


def total(view: HostView, kind: str) -> int:
    """How many devices of `kind` the host has, free or not."""
    return len(gres.host_devices(view.gres).get(kind, ()))


def too_few(views: Sequence[HostView], hosts: Sequence[int], spec: JobSpec) -> WaitReason | None:
    """The refusal when no candidate host has enough devices of some kind at all."""
    for kind, count in gres.counts_of(spec.gres).items():
        if not any(total(views[i], kind) >= count for i in hosts):
            most = max((total(views[i], kind) for i in hosts), default=0)
            return why.too_few_devices(kind, count, most)
    return None


def with_devices(views: Sequence[HostView], hosts: Sequence[int], spec: JobSpec) -> list[int]:
    """The hosts among `hosts` that have (free or not) every device count `spec` asks."""
    asked = gres.counts_of(spec.gres)
    return [i for i in hosts if all(total(views[i], k) >= c for k, c in asked.items())]


def waiting_reason(spec: JobSpec) -> WaitReason:
    """The reason of a job whose hosts have the slots and memory but not the devices."""
    return why.devices(tuple(spec.gres))
