"""Submit-time rules for jobs across hosts: spans that make sense, memory per
slot, and whether any set of a queue's hosts could ever hold the job (as if empty), so an
impossible multi-host job is refused with a reason instead of pending for ever."""

from __future__ import annotations

from collections.abc import Collection

from xce.core.errors import InvalidRequest
from xce.core.model import HostRecord, JobSpec, QueueRecord
from xce.sched.admission.feasibility import _empty_view, queue_hosts
from xce.sched.expr import host_attributes, matches
from xce.sched.expr.model import ResourceRequirement
from xce.sched.passes.multihost import Layout, choose, groups_of, ptile_shortfall, spreads

# The submit and modify schemas' slots maximum: a ptile or block above it means nothing.
MAX_SPAN = 100000


def check_span(req: ResourceRequirement, slots: int) -> None:
    """`span[ptile=P]`/`span[block=B]` need P, B >= 1; a block must divide the slots."""
    span = req.span
    if span is None:
        return
    for name, value in (("ptile", span.ptile), ("block", span.block)):
        if value is not None and value < 1:
            raise InvalidRequest(f"resources: span[{name}={value}] must be at least 1")
        if value is not None and value > MAX_SPAN:  # stored as given: keep it meaningful
            raise InvalidRequest(
                f"resources: span[{name}] must be at most {MAX_SPAN} "
                "(the most slots a job may ask for)"
            )
    if span.block is not None and slots > span.block and slots % span.block:
        raise InvalidRequest(
            f"resources: span[block={span.block}] needs a slot count that "
            f"is a multiple of {span.block}, not {slots}"
        )


def per_slot_memory(memory_mb: int, per_slot_mb: int, slots: int) -> int:
    """`--mem-per-cpu`: the job's memory_mb becomes the whole job's (what one host holds
    when the job fits on one); --mem and --mem-per-cpu together are refused, as in Slurm."""
    if memory_mb:
        raise InvalidRequest(
            "give memory per host (memory_mb, --mem) or per slot "
            "(mem_per_slot_mb, --mem-per-cpu), not both"
        )
    if per_slot_mb < 0:
        raise InvalidRequest("mem_per_slot_mb may not be negative")
    return per_slot_mb * slots


def multi_host_refusal(
    req: ResourceRequirement | None,
    slots: int,
    memory_mb: int,
    exclusive: bool,
    mem_per_slot_mb: int,
    queue: QueueRecord,
    hosts: Collection[HostRecord],
) -> str | None:
    """For a job that may spread: None when some set of the queue's hosts (empty) holds it,
    else why not. "" when the job stays on one host: the single-host check applies."""
    eligible = queue_hosts(queue, hosts)
    if not eligible:
        return None
    spec = JobSpec(  # built only now: every submit asks, most before any host registers
        user="-",
        queue=queue.name,
        slots=slots,
        memory_mb=memory_mb,
        exclusive=exclusive,
        mem_per_slot_mb=mem_per_slot_mb,
    )
    # a host as big as the job (usually the first) rather than the biggest: O(1), not O(hosts)
    one_host = (req is not None and req.span is not None) or any(slots <= h.slots for h in eligible)
    if not spreads(spec, req) and one_host:
        return ""  # one host: xce/sched/admission/feasibility.py judges it
    select = req.select if req is not None else None
    views = [_empty_view(h) for h in sorted(eligible, key=lambda h: h.name)]
    fitting = [
        i for i, v in enumerate(views) if select is None or matches(select, host_attributes(v))
    ]
    if select is not None and not fitting:
        return ""  # the single-host check names the select[] problem
    free_slots = [v.slots for v in views]
    free_mem = [v.memory_mb for v in views]

    class _Pool:  # what groups_of reads
        hosts = views

    layout = Layout.of(spec, req)
    for group in groups_of(_Pool(), fitting, req):
        if choose(layout, spec, group, free_slots, free_mem, lambda i: views[i].slots):
            return None
    where = f"queue {queue.name!r}"
    total = sum(views[i].slots for i in fitting)
    sizes = [views[i].slots for i in fitting]
    if total >= slots and layout.ptile is not None and not exclusive:
        # enough slots in all: the tile size is what no set of hosts can meet
        why = ptile_shortfall(layout.ptile, slots, sizes)
        if why:
            return f"no set of hosts of {where} can ever hold this job: {why}"
    return (
        f"no set of hosts of {where} can ever hold this job ({slots} slots; its "
        f"hosts have {total} slots in all)"
    )
