"""Resource usage of a job's process tree, sampled with psutil and closed with wait4().

Sampling sees every live process in the tree (CPU time of each, the sum of their RSS); the
final `wait4` rusage adds the CPU time of descendants that were already reaped and the peak
RSS of the largest single process. Together they give Slurm's TotalCPU and MaxRSS.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

import psutil


@dataclass
class UsageMeter:
    """Accumulates the maxima over the life of one job."""

    pid: int
    # RSS of the forking worker: a child's ru_maxrss starts from it (the kernel carries the
    # pre-exec high-water mark across exec), so a maxrss at or below it says nothing.
    fork_baseline_bytes: int = 0
    cpu_user_s: float = 0.0
    cpu_system_s: float = 0.0
    max_rss_bytes: int = 0

    def sample(self) -> None:
        try:
            leader = psutil.Process(self.pid)
            procs = [leader, *leader.children(recursive=True)]
        except psutil.Error:
            return
        user = system = 0.0
        rss = 0
        for proc in procs:
            try:
                with proc.oneshot():
                    times = proc.cpu_times()
                    rss += proc.memory_info().rss
            except psutil.Error:
                continue
            user += times.user + getattr(times, "children_user", 0.0)
            system += times.system + getattr(times, "children_system", 0.0)
        self.cpu_user_s = max(self.cpu_user_s, user)
        self.cpu_system_s = max(self.cpu_system_s, system)
        self.max_rss_bytes = max(self.max_rss_bytes, rss)

    def close(self, rusage: resource.struct_rusage | None) -> None:
        """Fold in the final rusage from wait4 (ru_maxrss is in KiB on Linux)."""
        if rusage is None:
            return
        self.cpu_user_s = max(self.cpu_user_s, rusage.ru_utime)
        self.cpu_system_s = max(self.cpu_system_s, rusage.ru_stime)
        maxrss = rusage.ru_maxrss * 1024
        if maxrss > self.fork_baseline_bytes * 1.05:
            self.max_rss_bytes = max(self.max_rss_bytes, maxrss)
