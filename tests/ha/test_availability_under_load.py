"""HA availability while clients keep submitting: real processes on 127.0.0.1, kill -9 and
SIGSTOP of each role, switchover to each candidate in turn.

Clients (tests/ha/submit_load.py) submit held jobs throughout, counted per second as
accepted or refused (no candidate took the submit in one pass). Refusals are allowed only
while the role changes hands: from the fault or the switchover until the new primary
serves. Losing a standby never refuses a submit; once a new primary serves, nothing is
refused either. No acknowledged job may be lost or have its number given to another job
(sync mode for the primary faults, and every switchover, which waits for the target to
hold every record). Durations are never asserted: bench figure 12 measures them.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ha.submit_load import SubmitLoad, missing, post_job, present
from tests.ha.test_availability import WORKER_HEARTBEAT_S, wait_serving
from tests.integration.ha_cluster import HaCluster, PrimaryWatch
from tests.integration.test_ha_cli import xce

FAILOVER_S = 2.0
# A standby frozen mid-stream (SIGSTOP) keeps its connection: async's lag bound makes a
# commit wait for it up to `sync_timeout_s` (5 s in HaCluster) before lifting the bound. A
# client waits longer than that, so a slow answer is not counted as a refusal.
PATIENT_S = 15.0
SYNC_TIMEOUT_S = 5.0  # HaCluster's
# With the primary frozen a pass over the candidates waits this long on it first. Longer
# than `sync_timeout_s`: a sync commit waits that long for a standby before it degrades
# (a new primary left alone, a standby that rejoins slowly), and that is not a refusal.
PRIMARY_FAULT_TIMEOUT_S = 8.0


def cluster(tmp_path: Path, candidates: int, replication: str = "async") -> HaCluster:
    """Candidate 0 primary, the others caught-up standbys, one worker. Two candidates get
    the long worker heartbeat of test_availability (a lone survivor's lease then rests on
    few worker contacts)."""
    heartbeat = WORKER_HEARTBEAT_S if candidates == 2 else 0.3
    c = HaCluster(
        tmp_path / f"ha{candidates}",
        candidates=candidates,
        failover_timeout=FAILOVER_S,
        replication=replication,
        heartbeat=heartbeat,
    )
    try:
        c.start_candidate(0)
        if candidates == 2:
            assert c.wait_primary(30) == 0
            c.start_candidate(1, "standby")
        else:
            for i in range(1, candidates):
                c.start_candidate(i, "standby")
            assert c.wait_primary(30) == 0
        for i in range(1, candidates):
            c.wait_caught_up(i)
        c.start_worker("w1", slots=2)
        c.wait_writable()
    except BaseException:
        c.stop()
        raise
    return c


@pytest.fixture
def trio(tmp_path: Path) -> Iterator[HaCluster]:
    c = cluster(tmp_path, 3)
    try:
        yield c
    finally:
        c.stop()


def test_switchover_to_every_candidate_in_turn_under_load(trio: HaCluster) -> None:
    """`xce admin switchover --to C` for each candidate in turn while three clients submit:
    each succeeds, no acknowledged job is lost, and a submit is refused only during a
    hand-over (from the command until the target acknowledged a submit)."""
    watch = PrimaryWatch(trio)
    load = SubmitLoad(trio, timeout=PATIENT_S)
    moves: list[tuple[float, int]] = []
    try:
        load.wait_acked(20, load.t0)
        for target in (1, 2, 0):
            trio.wait_caught_up(target)
            started = load.now()
            moves.append((started, target))
            result = xce(trio, "admin", "switchover", "--to", trio.candidate_urls[target])
            assert result.returncode == 0, result.stdout + result.stderr
            assert f"to {trio.candidate_urls[target]}" in result.stdout, result.stdout
            trio.wait_for(lambda t=target: trio.primaries() == [t], 20, f"{target} primary")
            load.wait_acked(20, load.now(), by=target)  # the clients moved on to it
    finally:
        acks = load.stop()
    print(f"accepted/refused per second: {load.per_second()}")  # pytest -s shows it
    windows = []
    for started, target in moves:
        first = min(a.at for a in acks if a.by == target and a.at >= started)
        windows.append((started, first))
    outside = load.refused_outside(windows)
    assert not outside, f"refused outside a hand-over: {outside[:3]}; {load.per_second()}"
    assert not missing(trio, acks), f"acknowledged jobs lost: {missing(trio, acks)[:5]}"
    assert watch.stop() == {}


def faults(slow: set[tuple[int, signal.Signals]]) -> list[Any]:  # pytest.param's type is private
    """2 and 3 candidates, kill -9 and SIGSTOP; `slow`: the cases past ~20 s on the shared
    machine (a frozen node waits out client and sync timeouts), run with `-m slow`."""
    return [
        pytest.param(n, sig, id=f"{n}-{sig.name}", marks=[pytest.mark.slow] * ((n, sig) in slow))
        for n in (2, 3)
        for sig in (signal.SIGKILL, signal.SIGSTOP)
    ]


@pytest.mark.parametrize(("candidates", "sig"), faults({(2, signal.SIGSTOP)}))
def test_losing_a_standby_under_load_refuses_no_submit(
    tmp_path: Path, candidates: int, sig: signal.Signals
) -> None:
    """The primary keeps its term and its lease (the other standby's acknowledgements, or
    with two candidates the worker's requests): not one submit refused from the fault on,
    through the failover timeout and async's wait for a frozen standby, none lost."""
    c = cluster(tmp_path, candidates)
    try:
        load = SubmitLoad(c, timeout=PATIENT_S)
        victim = c.candidates[candidates - 1]
        try:
            load.wait_acked(20, load.t0)
            fault = load.now()
            victim.send_signal(sig)
            # past the failover timeout (probes of the lost standby time out, the lease must
            # hold) and, for the lone standby frozen with its connection open, a whole
            # sync_timeout_s wait of async's lag bound on it
            settle = fault + FAILOVER_S + 1.0
            if candidates == 2 and sig == signal.SIGSTOP:
                settle += SYNC_TIMEOUT_S
            c.wait_for(lambda: load.now() >= settle, 15, "the settling time")
            load.wait_acked(30, settle, by=0)
        finally:
            acks = load.stop()
            victim.send_signal(signal.SIGCONT)
        print(f"accepted/refused per second: {load.per_second()}")
        refused = load.refused_since(fault)
        assert not refused, f"{len(refused)} refused, e.g. {refused[:3]}; {load.per_second()}"
        assert c.primaries() == [0]
        assert not missing(c, acks)
    finally:
        c.stop()


@pytest.mark.parametrize(("candidates", "sig"), faults({(2, signal.SIGSTOP), (3, signal.SIGSTOP)}))
def test_losing_the_primary_under_load_refuses_only_until_the_takeover(
    tmp_path: Path, candidates: int, sig: signal.Signals
) -> None:
    """Sync mode, so no acknowledged job may be lost. Refusals stop once the new primary
    serves. A frozen primary that wakes up (SIGCONT) steps down to standby of the new
    epoch: it acknowledges nothing after waking, a submit sent to it directly is refused and
    never appears, and it catches up with the new primary."""
    c = cluster(tmp_path, candidates, "sync")
    try:
        watch = PrimaryWatch(c)
        load = SubmitLoad(c, timeout=PRIMARY_FAULT_TIMEOUT_S)
        old = c.candidates[0]
        woke = float("inf")
        stale: list[str] = []
        try:
            load.wait_acked(20, load.t0)
            old.send_signal(sig)
            new = c.wait_primary(30, other_than=0)
            wait_serving(c, new)
            steady = load.now()
            load.wait_acked(30, steady, by=new)
            if sig == signal.SIGSTOP:
                woke = load.now()
                old.send_signal(signal.SIGCONT)
                stale = [f"stale-{n}" for n in range(5)]
                answers = [post_job(c, 0, name, FAILOVER_S) for name in stale]
                assert all(job is None for job, _ in answers), answers
                c.wait_for(
                    lambda: (c.health(0) or {}).get("role") == "standby", 30, "0 stepped down"
                )
                c.wait_caught_up(0)
                load.wait_acked(30, load.now(), by=new)
        finally:
            acks = load.stop()
            old.send_signal(signal.SIGCONT)
        print(f"accepted/refused per second: {load.per_second()}")
        refused = load.refused_since(steady)
        assert not refused, f"refused after the takeover: {refused[:3]}; {load.per_second()}"
        late = [a for a in acks if a.by == 0 and a.at >= woke]
        assert not late, f"the woken primary acknowledged {late[:3]}"
        assert not missing(c, acks), f"acknowledged jobs lost: {missing(c, acks)[:5]}"
        if sig == signal.SIGSTOP:
            names = set(present(c).values())
            assert not names & set(stale), "the woken primary wrote a submit sent to it"
            assert (c.health(0) or {})["epoch"] == (c.health(new) or {})["epoch"]
            assert c.primaries() == [new]
        assert watch.stop() == {}
    finally:
        c.stop()
