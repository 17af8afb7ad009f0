"""Filters `online`, `queue-hosts` and `select` (always on): may this host ever run the job?

Free slots and memory are not a filter here: they change within a pass, so the host pool
checks them at placement (xce/sched/passes/hostpool.py).
"""

from __future__ import annotations

from functools import lru_cache
from typing import ClassVar

from xce.core.model import JobSpec, QueueRecord
from xce.sched.expr import host_attributes, matches, parse_requirement
from xce.sched.snapshot import HostView


class Online:
    """Registered, reachable and open (not closed or draining)."""

    name: ClassVar[str] = "online"
    kind: ClassVar[str] = "filter"
    fixed: ClassVar[bool] = True  # `schedulable` changes only with a host event

    def refuses_any(self, spec: JobSpec, queue: QueueRecord) -> bool:
        return True

    def accepts(self, host: HostView, spec: JobSpec, queue: QueueRecord) -> bool:
        return host.schedulable


class QueueHosts:
    """In the queue's host list, when it has one. `@name` in the list is a host group: the
    hosts whose `group` attribute is `name`."""

    name: ClassVar[str] = "queue-hosts"
    kind: ClassVar[str] = "filter"
    fixed: ClassVar[bool] = True

    def refuses_any(self, spec: JobSpec, queue: QueueRecord) -> bool:
        return bool(queue.hosts)

    def accepts(self, host: HostView, spec: JobSpec | None, queue: QueueRecord) -> bool:
        """`spec` unused: callers that vet hosts before a job exists pass None."""
        if not queue.hosts or host.name in queue.hosts:
            return True
        group = dict(host.attributes).get("group")
        return group is not None and f"@{group}" in queue.hosts


class Select:
    """The job's `select[]` expression, on the host's attributes at the start of the pass
    (terms on free `slots`/`mem` are checked again at placement by the pipeline)."""

    name: ClassVar[str] = "select"
    kind: ClassVar[str] = "filter"
    fixed: ClassVar[bool] = False  # `select[slots>4]` reads the free slots

    def refuses_any(self, spec: JobSpec, queue: QueueRecord) -> bool:
        return bool(spec.resources)

    def accepts(self, host: HostView, spec: JobSpec, queue: QueueRecord) -> bool:
        if not spec.resources:
            return True
        return _select(
            spec.resources,
            host.attributes,
            host.free_slots,
            host.free_memory_mb,
            host.slots,
            host.memory_mb,
        )


@lru_cache(maxsize=65536)
def _select(
    resources: str,
    attributes: tuple[tuple[str, str], ...],
    free_slots: int,
    free_mem: int,
    slots: int,
    memory_mb: int,
) -> bool:
    """Hosts alike in everything a select expression can see share one evaluation."""
    view = HostView("", slots, memory_mb, free_slots, free_mem, attributes, True)
    return matches(parse_requirement(resources).select, host_attributes(view))
