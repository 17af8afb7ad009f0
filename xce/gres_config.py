"""Config sections of generic resources: `[worker.gres]` and `[[license]]`.

Kept out of xce/config.py so that the config module only names the keys; the messages
follow its rule of naming the bad key.
"""

from __future__ import annotations

from typing import Any

from xce.config import ConfigError
from xce.core import gres
from xce.core.errors import InvalidRequest


def parse_worker_gres(data: Any) -> dict[str, tuple[str, ...]]:
    """`[worker.gres] gpu = ["0", "1"]` (ids as strings or integers) -> {"gpu": ("0", "1")}."""
    if not isinstance(data, dict):
        raise ConfigError('worker.gres must be a table of device kinds, e.g. gpu = ["0", "1"]')
    out: dict[str, tuple[str, ...]] = {}
    for kind, ids in data.items():
        if not isinstance(ids, list) or not all(
            isinstance(i, str | int) and not isinstance(i, bool) for i in ids
        ):
            raise ConfigError(f'worker.gres.{kind} must be a list of device ids, e.g. ["0", "1"]')
        out[kind] = tuple(str(i) for i in ids)
    try:
        gres.host_pairs(out)
    except InvalidRequest as exc:
        raise ConfigError(f"worker.{exc.message}") from None
    return out


def parse_licenses(data: Any) -> tuple[tuple[str, int], ...]:
    """`[[license]] name = "matlab" count = 10`, each name once."""
    if not isinstance(data, list):
        raise ConfigError(
            'license must be an array of tables: [[license]] name = "matlab" count = 10'
        )
    out: dict[str, int] = {}
    for i, item in enumerate(data):
        where = f"license[{i}]"
        if not isinstance(item, dict) or set(item) != {"name", "count"}:
            raise ConfigError(f"{where} must have exactly the keys name and count")
        name, count = item["name"], item["count"]
        if not isinstance(name, str) or not gres.KIND.match(name):
            raise ConfigError(
                f"{where}.name {name!r} is not valid (lower-case letters, "
                "digits and _, starting with a letter)"
            )
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ConfigError(f"{where}.count must be a whole number >= 0, got {count!r}")
        if name in out:
            raise ConfigError(f"license {name!r} is defined twice")
        out[name] = count
    return tuple(sorted(out.items()))
