"""Per-job containment for the worker: cgroup v2, cgroup v1, or a "none" fallback.

    backend = detect("auto", namespace="xce-<worker>")
    cg = backend.create("job-12.1", Limits(memory_bytes=..., cpus=2, pids=4096))
    # in the forked child: cg.enter(); os.setsid(); os.execve(...)
    cg.set_leader(pid); ...; cg.kill(); cg.remove()

Standard library only: the per-job keeper imports this package and must start fast.
"""

from xce.worker.cgroups.base import CgroupBackend, CgroupError, CgroupUsage, JobCgroup, Limits
from xce.worker.cgroups.detect import detect
from xce.worker.cgroups.none import NoneBackend, NoneJobCgroup
from xce.worker.cgroups.v1 import V1Backend, V1JobCgroup
from xce.worker.cgroups.v2 import V2Backend, V2JobCgroup

__all__ = [
    "CgroupBackend",
    "CgroupError",
    "CgroupUsage",
    "JobCgroup",
    "Limits",
    "NoneBackend",
    "NoneJobCgroup",
    "V1Backend",
    "V1JobCgroup",
    "V2Backend",
    "V2JobCgroup",
    "detect",
]
