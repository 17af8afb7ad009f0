"""Usage and OOM kills of the hosts after a multi-host job's first.

Each such host holds the job's share cgroup (xce/worker/tasks/shares.py); its worker reads the
cgroup's CPU (user + system) and memory high-water mark as root and sends them with every
heartbeat (and at once when a task there ends, before the task's caller hears its status),
with whether the OOM killer has killed anything in it. The figures are the kernel's
cumulative counters, so the controller only keeps the latest of each host in memory: a
controller that restarts or takes over hears them again with the next heartbeats, and
the durable record is the job's final usage, the first host's plus every share's, in its
`JobFinished` event, with each host's part in its `host_usage` (appended to the event and the
job record).

Hostile input: a report is taken only from the worker authenticated as that host (the API
checks the token's host) and only for an attempt that host holds a share of now; anything
else is ignored, so a worker cannot add usage to, or end, another host's job.
"""

from __future__ import annotations

from dataclasses import dataclass

from xce.core import events as ev
from xce.core.allocation import host_memory_mb
from xce.core.model import HostUsage, JobRecord, Usage
from xce.core.state import ClusterState

Key = tuple[str, int]


@dataclass(frozen=True)
class ShareReport:
    """One share a worker holds, with its cgroup's figures (read by the worker, as root)."""

    job_id: str
    attempt: int
    cpu_user_s: float = 0.0
    cpu_system_s: float = 0.0
    max_rss_bytes: int = 0
    oom_killed: bool = False


def holds_share(job: JobRecord | None, host: str, attempt: int) -> bool:
    """Whether `host` holds a share (not the first host) of this active attempt now."""
    return (
        job is not None
        and job.attempt == attempt
        and job.state.active
        and job.host != host
        and any(p.host == host for p in job.hosts)
    )


class ShareUsage:
    """The latest figures of every share, by attempt then host (memory only, see above)."""

    def __init__(self) -> None:
        self.latest: dict[Key, dict[str, Usage]] = {}

    def accept(
        self, state: ClusterState, host: str, reports: list[ShareReport], now: float
    ) -> list[ev.Event]:
        """Remember the shares' figures; the events that end jobs whose share had an OOM
        kill (every host's part is then killed: the job leaves every host's assignments)."""
        events: list[ev.Event] = []
        for r in reports:
            job = state.jobs.get(r.job_id)
            if job is None or not holds_share(job, host, r.attempt):
                continue
            self.latest.setdefault((job.id, job.attempt), {})[host] = Usage(
                r.cpu_user_s, r.cpu_system_s, r.max_rss_bytes, 0.0
            )
            if r.oom_killed and not job.kill_requested:
                slots = next((p.slots for p in job.hosts if p.host == host), 0)
                limit = host_memory_mb(job.spec, slots)
                events.append(
                    ev.JobKilled(
                        now,
                        job.id,
                        f"a task on host {host} was killed by the OOM killer "
                        f"(memory limit {limit} MB on that host); every host's part was killed",
                    )
                )
        return events

    def total(self, job: JobRecord, first: Usage) -> Usage:
        """The first host's usage plus every share's: CPU summed, memory the largest host's."""
        shares = self.latest.get((job.id, job.attempt), {})
        if not shares:
            return first
        return Usage(
            first.cpu_user_s + sum(u.cpu_user_s for u in shares.values()),
            first.cpu_system_s + sum(u.cpu_system_s for u in shares.values()),
            max([first.max_rss_bytes, *(u.max_rss_bytes for u in shares.values())]),
            first.wall_time_s,
        )

    def per_host(self, job: JobRecord, first: Usage) -> tuple[HostUsage, ...]:
        """Each host's part of `total` for a multi-host job, in allocation order (the
        first host's from its finish report); () for a single-host job."""
        if not job.allocation:
            return ()
        shares = self.latest.get((job.id, job.attempt), {})
        shares = {**shares, job.host or "": first}
        return tuple(
            HostUsage(p.host, u.cpu_user_s, u.cpu_system_s, u.max_rss_bytes)
            for p in job.hosts
            if (u := shares.get(p.host)) is not None
        )

    def forget(self, state: ClusterState) -> None:
        """Drop the figures of attempts no longer active (called now and then)."""
        for key in [
            k
            for k in self.latest
            if (j := state.jobs.get(k[0])) is None or j.attempt != k[1] or not j.state.active
        ]:
            del self.latest[key]
