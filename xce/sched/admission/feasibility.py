"""Could any host ever run this job? Checked at submit so an impossible job is refused with a
reason instead of pending for ever (Slurm's "Requested node configuration is not
available", LSF's "No such resource" / "Bad argument for -n").

A job is judged against the hosts its queue may use (`queue-hosts`, the same filter the
scheduler applies) as if each were empty: enough slots, enough memory, and a `select[]`
that matches. Hosts that are closed, draining or unreachable still count (they may come
back); a cluster with no registered host of the queue yet cannot judge and accepts
everything, and `defer` (API `"defer": true`, `xce job submit --defer`, `xce job modify
--defer`) skips the check for hosts that will register later. The verdict uses the
scheduler's own evaluation (xce/sched/expr/evaluate.py), so "cannot ever run" here means
the scheduler would never place it.

Names on the left of a comparison, flags (`select[gpu]`) and `defined(name)` that no
eligible host defines are reported by name, with the names hosts do define: a typo
(`select[foo==1]`) is the usual cause. Values compare case-sensitively (`type==x86` does not
match `X86`, as in LSF); when a comparison would match but for case, the message says so.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator

from xce.core.model import HostRecord, QueueRecord
from xce.sched.expr import host_attributes, matches
from xce.sched.expr.model import (
    And,
    Compare,
    Defined,
    Flag,
    Name,
    Node,
    Not,
    Or,
    ResourceRequirement,
    String,
)
from xce.sched.plugins.hostfilters import QueueHosts
from xce.sched.snapshot import HostView

# Names every host has (xce/sched/expr/evaluate.py host_attributes).
BUILT_IN = frozenset({"slots", "maxslots", "mem", "maxmem", "ut", "hname"})
_SHOWN = 3  # hosts named in a refusal


def _empty_view(host: HostRecord) -> HostView:
    return HostView(
        host.name, host.slots, host.memory_mb, host.slots, host.memory_mb, host.attributes, True
    )


def queue_hosts(queue: QueueRecord, hosts: Collection[HostRecord]) -> Collection[HostRecord]:
    """The hosts `queue` may use. Every host when it names none: `hosts` itself then, with
    no view built nor copy made, because every submission asks and a cluster may have tens
    of thousands of hosts."""
    if not queue.hosts:
        return hosts
    gate = QueueHosts()
    return [h for h in hosts if gate.accepts(_empty_view(h), None, queue)]


def _attribute_names(node: Node) -> Iterator[str]:
    """The names `node` reads as attributes (a bare word on the right of a comparison that
    no host defines is a literal, `type==LINUX`, so only left sides count)."""
    if isinstance(node, Or | And):
        for item in node.items:
            yield from _attribute_names(item)
    elif isinstance(node, Not):
        yield from _attribute_names(node.item)
    elif isinstance(node, Compare):
        if isinstance(node.left, Name):
            yield node.left.name
    elif isinstance(node, Flag | Defined):
        yield node.name


def _case_hints(node: Node, hosts: Collection[HostRecord]) -> Iterator[str]:
    """`type==x86` where a host has `X86`: values are case-sensitive."""
    if isinstance(node, Or | And):
        for item in node.items:
            yield from _case_hints(item, hosts)
    elif isinstance(node, Not):
        yield from _case_hints(node.item, hosts)
    elif isinstance(node, Compare) and node.op == "==" and isinstance(node.left, Name):
        wanted = (
            node.right.value
            if isinstance(node.right, String)
            else (node.right.name if isinstance(node.right, Name) else None)
        )
        if not isinstance(wanted, str):
            return
        for host in hosts:
            value = dict(host.attributes).get(node.left.name)
            if value is not None and value != wanted and value.lower() == wanted.lower():
                yield (
                    f"{node.left.name} is {value!r} on {host.name}, not {wanted!r} "
                    "(values are case-sensitive)"
                )
                return


def refusal(
    requirement: ResourceRequirement | None,
    slots: int,
    memory_mb: int,
    queue: QueueRecord,
    hosts: Collection[HostRecord],
) -> str | None:
    """Why no host of `queue` could ever run the job, or None when one could (or when the
    queue has no registered host to judge by)."""
    eligible = queue_hosts(queue, hosts)
    if not eligible:
        return None
    select = requirement.select if requirement is not None else None
    if select is None and any(slots <= h.slots and memory_mb <= h.memory_mb for h in eligible):
        return None  # a host that holds it (usually the first): the checks below agree
    where = f"queue {queue.name!r}"
    if select is not None:
        defined = set(BUILT_IN).union(*({k for k, _ in h.attributes} for h in eligible))
        unknown = sorted(set(_attribute_names(select)) - defined)
        if unknown:
            names = ", ".join(repr(n) for n in unknown)
            known = ", ".join(sorted(defined - BUILT_IN)) or "none"
            return (
                f"resources: select[{select}]: no host of {where} defines {names} "
                f"(host attributes: {known}; built in: {', '.join(sorted(BUILT_IN))})"
            )
    most_slots = max(h.slots for h in eligible)
    if slots > most_slots:
        return (
            f"the job asks for {slots} slots on one host; the largest host of {where} "
            f"has {most_slots}"
        )
    most_memory = max(h.memory_mb for h in eligible)
    if memory_mb > most_memory:
        return (
            f"the job asks for {memory_mb} MB of memory; the most any host of {where} "
            f"has is {most_memory} MB"
        )
    why: list[str] = []
    for host in eligible:
        if slots > host.slots:
            why.append(f"{host.name} has {host.slots} slots")
        elif memory_mb > host.memory_mb:
            why.append(f"{host.name} has {host.memory_mb} MB")
        elif select is not None and not matches(select, host_attributes(_empty_view(host))):
            why.append(f"{host.name} does not match select[{select}]")
        else:
            return None
    hints = list(_case_hints(select, eligible)) if select is not None else []
    more = f" and {len(why) - _SHOWN} more" if len(why) > _SHOWN else ""
    return f"no host of {where} can ever run this job: {'; '.join(why[:_SHOWN])}{more}" + (
        f" ({hints[0]})" if hints else ""
    )
