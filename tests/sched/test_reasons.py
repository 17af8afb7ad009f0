"""Wait reasons: decided by kind, rendered to the texts people have always read."""

from __future__ import annotations

import pytest

from tests.unit.helpers import T0, new_state, submit
from xce.core import events as ev
from xce.sched import reasons as why
from xce.sched.passes.pipeline import plan
from xce.sched.reasons import ReasonTexts, WaitKind, WaitReason
from xce.sched.snapshot import snapshot_of

TEXTS = [
    (why.ROOM, "waiting for free slots or memory"),
    (why.ROOM.holding("host h reserved from 1100"),
     "waiting for free slots or memory (host h reserved from 1100)"),
    (why.preempted_ending("h"),
     "waiting for free slots or memory (preempted jobs on host h are ending)"),
    (why.preempting(("1",), "h", False),
     "waiting for free slots or memory (suspending job 1 on host h)"),
    (why.preempting(("1", "2"), "h", True),
     "waiting for free slots or memory (requeueing jobs 1, 2 on host h)"),
    (why.devices((("gpu", 2), ("fpga", 1))),
     "waiting for free devices: gpu (2 asked), fpga (1 asked)"),
    (why.license_short("matlab", 2, 1), "waiting for license matlab (2 asked, 1 free)"),
    (why.TOO_BIG, "no host is big enough"),
    (why.TOO_FEW, "no set of hosts is big enough"),
    (why.too_few_tiles("no host has 8"), "no set of hosts is big enough: no host has 8"),
    (why.too_few_devices("gpu", 5, 4), "no host has 5 gpu devices (the most is 4)"),
    (why.NO_MATCH, "no online host matches the resource requirement"),
    (why.NO_HOST, "no online host in the queue"),
    (why.begin(1700000000.7), "begin time not reached: eligible at 1700000000"),
    (why.DEPENDENCY, "waiting for dependency"),
    (why.DEPENDENCY_NEVER, "dependency can never be satisfied"),
    (why.queue_inactive("off"), "queue off is inactive"),
    (why.queue_limit("normal", 4), "queue normal has reached its limit of 4 running jobs"),
    (why.user_limit("alice", "normal", 2),
     "user alice has reached the limit of 2 running jobs in queue normal"),
    (why.ARRAY_LIMIT, "array concurrency limit reached"),
    (why.no_reservation("nope"), "reservation nope does not exist"),
    (why.reservation_pending("team", 1200.0), "waiting for reservation team to start at 1200"),
    (why.reservation_ended("team"), "reservation team has ended"),
    (why.reservation_holds("m", 0, "h", 100.0, 200.0),
     "reservation m holds host h from 100 until 200 and the job would still be running then"),
    (why.reservation_holds("m", 3, "h", 100.0, 200.0),
     "reservation m holds 3 slots of host h from 100 until 200 and the job would still be "
     "running then"),
]  # fmt: skip


@pytest.mark.parametrize(("reason", "text"), TEXTS)
def test_each_kind_renders_todays_text(reason: WaitReason, text: str) -> None:
    assert str(reason) == text


def test_every_kind_is_covered_above() -> None:
    assert {reason.kind for reason, _ in TEXTS} == set(WaitKind)


def test_the_reservation_a_job_holds_is_dropped_for_its_shape() -> None:
    held = why.ROOM.holding("host h reserved from 1100")
    assert held.kind is WaitKind.ROOM and held != why.ROOM
    assert held.without_reservation() == why.ROOM
    assert why.TOO_BIG.without_reservation() is why.TOO_BIG


def test_the_pass_returns_kinds_and_the_edge_renders_them() -> None:
    state = new_state(hosts={"h": (2, 1000)})
    state.apply(ev.JobStarted(T0, submit(state, slots=2), "h"))
    waiting, huge = submit(state), submit(state, slots=64, resources="span[hosts=1]")
    result = plan(snapshot_of(state), T0)
    assert result.reasons[waiting] is why.ROOM
    assert result.reasons[huge].kind is WaitKind.TOO_BIG
    texts = ReasonTexts(result.reasons, default="all online hosts are full")
    assert texts[waiting] == "waiting for free slots or memory"
    assert texts.get(huge) == "no host is big enough"
    assert texts.get("elsewhere") == "all online hosts are full"
    assert ReasonTexts().get("elsewhere", "queued") == "queued"
    texts.update({"9": why.preempted_ending("h")})
    assert "9" in texts and len(texts) == 3
