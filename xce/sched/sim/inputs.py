"""The simulator's inputs: policy presets, host names, `--reservation` text, and a trace
job as a JobSpec with the time it occupies its slots.
"""

from __future__ import annotations

from collections.abc import Sequence

from xce.core.model import JobSpec, ReservationRecord
from xce.sched.plugins import builtin
from xce.sched.sim.swf import SwfJob

HOST_MEMORY_MB = 1 << 30  # traces rarely give memory; hosts never run out
PRESETS: dict[str, tuple[str, ...]] = {
    "fcfs": ("strict",),  # textbook FCFS: a waiting job blocks all behind it
    "first-fit": (),  # the live default: later jobs that fit may go ahead, no reservation
    "easy": ("backfill",),
    "fairshare": ("fairshare", "backfill"),
    "fairshare-group": ("fairshare-group", "backfill"),
}


def plugins_for(policy: str) -> tuple[str, ...]:
    """A preset name or a comma-separated plugin list; ValueError names what is unknown."""
    if policy in PRESETS:
        return PRESETS[policy]
    names = tuple(p.strip() for p in policy.split(",") if p.strip())
    if not names:
        raise ValueError(f"policy {policy!r} is empty")
    try:
        builtin().policy_for(names)  # the simulator runs the built-in plugins
    except ValueError as exc:
        raise ValueError(f"policy {policy!r}: {exc} (presets: {', '.join(PRESETS)})") from None
    return names


def host_names(hosts: int) -> list[str]:
    width = len(str(hosts))
    return [f"n{i:0{width}d}" for i in range(1, hosts + 1)]


def parse_reservation(text: str, number: int, origin: float, hosts: int) -> ReservationRecord:
    """`FROM-TO[@HOST,...][/SLOTS]` (seconds after `origin`, the trace's first submit; all
    hosts when none are named; whole hosts unless SLOTS per host) as a maintenance
    reservation named `rsv<number>`: no trace job targets it, so it only keeps jobs off.
    ValueError names what is wrong."""
    body, _, slots_text = text.partition("/")
    window, _, host_text = body.partition("@")
    begin, sep, finish = window.partition("-")
    try:
        start, end = float(begin), float(finish)
        slots = int(slots_text) if slots_text else 0
    except ValueError:
        raise ValueError(
            f"--reservation {text!r}: expected FROM-TO[@HOST,...][/SLOTS], "
            "times in seconds after the first submit"
        ) from None
    if not sep or start < 0 or end <= start:
        raise ValueError(f"--reservation {text!r}: give FROM-TO with FROM >= 0 and TO > FROM")
    if slots < 0:
        raise ValueError(f"--reservation {text!r}: SLOTS may not be negative")
    known = host_names(hosts)
    chosen = (
        tuple(h.strip() for h in host_text.split(",") if h.strip()) if host_text else tuple(known)
    )
    for host in chosen:
        if host not in known:
            raise ValueError(
                f"--reservation {text!r}: no host {host} (hosts are {known[0]}..{known[-1]})"
            )
    return ReservationRecord(
        f"rsv{number}",
        chosen,
        origin + start,
        origin + end,
        slots,
        maintenance=True,
        flags=("overlap",),
    )


def spec_for(job: SwfJob, queue: str = "normal", slots: int | None = None) -> JobSpec:
    """The job as submitted; one wider than a host of `slots` is packed on hosts. Jobs alike
    in what a pass reads (user, size, requested time, GPUs) get equal specs, so `SpecMemo`
    can hand them one object (the number is in the job's id, not its name)."""
    wide = slots is not None and job.procs > slots
    # positional, in JobSpec's field order up to `gres` (a replay makes one per job, and
    # matching keywords to 25 parameters was a fifth of the cost)
    return JobSpec(
        job.user,
        queue,
        "swf",  # name
        None,  # command: a replay runs nothing (and a pass reads none: `scheduled`)
        None,  # script
        job.procs,  # slots
        0,  # memory_mb
        job.requested_time,  # walltime_s
        (),  # env
        None,  # cwd
        (),  # inputs
        (),  # outputs
        (),  # dependency
        False,  # hold
        "",  # submit_host
        f"span[ptile={slots}]" if wide else "",  # resources
        None,  # stdout_file
        None,  # stderr_file
        (("gpu", str(job.gpus)),) if job.gpus else (),  # gres
    )


class SpecMemo:
    """`spec_for` with one spec object per shape of job: a trace's users ask the same sizes
    and round requested times over and over, so most jobs share a spec, which costs less
    to make (a JobSpec has 25 fields) and lets a pass reuse what it found for the first of
    them (`PassTallies.blocked`, keyed by the spec object). Bounded: forgotten whole
    when it holds `limit` shapes. A trace whose jobs are rarely alike (requested times all
    different, as in synthetic traces) gains nothing from it, and each look costs a key:
    `worth_it` tells from the trace's first jobs, before the replay."""

    __slots__ = ("_specs", "limit", "queue", "slots")

    def __init__(self, slots: int, limit: int = 65536, queue: str = "normal") -> None:
        self.slots, self.limit, self.queue = slots, limit, queue
        self._specs: dict[tuple[str, int, int | None, int], JobSpec] = {}

    @staticmethod
    def worth_it(jobs: Sequence[SwfJob], trial: int = 1024) -> bool:
        """Whether at least one in eight of the first `trial` jobs is alike an earlier one
        (else the replay calls `spec_for` itself)."""
        first = jobs[:trial]
        shapes = {(job.user, job.procs, job.requested_time, job.gpus) for job in first}
        return bool(first) and (len(first) - len(shapes)) * 8 >= len(first)

    def __call__(self, job: SwfJob) -> JobSpec:
        key = (job.user, job.procs, job.requested_time, job.gpus)
        spec = self._specs.get(key)
        if spec is None:
            if len(self._specs) >= self.limit:
                self._specs.clear()
            spec = self._specs[key] = spec_for(job, self.queue, self.slots)
        return spec


def executed_time(job: SwfJob) -> float:
    """How long the job occupies its slots: its run time, cut at its requested time."""
    if job.requested_time is not None and job.run_time > job.requested_time:
        return float(job.requested_time)
    return job.run_time
