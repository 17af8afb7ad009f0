"""Submit-time feasibility (xce/sched/admission/feasibility.py): a job no host could ever run is
refused with the reason, and the verdict agrees with the scheduler's own filters."""

from __future__ import annotations

import pytest

from xce.core.model import HostAdmin, HostRecord, QueueRecord
from xce.sched.admission.feasibility import refusal
from xce.sched.expr import parse_requirement

HOSTS = [
    HostRecord("n1", 4, 8000, (("type", "X86"), ("rack", "r1"), ("group", "cpu"))),
    HostRecord(
        "n2",
        16,
        64000,
        (("type", "X86"), ("rack", "r2"), ("gpu", "2"), ("group", "gpu")),
        admin=HostAdmin.CLOSED,
        reachable=False,
    ),
]
NORMAL = QueueRecord("normal")


def why(
    resources: str = "",
    slots: int = 1,
    memory_mb: int = 0,
    queue: QueueRecord = NORMAL,
    hosts: list[HostRecord] = HOSTS,
) -> str | None:
    requirement = parse_requirement(resources) if resources else None
    return refusal(requirement, slots, memory_mb, queue, hosts)


def test_jobs_some_host_could_run_are_accepted_even_on_a_closed_unreachable_host() -> None:
    assert why() is None
    assert why("select[gpu>=2]", slots=16, memory_mb=64000) is None  # n2, closed for now
    assert why("select[type==X86 && rack==r1]") is None
    assert why("select[defined(gpu)] order[-mem]") is None
    assert why("select[mem>=maxmem]") is None  # empty hosts: free == total


def test_a_name_no_host_defines_is_refused_by_name() -> None:
    message = why("select[foo==1]")
    assert message is not None
    assert "defines 'foo'" in message and "gpu, group, rack, type" in message
    assert "defines 'fpga'" in (why("select[fpga]") or "")
    assert "defines 'fpga'" in (why("select[defined(fpga) || type==X86]") or "")


def test_a_bare_word_on_the_right_is_a_literal_not_an_attribute() -> None:
    assert why("select[type==X86]") is None
    assert "does not match" in (why("select[type==ARM]") or "")


def test_case_is_significant_and_the_message_says_so() -> None:
    message = why("select[type==x86]")
    assert message is not None and "case-sensitive" in message and "'X86'" in message


def test_more_slots_or_memory_than_any_host() -> None:
    assert why(slots=17) == (
        "the job asks for 17 slots on one host; the largest host of queue 'normal' has 16"
    )
    assert why(memory_mb=64001) == (
        "the job asks for 64001 MB of memory; the most any host of queue 'normal' has is 64000 MB"
    )


def test_each_host_fails_for_its_own_reason() -> None:
    message = why("select[gpu>=1]", slots=8)  # n1: too small; n2: fits
    assert message is None
    message = why("select[rack==r1]", slots=8)  # n1 too small, n2 in the wrong rack
    assert message == (
        "no host of queue 'normal' can ever run this job: n1 has 4 slots; "
        "n2 does not match select[rack==r1]"
    )


def test_only_the_queues_hosts_count() -> None:
    cpu_only = QueueRecord("cpu", hosts=("@cpu",))
    assert "the largest host of queue 'cpu' has 4" in (why(slots=8, queue=cpu_only) or "")
    assert "defines 'gpu'" in (why("select[gpu>0]", queue=cpu_only) or "")
    just_n2 = QueueRecord("big", hosts=("n2",))
    assert why(slots=16, queue=just_n2) is None


@pytest.mark.parametrize("hosts", [[], [HostRecord("x", 2, 100)]])
def test_no_registered_host_of_the_queue_cannot_judge(hosts: list[HostRecord]) -> None:
    assert (
        why("select[foo==1]", slots=1000, hosts=hosts, queue=QueueRecord("q", hosts=("nothere",)))
        is None
    )
