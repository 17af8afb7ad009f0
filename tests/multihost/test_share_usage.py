"""The controller's side of share usage and OOM kills,
xce/controller/shareusage.py: figures from a host are taken only for an attempt that host
holds a share of now; the final usage sums CPU over hosts and takes the largest memory; an
OOM kill in a share ends the job with a reason naming the host and its memory limit."""

from __future__ import annotations

from tests.unit.helpers import T0, new_state, submit
from xce.controller.shareusage import ShareReport, ShareUsage
from xce.core import events as ev
from xce.core.model import HostSlots, HostUsage, JobState, Usage

HOSTS = {"n1": (4, 1000), "n2": (4, 1000), "n3": (4, 1000)}
SPREAD = (HostSlots("n1", 2), HostSlots("n2", 2))
MiB = 1 << 20


def _running() -> tuple[object, str]:
    state = new_state(hosts=HOSTS)
    job = submit(state, slots=4, memory_mb=300, resources="span[ptile=2]")
    state.apply(ev.JobStarted(T0, job, "n1", hosts=SPREAD))
    return state, job


def test_cpu_is_summed_over_hosts_and_memory_is_the_largest_hosts() -> None:
    state, job = _running()
    shares = ShareUsage()
    assert shares.accept(state, "n2", [ShareReport(job, 0, 1.5, 0.5, 90 * MiB)], T0 + 1) == []
    total = shares.total(state.jobs[job], Usage(2.0, 0.25, 40 * MiB, 10.0))
    assert total == Usage(3.5, 0.75, 90 * MiB, 10.0)
    # a later report replaces the earlier (the kernel's counters are cumulative)
    shares.accept(state, "n2", [ShareReport(job, 0, 2.5, 0.5, 95 * MiB)], T0 + 2)
    assert shares.total(state.jobs[job], Usage()).cpu_time_s == 3.0
    assert shares.per_host(state.jobs[job], Usage(1.0, 0.0, 7)) == (
        HostUsage("n1", 1.0, 0.0, 7),
        HostUsage("n2", 2.5, 0.5, 95 * MiB),
    )


def test_reports_for_jobs_the_host_holds_no_share_of_are_ignored() -> None:
    state, job = _running()
    shares = ShareUsage()
    other = submit(state, slots=1)
    hostile = [
        ShareReport(job, 0, 100.0, oom_killed=True),  # n3 is not in the allocation
        ShareReport(other, 0, 100.0, oom_killed=True),  # not started anywhere
        ShareReport("999", 0, 100.0, oom_killed=True),  # no such job
    ]
    assert shares.accept(state, "n3", hostile, T0 + 1) == []
    # the first host runs the job itself: it has no share to report
    assert shares.accept(state, "n1", [ShareReport(job, 0, 100.0, oom_killed=True)], T0 + 1) == []
    # another attempt of the job
    assert shares.accept(state, "n2", [ShareReport(job, 1, 100.0, oom_killed=True)], T0 + 1) == []
    assert shares.total(state.jobs[job], Usage(1.0)).cpu_time_s == 1.0


def test_an_oom_kill_in_a_share_ends_the_job_naming_the_host_and_limit() -> None:
    state, job = _running()
    events = ShareUsage().accept(state, "n2", [ShareReport(job, 0, oom_killed=True)], T0 + 1)
    assert len(events) == 1
    state.apply(events[0])
    record = state.jobs[job]
    assert record.state is JobState.EXIT
    assert "host n2" in record.reason and "OOM killer" in record.reason
    assert "300 MB" in record.reason
    assert state.host_load == {}  # every host's part leaves its assignments
