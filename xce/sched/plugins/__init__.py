"""The plugin registry: an explicit object holding one instance of each plugin by name.

Adding a plugin is one file here: a class with `name`, `kind` (order, filter, score,
reserve), the capabilities of its kind and the method of its kind
(xce/sched/plugins/base.py), listed in `BUILTIN` below. Queues choose plugins by name
(`plugins = ["fairshare", "backfill", "pack"]`); what a queue does not choose falls back to
the defaults: order `fcfs` (or the one the reservation names: `predictive` orders by
`short-first`), score `first-fit`, no reservation, and the filters `online`, `queue-hosts`,
`select` always.

Nothing registers itself on import: `PluginRegistry.builtin()` builds the registry from the
list, a site or a test builds its own with `PluginRegistry([...])` and passes it to the pass
(`pipeline.plan(..., registry=...)`). A running controller gets its registry from its
composition (xce/server/compose.py); config validation and the simulator ask
`builtin()` by name. `names` and `get` below answer from that built-in registry, which is
built on first use and never changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from xce.core.model import JobSpec, QueueRecord
from xce.sched.plugins.base import (
    FilterPlugin,
    OrderPlugin,
    ReservePlugin,
    ScorePlugin,
    blocks_queue,
    fixed,
    predicts,
    ranks,
    reads_usage,
    reserves_host_sets,
    shortest_first,
    submission_order,
)

KINDS = ("order", "filter", "score", "reserve")
DEFAULT_FILTERS = ("online", "queue-hosts", "select")
DEFAULT_ORDER = "fcfs"
DEFAULT_SCORE = "first-fit"


@dataclass(frozen=True)
class QueuePolicy:
    """The plugins one queue schedules with, and their capabilities read once (the pass
    reads these flags, never plugin names)."""

    order: OrderPlugin
    filters: tuple[FilterPlugin, ...]
    score: ScorePlugin
    reserve: ReservePlugin | None
    submission_order: bool = field(init=False)  # the order's
    reads_usage: bool = field(init=False)  # the order's
    ranks: bool = field(init=False)  # the score's
    host_sets: bool = field(init=False)  # the reservation's (False without one)
    blocks_queue: bool = field(init=False)  # the reservation's (False without one)
    predicts: bool = field(init=False)  # the order or the reservation reads predictions
    reserve_predicts: bool = field(init=False)  # the reservation is timed by predictions
    shortest_first: bool = field(init=False)  # the reservation's: backfill shortest first
    # per filter: (accepts, refuses_any or None when the filter does not say, fixed)
    filter_tests: tuple[
        tuple[Callable[..., bool], Callable[[JobSpec, QueueRecord], bool] | None, bool], ...
    ] = field(init=False)

    def __post_init__(self) -> None:
        put = object.__setattr__  # frozen: set once, here
        put(self, "submission_order", submission_order(self.order))
        put(self, "reads_usage", reads_usage(self.order))
        put(self, "ranks", ranks(self.score))
        put(self, "host_sets", self.reserve is not None and reserves_host_sets(self.reserve))
        put(self, "blocks_queue", blocks_queue(self.reserve))
        put(self, "reserve_predicts", predicts(self.reserve))
        put(self, "predicts", predicts(self.order) or self.reserve_predicts)
        put(self, "shortest_first", shortest_first(self.reserve))
        put(
            self,
            "filter_tests",
            tuple((f.accepts, getattr(f, "refuses_any", None), fixed(f)) for f in self.filters),
        )


class PluginRegistry:
    """Plugins by name; a name is taken once (a second plugin of that name is refused)."""

    def __init__(self, plugins: Iterable[type] = ()) -> None:
        self._plugins: dict[str, Any] = {}
        self._policies: dict[tuple[str, ...], QueuePolicy] = {}
        self._frozen = False
        for cls in plugins:
            self.add(cls)

    def freeze(self) -> PluginRegistry:
        """Refuse further plugins from now on (a registry shared by the whole process)."""
        self._frozen = True
        return self

    @classmethod
    def builtin(cls) -> PluginRegistry:
        """A new registry of the plugins that ship with XCE."""
        return cls(builtin_plugins())

    def add(self, cls: type) -> None:
        """Make one instance of `cls` available under `cls.name`."""
        if self._frozen:
            raise ValueError(
                f"plugin {cls.__name__}: this registry is shared and takes no more plugins; "
                "build your own (PluginRegistry([...])) and pass it to the pass"
            )
        name, kind = getattr(cls, "name", None), getattr(cls, "kind", None)
        if not isinstance(name, str) or not name:
            raise TypeError(f"plugin {cls.__name__}: it needs a `name`")
        if kind not in KINDS:
            raise TypeError(f"plugin {cls.__name__}: kind must be one of {', '.join(KINDS)}")
        known = self._plugins.get(name)
        if known is not None:
            raise ValueError(
                f"plugin {cls.__name__}: the name {name!r} is taken by "
                f"{type(known).__name__} (a {known.kind} plugin)"
            )
        self._plugins[name] = cls()
        self._policies.clear()

    def names(self, kind: str | None = None) -> list[str]:
        """Registered plugin names, of one kind or all."""
        return sorted(n for n, p in self._plugins.items() if kind is None or p.kind == kind)

    def get(self, name: str) -> Any:
        try:
            return self._plugins[name]
        except KeyError:
            raise ValueError(
                f"unknown scheduler plugin {name!r} (known: {', '.join(self.names())})"
            ) from None

    def policy_for(self, plugins: tuple[str, ...]) -> QueuePolicy:
        """The policy for a queue's `plugins` list; ValueError names an unknown or clashing
        one. Policies are kept per list: a pass asks once per queue."""
        policy = self._policies.get(plugins)
        if policy is None:
            policy = self._policies[plugins] = self._build(plugins)
        return policy

    def _build(self, plugins: tuple[str, ...]) -> QueuePolicy:
        chosen: dict[str, Any] = {}
        filters = [self.get(n) for n in DEFAULT_FILTERS]
        for name in plugins:
            plugin = self.get(name)
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
        reserve = chosen.get("reserve")
        implied = getattr(reserve, "default_order", None) if reserve is not None else None
        return QueuePolicy(
            chosen.get("order") or self.get(implied or DEFAULT_ORDER),
            tuple(filters),
            chosen.get("score") or self.get(DEFAULT_SCORE),
            reserve,
        )


def builtin_plugins() -> list[type]:
    """The plugin classes that ship with XCE (imported here, not at package import: the
    plugin modules import the pass's helpers, which import this package's base)."""
    from xce.sched.plugins.backfill import EasyBackfill
    from xce.sched.plugins.fairshare import GroupFairshare, UserFairshare
    from xce.sched.plugins.fcfs import FirstComeFirstServed
    from xce.sched.plugins.hostfilters import Online, QueueHosts, Select
    from xce.sched.plugins.multifactor import Multifactor
    from xce.sched.plugins.predictive import PredictiveBackfill
    from xce.sched.plugins.scores import FirstFit, Pack, Spread
    from xce.sched.plugins.short_first import ShortFirst
    from xce.sched.plugins.strict import StrictOrder

    return [
        FirstComeFirstServed,
        UserFairshare,
        GroupFairshare,
        Multifactor,
        ShortFirst,
        Online,
        QueueHosts,
        Select,
        FirstFit,
        Pack,
        Spread,
        EasyBackfill,
        PredictiveBackfill,
        StrictOrder,
    ]


@lru_cache(maxsize=1)
def builtin() -> PluginRegistry:
    """The registry of the built-in plugins, built once on first use."""
    return PluginRegistry.builtin().freeze()


def names(kind: str | None = None) -> list[str]:
    """Built-in plugin names, of one kind or all."""
    return builtin().names(kind)


def get(name: str) -> Any:
    """The built-in plugin `name`; ValueError lists the known ones."""
    return builtin().get(name)
