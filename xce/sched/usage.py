"""Decayed usage per user for fairshare: core-seconds of finished jobs, halving every
`half_life_s` (LSF's HIST_HOURS decay).

The ledger is fed by the controller as jobs end (`observe`) and by the simulator; the
scheduler only sees the numbers it returns (`Snapshot.usage`), so `plan` stays pure. It is
rebuilt from the finished jobs still in the state after a restart (`seed`): usage older than
the retention of finished jobs is forgotten then, which the decay mostly does anyway.
"""

from __future__ import annotations

from xce.core import events as ev
from xce.core.model import JobRecord, JobState
from xce.core.state import ClusterState


class UsageLedger:
    def __init__(self, half_life_s: float = 3600.0) -> None:
        self.half_life_s = half_life_s
        self._value: dict[str, float] = {}  # user -> core-seconds as of `_at[user]`
        self._at: dict[str, float] = {}

    def _decayed(self, user: str, now: float) -> float:
        value = self._value.get(user, 0.0)
        if not value:
            return 0.0
        return value * 0.5 ** (max(0.0, now - self._at[user]) / self.half_life_s)

    def charge(self, user: str, core_seconds: float, at: float) -> None:
        """Add `core_seconds` of use by `user`, counted from time `at`."""
        if core_seconds <= 0:
            return
        current = self._decayed(user, at)
        self._value[user] = current + core_seconds
        self._at[user] = at

    def charge_job(self, job: JobRecord) -> None:
        if job.start_time is not None and job.end_time is not None:
            seconds = job.spec.slots * max(0.0, job.end_time - job.start_time)
            self.charge(job.spec.user, seconds, job.end_time)

    def usage(self, now: float) -> dict[str, float]:
        """user -> decayed core-seconds at `now`: `_decayed` for every user, its steps
        inline (a fairshare replay asks this at every pass; a call per user was most of it;
        the same arithmetic, so the same numbers)."""
        at, half_life_s = self._at, self.half_life_s
        decayed = {}
        for user, value in self._value.items():
            since = now - at[user]
            decayed[user] = (
                value * 0.5 ** ((since if since > 0.0 else 0.0) / half_life_s) if value else 0.0
            )
        return decayed

    def observe(self, event: ev.Event, state: ClusterState) -> None:
        """Listener for applied events: charge a job that has just ended after running."""
        job_id = getattr(event, "job_id", None)
        if job_id is None or not isinstance(event, ev.JobFinished | ev.JobKilled | ev.JobHostLost):
            return
        job = state.jobs.get(job_id)
        if job is not None and job.state in (JobState.DONE, JobState.EXIT):
            self.charge_job(job)

    def seed(self, state: ClusterState) -> None:
        """Charge every finished job still held in `state` (after recovery)."""
        for job in state.jobs.values():
            if job.state in (JobState.DONE, JobState.EXIT):
                self.charge_job(job)
