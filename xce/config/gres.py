"""Config sections of generic resources: `[worker.gres]` and `[[license]]`.

Kept out of xce/config/loader.py so that the config module only names the tables; the messages
follow its rule of naming the bad key (xce/config/check.py).
"""

from __future__ import annotations

from typing import Annotated

from xce.config.check import Table
from xce.core import gres
from xce.core.errors import InvalidRequest
from xce.core.validation import Invalid, error

# `[worker.gres] gpu = ["0", 1]`: device ids by kind, as strings or integers.
Gres = Annotated[
    dict[str, Annotated[list[str | int], error('must be a list of device ids, e.g. ["0", "1"]')]],
    error('must be a table of device kinds, e.g. gpu = ["0", "1"]'),
]


def worker_gres(data: dict[str, list[str | int]]) -> dict[str, tuple[str, ...]]:
    """{"gpu": ["0", 1]} -> {"gpu": ("0", "1")}; `Invalid` (relative to [worker]) when a
    kind or id is not valid or an id is listed twice."""
    out = {kind: tuple(str(i) for i in ids) for kind, ids in data.items()}
    try:
        gres.host_pairs(out)
    except InvalidRequest as exc:
        raise Invalid(exc.message) from None
    return out


class LicenseTable(Table, frozen=True):
    """One `[[license]] name = "matlab" count = 10`: a cluster-wide consumable."""

    name: str
    count: Annotated[int, error("must be a whole number >= 0", got=True)]

    def __post_init__(self) -> None:
        if self.count < 0:
            raise Invalid(f"count must be a whole number >= 0, got {self.count!r}")
        if not gres.KIND.match(self.name):
            raise Invalid(
                f"name {self.name!r} is not valid (lower-case letters, "
                "digits and _, starting with a letter)"
            )


Licenses = Annotated[
    list[Annotated[LicenseTable, error("must have exactly the keys name and count")]],
    error('must be an array of tables: [[license]] name = "matlab" count = 10'),
]


def licenses(tables: list[LicenseTable]) -> tuple[tuple[str, int], ...]:
    """name -> count pairs, sorted, each name once."""
    out: dict[str, int] = {}
    for table in tables:
        if table.name in out:
            raise Invalid(f"license {table.name!r} is defined twice")
        out[table.name] = table.count
    return tuple(sorted(out.items()))
