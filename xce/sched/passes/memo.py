"""What scheduling passes over the same hosts and queues can share: a memo the snapshot's
maker keeps from pass to pass and drops when a host or a queue changes.

A pass derives, before it places anything, the queues' policies and which hosts each
queue's filters accept for a `-R` string: pure functions of the hosts' fixed parts (name,
size, attributes, devices, whether schedulable), the queues and the plugins, so the same
for every pass until one of those changes. The simulator (xce/sched/sim/cluster.py) plans
tens of thousands of passes over the same hosts, the controller's `SnapshotCache` as many
as jobs come and go: each was paying it again per pass, a fifth of a short pass.

Only answers that depend on nothing else are kept: the hosts a filter set accepts are
kept only when every filter that applied declares itself `fixed` (it reads no free slots or
memory, xce/sched/plugins/base.py), and a ranking only when it is static. The memo holds the
registry it was filled for and is not used with another. `Snapshot.memo` is None from
`snapshot_of`: a fresh snapshot shares nothing.
"""

from __future__ import annotations

from typing import Any


class PassMemo:
    """Filled by the passes (xce/sched/passes/pipeline.py, hosts.py), owned by the snapshot's
    maker, which makes a new one when hosts or queues change."""

    __slots__ = ("filtered", "groups", "policies", "ranked", "registry", "shapes")

    def __init__(self) -> None:
        self.registry: Any = None  # the PluginRegistry the entries were made with
        # (policies by queue name, tally, no_reserve, limits) of SchedulingPass.__init__
        self.policies: tuple[dict[str, Any], bool, bool, bool] | None = None
        self.filtered: dict[tuple[str, str], list[int]] = {}  # (queue, -R) -> host indexes
        self.ranked: dict[tuple[str, str], list[int]] = {}  # static rankings of those
        # (queue, -R, slots, memory, gres) -> a static ranking and the live `select` of
        # its candidate sets, or why no host ever takes that shape (hosts.py)
        self.shapes: dict[tuple, Any] = {}
        # (the snapshot's `queued` mapping, its one queue's name and collection, the
        # pass's groups made from them) when that is one queue's jobs alone, already in
        # order: the simulator hands every pass the same mapping, kept current
        # (SchedulingPass._groups)
        self.groups: tuple[Any, str, Any, list[Any]] | None = None

    def claim(self, registry: Any) -> bool:
        """Whether a pass with `registry` may read and fill this memo."""
        if self.registry is None:
            self.registry = registry
        return self.registry is registry
