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
        lease.reached("s", clock.now)
        assert lease.refusal() is None
    clock.now += 0.5
    lease.tick()  # the standby went away
    clock.now += 0.6
    lease.tick()
    assert "neither" in (lease.refusal() or "")


def test_with_two_candidates_a_worker_heartbeat_keeps_the_lease_between_heartbeats() -> None:
    """A lone survivor with one worker that calls every 5 s: never a refusal in between."""
    clock = Clock()
    lease = Lease(2, 1.5, clock, worker_lease_s=5.0 + 3.0)
    lease.worker_contact()
    for step in range(200):
        clock.now += 0.1
        lease.tick()
        if step % 50 == 49:
            lease.worker_contact()
        assert lease.refusal() is None
    for _ in range(81):  # the worker died: the lease runs out once
        clock.now += 0.1
        lease.tick()
    assert "worker" in (lease.refusal() or "")


def test_with_three_candidates_workers_do_not_count() -> None:
    clock = Clock()
    lease = Lease(3, 1.0, clock, worker_lease_s=100.0)
    for _ in range(15):
        clock.now += 0.1
        lease.tick()
    lease.worker_contact()
    lease.probed(clock.now)
    assert "1 of 3" in (lease.refusal() or "")
    lease.reached("s1", clock.now)  # itself + one of three is a majority
    assert lease.refusal() is None


def test_with_three_candidates_each_contact_counts_on_its_own_time() -> None:
    """One standby's acknowledgements renew the lease continuously while the other is down:
    no round of probes has to succeed as a whole."""
    clock = Clock()
    lease = Lease(3, 1.0, clock)
    for _ in range(100):
        clock.now += 0.1
        lease.tick()
        lease.reached("s1", clock.now - 0.05)
        assert lease.refusal() is None
    for _ in range(11):
        clock.now += 0.1
        lease.tick()
    assert lease.refusal() is not None
    lease.reached("s2", clock.now - 2.0)  # an old contact does not renew it
    assert lease.refusal() is not None


def test_five_candidates_need_two_others_within_the_lease() -> None:
    clock = Clock()
    lease = Lease(5, 1.0, clock)
    for _ in range(20):
        clock.now += 0.1
        lease.tick()
    lease.reached("a", clock.now)
    assert "2 of 5" in (lease.refusal() or "")
    lease.reached("b", clock.now - 0.5)
    assert lease.refusal() is None
    for _ in range(6):
        clock.now += 0.1
        lease.tick()
    assert lease.refusal() is not None  # b's contact is older than the lease now


def test_a_lone_claim_writes_only_once_a_worker_or_the_other_reached_it() -> None:
    clock = Clock()
    lease = Lease(2, 1.0, clock, contact=False, worker_lease_s=5.0)
    assert "alone" in (lease.refusal() or "")
    lease.worker_contact()
    assert lease.refusal() is None
    other = Lease(2, 1.0, clock, contact=False)
    other.reached("s", clock.now)
    assert other.refusal() is None


def test_a_frozen_primary_writes_nothing_until_a_fresh_probe_round() -> None:
    clock = Clock()
    lease = Lease(2, 1.0, clock, worker_lease_s=100.0)
    lease.worker_contact()
    clock.now += 30  # SIGSTOP for 30 s
    assert "paused" in (lease.refusal() or "")
    lease.worker_contact()  # a heartbeat buffered during the freeze arrives first
    lease.tick()
    assert "paused" in (lease.refusal() or "")
    lease.probed(clock.now - 5)  # a round that began before the freeze ended: no
    assert "paused" in (lease.refusal() or "")
    lease.probed(clock.now)
    assert lease.refusal() is None
