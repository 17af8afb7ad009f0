"""Multi-host allocations: pure helpers shared by the core, scheduler and views.

A job's allocation is a tuple of `HostSlots`, first host first (it runs the script). A
single-host job stores none (`JobRecord.allocation == ()`) and holds `spec.slots` on
`JobRecord.host`, so old WAL records and checkpoints mean exactly what they meant.
"""

from __future__ import annotations

from collections.abc import Sequence

from xce.core.errors import InvalidRequest
from xce.core.model import HostSlots, JobRecord, JobSpec


def host_memory_mb(spec: JobSpec, slots_here: int) -> int:
    """Memory a host holds for its `slots_here` slots of the job: `--mem-per-cpu` times
    the slots there, else `--mem` (per host, as in Slurm)."""
    if spec.mem_per_slot_mb:
        return spec.mem_per_slot_mb * slots_here
    return spec.memory_mb


def check_allocation(job: JobRecord, first: str, hosts: Sequence[HostSlots]) -> None:
    """An allocation must start at `first`, name each host once and hold exactly the job's
    slots: what `ClusterState.apply` checks before a JobStarted with hosts mutates."""
    check_hosts(job.id, job.spec, first, hosts)


def check_hosts(job_id: str, spec: JobSpec, first: str, hosts: Sequence[HostSlots]) -> None:
    """`check_allocation` for a job known by its id and spec (the simulator has no record:
    xce/sched/sim/cluster.py)."""
    if hosts[0].host != first:
        raise InvalidRequest(f"job {job_id}: the allocation must start at host {first}")
    names = [p.host for p in hosts]
    if len(set(names)) != len(names):
        raise InvalidRequest(f"job {job_id}: a host appears twice in the allocation")
    total = sum(p.slots for p in hosts)
    # an exclusive job holds whole hosts: at least its slots
    enough = total >= spec.slots if spec.exclusive else total == spec.slots
    if any(p.slots < 1 for p in hosts) or not enough:
        raise InvalidRequest(f"job {job_id}: the allocation does not hold its {spec.slots} slots")


def exec_host(job: JobRecord) -> str:
    """bjobs' EXEC_HOST: `2*n1:2*n2`; a single-slot host is just its name."""
    return ":".join(p.host if p.slots == 1 else f"{p.slots}*{p.host}" for p in job.hosts)


def job_environment(hosts: Sequence[HostSlots]) -> dict[str, str]:
    """The variables a job sees of its allocation (besides XCE_HOSTFILE, a path):
    XCE_HOSTS one name per slot (LSB_HOSTS), XCE_NODELIST the hosts (comma-separated),
    XCE_NUM_HOSTS, XCE_SLOTS the total."""
    return {
        "XCE_HOSTS": " ".join(p.host for p in hosts for _ in range(p.slots)),
        "XCE_NODELIST": ",".join(p.host for p in hosts),
        "XCE_NUM_HOSTS": str(len(hosts)),
        "XCE_SLOTS": str(sum(p.slots for p in hosts)),
    }


def nodefile_text(hosts: Sequence[HostSlots]) -> str:
    """One host name per slot, one per line (LSB_DJOB_HOSTFILE and PBS_NODEFILE)."""
    return "".join(f"{p.host}\n" * p.slots for p in hosts)


def hostfile_text(hosts: Sequence[HostSlots]) -> str:
    """`host slots` lines (LSB_DJOB_HOSTFILE style, also read by OpenMPI as a hostfile)."""
    return "".join(f"{p.host} {p.slots}\n" for p in hosts)
