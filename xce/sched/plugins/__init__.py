"""The plugin registry: every module in this package registers its plugins on import.

Adding a plugin is one file here: a class with `name`, `kind` (order, filter, score,
reserve) and the method of its kind (xce/sched/plugins/base.py), decorated with
`@register`. Queues choose plugins by name (`plugins = ["fairshare", "backfill", "pack"]`);
what a queue does not choose falls back to the defaults: order `fcfs`, score `first-fit`,
no reservation, and the filters `online`, `queue-hosts`, `select` always.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from xce.sched.plugins.base import FilterPlugin, OrderPlugin, ReservePlugin, ScorePlugin

KINDS = ("order", "filter", "score", "reserve")
DEFAULT_FILTERS = ("online", "queue-hosts", "select")
_REGISTRY: dict[str, Any] = {}
_loaded = False


def register(cls: type) -> type:
    """Class decorator: make one instance of `cls` available under `cls.name`."""
    if cls.kind not in KINDS:  # type: ignore[attr-defined]
        raise TypeError(f"plugin {cls.__name__}: kind must be one of {', '.join(KINDS)}")
    _REGISTRY[cls.name] = cls()  # type: ignore[attr-defined]
    return cls


def _discover() -> None:
    global _loaded
    if _loaded:
        return
    for module in pkgutil.iter_modules(__path__):
        if module.name != "base" and not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")
    _loaded = True


def names(kind: str | None = None) -> list[str]:
    """Registered plugin names, of one kind or all."""
    _discover()
    return sorted(n for n, p in _REGISTRY.items() if kind is None or p.kind == kind)


def get(name: str) -> Any:
    _discover()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown scheduler plugin {name!r} (known: {', '.join(names())})"
        ) from None


@dataclass(frozen=True)
class QueuePolicy:
    """The plugins one queue schedules with."""

    order: OrderPlugin
    filters: tuple[FilterPlugin, ...]
    score: ScorePlugin
    reserve: ReservePlugin | None


@lru_cache(maxsize=256)
def policy_for(plugins: tuple[str, ...]) -> QueuePolicy:
    """The policy for a queue's `plugins` list; ValueError names an unknown or clashing one."""
    chosen: dict[str, Any] = {}
    filters = [get(n) for n in DEFAULT_FILTERS]
    for name in plugins:
        plugin = get(name)
        if plugin.kind == "filter":
            if plugin not in filters:
                filters.append(plugin)
            continue
        if plugin.kind in chosen and chosen[plugin.kind] is not plugin:
            raise ValueError(
                f"plugins {chosen[plugin.kind].name!r} and {name!r} are both "
                f"{plugin.kind} plugins: choose one"
            )
        chosen[plugin.kind] = plugin
    return QueuePolicy(
        chosen.get("order") or get("fcfs"),
        tuple(filters),
        chosen.get("score") or get("first-fit"),
        chosen.get("reserve"),
    )
