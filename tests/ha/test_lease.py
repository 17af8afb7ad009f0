"""The primary's write lease (xce/ha/lease.py), on a fake clock."""

from __future__ import annotations

from xce.ha.lease import Lease


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_single_candidate_always_writes() -> None:
    clock = Clock()
    lease = Lease(1, 1.0, clock)
    clock.now += 1000
    assert lease.refusal() is None


def test_two_candidates_hold_the_lease_while_the_standby_answers() -> None:
    clock = Clock()
    lease = Lease(2, 1.0, clock)
    assert lease.refusal() is None  # the election itself was a probe round
    for _ in range(10):
        clock.now += 0.5
        lease.tick()
        lease.probed(1, clock.now)
        assert lease.refusal() is None
    clock.now += 0.5
    lease.tick()
    lease.probed(0, clock.now)  # the standby went away
    clock.now += 0.6
    lease.tick()
    assert "majority" in (lease.refusal() or "")


def test_with_two_candidates_a_worker_keeps_the_lease_alive() -> None:
    clock = Clock()
    lease = Lease(2, 1.0, clock)
    for _ in range(10):
        clock.now += 0.5
        lease.tick()
        lease.probed(0, clock.now)
        lease.worker_contact()
        assert lease.refusal() is None


def test_with_three_candidates_workers_do_not_count() -> None:
    clock = Clock()
    lease = Lease(3, 1.0, clock)
    clock.now += 1.5
    lease.tick()
    lease.worker_contact()
    lease.probed(0, clock.now)
    assert lease.refusal() is not None
    lease.probed(1, clock.now)  # itself + one of three is a majority
    assert lease.refusal() is None


def test_a_frozen_primary_writes_nothing_until_a_fresh_probe_round() -> None:
    clock = Clock()
    lease = Lease(2, 1.0, clock)
    lease.worker_contact()
    clock.now += 30  # SIGSTOP for 30 s
    assert "paused" in (lease.refusal() or "")
    lease.worker_contact()  # a heartbeat buffered during the freeze arrives first
    lease.tick()
    assert "paused" in (lease.refusal() or "")
    lease.probed(1, clock.now - 5)  # a round that began before the freeze ended: no
    assert "paused" in (lease.refusal() or "")
    lease.probed(1, clock.now)
    assert lease.refusal() is None
