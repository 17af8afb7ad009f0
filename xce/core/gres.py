"""Generic resources (GRES): counted devices per host, and cluster-wide licenses.

A host declares devices by kind and id (`[worker.gres] gpu = ["0", "1"]`, or GPUs detected
through NVML); a job asks for a count per kind (`--gpus 2`, `--gres gpu:2,fpga:1`,
`-R "rusage[gpu=1]"`) and for cluster-wide licenses (`--license matlab:1`, counted against
`[[license]]` of the controller's config). The scheduler grants *specific* device ids and
the grant is part of `JobStarted`, so a restart, a replay or a failover gives the job the
same devices and no other job gets them (Slurm's gres/gpu with `File=` does the same).

Records hold these as (key, text) pairs because that is what the wire carries
(`List(KeyValue)`): a request is `(("gpu", "2"),)`, a host's devices `(("gpu", "0,1"),)`,
a grant is `("gpu:0", "gpu:1")`. The helpers here are the one place that reads and writes
those forms.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache

from xce.core.errors import InvalidRequest

# \Z, not $: `$` also matches before a trailing newline ("gpu\n" would pass).
KIND = re.compile(r"[a-z][a-z0-9_]{0,31}\Z")
DEVICE_ID = re.compile(r"[A-Za-z0-9_.:/-]{1,128}\Z")
# Resources that rusage[] names but that are not generic resources.
NOT_GRES = frozenset({"mem", "swp", "swap", "tmp", "slots", "ut"})
MAX_COUNT = 1_000_000

Pairs = tuple[tuple[str, str], ...]


def check_kind(kind: str, what: str = "resource") -> str:
    if not KIND.match(kind):
        raise InvalidRequest(
            f"{what} name {kind!r} is not valid (lower-case letters, digits "
            "and _, starting with a letter)"
        )
    return kind


def parse_counts(text: str, what: str = "gres") -> dict[str, int]:
    """`gpu:2,fpga:1` (a bare `gpu` is one) -> {"gpu": 2, "fpga": 1}."""
    out: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, count = part.partition(":")
        name = check_kind(name.strip(), what)
        try:
            value = int(count) if sep else 1
        except ValueError:
            raise InvalidRequest(
                f"{what} {part!r}: the count must be a whole number (e.g. {name}:2)"
            ) from None
        add_count(out, name, value, what)
    return out


def add_count(into: dict[str, int], name: str, value: int, what: str = "gres") -> None:
    if not 0 <= value <= MAX_COUNT:
        raise InvalidRequest(f"{what} {name}: the count must be between 0 and {MAX_COUNT}")
    if name in into and into[name] != value:
        raise InvalidRequest(
            f"{what} {name} is asked twice with different counts ({into[name]} and {value})"
        )
    into[name] = value


def to_pairs(counts: Mapping[str, int]) -> Pairs:
    """A request as the record holds it: sorted, zero counts left out."""
    return tuple((k, str(v)) for k, v in sorted(counts.items()) if v > 0)


@lru_cache(maxsize=4096)
def counts_of(pairs: Pairs) -> dict[str, int]:
    """A request's counts (cached: specs are shared and read in every pass; do not modify)."""
    return {k: int(v) for k, v in pairs}


def host_pairs(devices: Mapping[str, Iterable[str]]) -> Pairs:
    """A host's devices as the record holds them: kind -> comma-joined ids, in given order."""
    out = []
    for kind, ids in sorted(devices.items()):
        check_kind(kind, "gres kind")
        listed = [str(i) for i in ids]
        for device in listed:
            if not DEVICE_ID.match(device):
                raise InvalidRequest(f"gres {kind}: device id {device!r} is not valid")
        if len(set(listed)) != len(listed):
            raise InvalidRequest(f"gres {kind}: a device id is listed twice")
        if listed:
            out.append((kind, ",".join(listed)))
    return tuple(out)


@lru_cache(maxsize=4096)
def host_devices(pairs: Pairs) -> dict[str, tuple[str, ...]]:
    """kind -> device ids of a host record's `gres` (cached; do not modify)."""
    return {k: tuple(v.split(",")) if v else () for k, v in pairs}


def grant_name(kind: str, device: str) -> str:
    return f"{kind}:{device}"


def split_grant(name: str) -> tuple[str, str]:
    kind, _, device = name.partition(":")
    return kind, device


def granted(devices: Iterable[str], kind: str) -> list[str]:
    """The ids of `kind` in a grant such as ("gpu:0", "gpu:1")."""
    return [d for k, d in map(split_grant, devices) if k == kind]


def describe(pairs: Pairs) -> str:
    """`gpu:2,fpga:1`, the form users type."""
    return ",".join(f"{k}:{v}" for k, v in pairs)
