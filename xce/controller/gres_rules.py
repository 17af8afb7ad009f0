"""What a submission asks of generic resources and licenses, checked at submit.

A job's devices come from `gres` (`--gpus`, `--gres`, API `"gres"`) and from `rusage[]`
names that are not LSF's built-ins (`-R "rusage[gpu=1]"`), merged; licenses from
`licenses` (`--license`, API `"licenses"`). A kind no host of the queue defines, or more
devices than any such host has, is refused with the name (as Slurm refuses "Invalid generic
resource (gres) specification"); so is a license the controller does not count or more of
it than exist. `defer` skips the host side (hosts not registered yet), never the licenses,
which are the controller's own config.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from xce.core import gres
from xce.core.errors import InvalidRequest
from xce.core.model import HostRecord, QueueRecord
from xce.protocol.bodies import SubmitBody
from xce.sched.admission.feasibility import _empty_view
from xce.sched.expr import parse_requirement
from xce.sched.plugins.hostfilters import QueueHosts


def requested(
    body: SubmitBody, queue: QueueRecord, hosts: Iterable[HostRecord], licenses: Mapping[str, int]
) -> tuple[gres.Pairs, gres.Pairs]:
    """(gres, licenses) as the spec holds them; `InvalidRequest` naming what is wrong."""
    devices: dict[str, int] = {}
    for kind, count in body.gres.items():
        gres.check_kind(kind, "gres")
        gres.add_count(devices, kind, _count(count, f"gres {kind}"))
    if body.resources.strip():
        for item in parse_requirement(body.resources).rusage:
            if item.name in gres.NOT_GRES:
                continue
            if item.value != int(item.value):
                raise InvalidRequest(
                    f"resources: rusage[{item.name}={item.value:g}]: a "
                    "device count must be a whole number"
                )
            gres.add_count(devices, gres.check_kind(item.name, "rusage resource"), int(item.value))
    asked_licenses: dict[str, int] = {}
    for name, count in body.licenses.items():
        gres.add_count(
            asked_licenses,
            gres.check_kind(name, "license"),
            _count(count, f"license {name}"),
            "license",
        )
    for name, count in asked_licenses.items():
        if name not in licenses:
            known = ", ".join(sorted(licenses)) or "none"
            raise InvalidRequest(
                f"license {name!r} is not counted by this cluster (licenses: {known})"
            )
        if count > licenses[name]:
            raise InvalidRequest(
                f"the job asks for {count} {name} licenses; the cluster has {licenses[name]}"
            )
    if devices and not body.defer:
        _check_hosts(devices, queue, hosts)
    return gres.to_pairs(devices), gres.to_pairs(asked_licenses)


def _count(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidRequest(f"{what}: the count must be a whole number")
    return value


def _check_hosts(
    devices: Mapping[str, int], queue: QueueRecord, hosts: Iterable[HostRecord]
) -> None:
    gate = QueueHosts()
    eligible = [h for h in hosts if gate.accepts(_empty_view(h), None, queue)]
    if not eligible:
        return  # nothing registered to judge by, as for slots and memory
    where = f"queue {queue.name!r}"
    for kind, count in sorted(devices.items()):
        have = [len(gres.host_devices(h.gres).get(kind, ())) for h in eligible]
        if not any(have):
            defined = sorted({k for h in eligible for k, _ in h.gres})
            raise InvalidRequest(
                f"gres {kind!r}: no host of {where} has {kind} devices (host devices: "
                f"{', '.join(defined) or 'none'}; for hosts that have not registered yet: "
                'xce job submit --defer, or "defer": true in the API)'
            )
        if count > max(have):
            raise InvalidRequest(
                f"the job asks for {count} {kind} devices on one host; the most any host of "
                f"{where} has is {max(have)}"
            )
