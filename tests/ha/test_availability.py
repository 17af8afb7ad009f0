"""HA that stays available, with real processes on 127.0.0.1 (kill -9, SIGSTOP).

With any minority of the candidates down, the primary accepts every write once it serves:
its lease (xce/ha/lease.py) renews from each standby's acknowledgements as they come and,
with two candidates, from a worker's requests for a whole heartbeat interval plus the
failover timeout. Before that, a lone survivor refused most writes between two worker
heartbeats. A switchover may name any caught-up candidate: the others defer to it.
"""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import ADMIN_TOKEN
from tests.integration.ha_cluster import HaCluster, PrimaryWatch
from tests.integration.test_ha_cli import xce

# The workers' heartbeat is longer than the lease of half the failover timeout: the case in
# which a lone survivor refused writes between heartbeats.
WORKER_HEARTBEAT_S = 3.0
SUBMITS = 120


def status_of(c: HaCluster, i: int) -> tuple[int, str]:
    """POST one held job to candidate i only (no rotation): the status and, for a refusal,
    the controller's reason."""
    body = json.dumps({"command": "true", "user": "root", "hold": True}).encode()
    req = urllib.request.Request(
        c.candidate_urls[i] + "/api/v1/jobs",
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, ""
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")[:200]
    except OSError as exc:
        return 0, str(exc)


def steady_submits(c: HaCluster, i: int, count: int = SUBMITS) -> Counter[tuple[int, str]]:
    """`count` submits to candidate i, one after the other, spread over several worker
    heartbeats (each one waits a little): what a steady client sees."""
    seen: Counter[tuple[int, str]] = Counter()
    for _ in range(count):
        seen[status_of(c, i)] += 1
        time.sleep(0.05)
    return seen


def accepted_all(seen: Counter[tuple[int, str]]) -> bool:
    return set(seen) == {(201, "")}


def wait_serving(c: HaCluster, i: int) -> None:
    """Until candidate i says it serves (`/healthz` `serving`), then one write through it."""
    c.wait_for(lambda: (c.health(i) or {}).get("serving") is True, 30, f"candidate {i} serving")
    c.wait_for(lambda: status_of(c, i)[0] == 201, 30, f"candidate {i} writing")


def pair(tmp_path: Path) -> HaCluster:
    c = HaCluster(tmp_path / "ha", candidates=2, failover_timeout=2.0, heartbeat=WORKER_HEARTBEAT_S)
    c.start_pair()
    c.start_worker("w1", slots=2)
    c.wait_writable()
    return c


@pytest.fixture
def two(tmp_path: Path) -> Iterator[HaCluster]:
    c = pair(tmp_path)
    try:
        yield c
    finally:
        c.stop()


def test_two_candidates_without_the_standby_the_primary_accepts_every_submit(
    two: HaCluster,
) -> None:
    two.kill_candidate(1)
    seen = steady_submits(two, 0)
    assert accepted_all(seen), seen
    health = two.health(0) or {}
    assert health["role"] == "primary" and health["serving"] and health["reason"] is None


def test_two_candidates_the_survivor_of_a_kill_9_accepts_every_submit(two: HaCluster) -> None:
    watch = PrimaryWatch(two)
    two.kill_candidate(0)
    assert two.wait_primary(30, other_than=0) == 1
    wait_serving(two, 1)
    seen = steady_submits(two, 1)
    assert accepted_all(seen), seen
    assert watch.stop() == {}


def three(tmp_path: Path) -> HaCluster:
    c = HaCluster(tmp_path / "ha3", candidates=3, failover_timeout=2.0)
    c.start_candidate(0)
    c.start_candidate(1, "standby")
    c.start_candidate(2, "standby")
    assert c.wait_primary(30) == 0
    c.wait_caught_up(1)
    c.wait_caught_up(2)
    c.start_worker("w1", slots=2)
    c.wait_writable()
    return c


@pytest.fixture
def trio(tmp_path: Path) -> Iterator[HaCluster]:
    c = three(tmp_path)
    try:
        yield c
    finally:
        c.stop()


def test_three_candidates_one_standby_frozen_the_primary_accepts_every_submit(
    trio: HaCluster,
) -> None:
    """A stopped standby makes every probe round wait for its timeout: the other standby's
    acknowledgements keep the lease between rounds."""
    trio.candidates[2].send_signal(signal.SIGSTOP)
    try:
        seen = steady_submits(trio, 0)
    finally:
        trio.candidates[2].send_signal(signal.SIGCONT)
    assert accepted_all(seen), seen


def test_three_candidates_after_a_kill_9_of_the_primary_every_submit_is_accepted(
    trio: HaCluster,
) -> None:
    watch = PrimaryWatch(trio)
    trio.kill_candidate(0)
    new = trio.wait_primary(30, other_than=0)
    wait_serving(trio, new)
    seen = steady_submits(trio, new)
    assert accepted_all(seen), seen
    assert watch.stop() == {}


def test_a_switchover_reaches_each_caught_up_candidate_in_turn(trio: HaCluster) -> None:
    """Whatever its rank: the others defer to the named target, so one vote round makes it
    primary (one epoch more per switchover, none lost to a failed vote)."""
    watch = PrimaryWatch(trio)
    epoch = (trio.health(0) or {})["epoch"]
    current = 0
    for target in (2, 1, 0, 1):
        trio.wait_caught_up(target)
        answer = trio.post("/api/v1/cluster/switchover", {"to": trio.candidate_urls[target]})
        assert answer["primary"] == trio.candidate_urls[target]
        assert answer["previous"] == trio.candidate_urls[current]
        epoch += 1
        assert answer["epoch"] == epoch
        trio.wait_for(lambda t=target: trio.primaries() == [t], 20, f"candidate {target} primary")
        assert status_of(trio, target)[0] == 201
        current = target
    assert watch.stop() == {}


def test_a_primary_without_a_majority_says_why_it_refuses_writes(trio: HaCluster) -> None:
    """Both standbys killed: the primary keeps its term but its lease lapses. `xce cluster
    status` names it and the reason, and a submit through the CLI fails in one line with the
    same reason, not a bare 503."""
    trio.kill_candidate(1)
    trio.kill_candidate(2)
    trio.wait_for(lambda: (trio.health(0) or {}).get("serving") is False, 30, "the lease lapsed")
    reason = (trio.health(0) or {})["reason"]
    assert reason
    status = xce(trio, "cluster", "status")
    assert f"writes refused by {trio.candidate_urls[0]}: {reason}" in status.stdout, status
    view = json.loads(xce(trio, "cluster", "status", "--json").stdout)
    primary = next(c for c in view["candidates"] if c["url"] == trio.candidate_urls[0])
    assert primary["serving"] is False and primary["reason"] == reason
    submit = xce(trio, "job", "submit", "--", "true")
    assert submit.returncode != 0 and len(submit.stderr.splitlines()) == 1, submit
    assert "majority" in submit.stderr and "Traceback" not in submit.stderr
