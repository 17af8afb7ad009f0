"""Fairshare by user and by group: priority = shares / (1 + usage hours + slots in use).

Every expected order below is worked out by hand from that formula (ties go to the
earliest submission).
"""

from __future__ import annotations

from tests.unit.helpers import T0, new_state, submit
from xce.core import events as ev
from xce.core.model import QueueRecord
from xce.core.state import ClusterState
from xce.sched.passes.pipeline import plan
from xce.sched.snapshot import snapshot_of


def users_placed(state: ClusterState, **snapshot_kw: object) -> list[str]:
    result = plan(snapshot_of(state, **snapshot_kw), T0)  # type: ignore[arg-type]
    return [state.job(p.job_id).spec.user for p in result.placements]


def four_each(queue: QueueRecord, users: tuple[str, ...] = ("alice", "bob")) -> ClusterState:
    state = new_state(queues=(queue,), hosts={"h": (4, 1000)})
    for user in users:
        for _ in range(4):
            submit(state, user=user)
    return state


def test_fcfs_gives_the_first_user_everything() -> None:
    assert users_placed(four_each(QueueRecord("normal"))) == ["alice"] * 4


def test_equal_shares_alternate() -> None:
    # alice 1 vs bob 1 (tie: alice's job is older) -> alice 1/2 vs bob 1 -> bob -> tie ...
    state = four_each(QueueRecord("normal", plugins=("fairshare",)))
    assert users_placed(state) == ["alice", "bob", "alice", "bob"]


def test_shares_weight_the_split() -> None:
    # alice 3, bob 1: alice (3/2) -> alice (3/3 = 1 ties bob 1, older) -> alice (3/4) -> bob
    queue = QueueRecord("normal", plugins=("fairshare",), shares=(("alice", "3"),))
    assert users_placed(four_each(queue)) == ["alice", "alice", "alice", "bob"]


def test_past_usage_lowers_priority() -> None:
    # bob used 2 core-hours: 1/3. alice 1 -> 1/2 -> 1/3 (ties, older) -> 1/4 < bob's 1/3.
    state = four_each(QueueRecord("normal", plugins=("fairshare",)))
    assert users_placed(state, usage={"bob": 7200.0}) == ["alice", "alice", "alice", "bob"]


def test_running_jobs_count() -> None:
    # bob already runs 2 slots on another host since T0-3600: 2 slots + 2 core-hours.
    state = four_each(QueueRecord("normal", plugins=("fairshare",)))
    state.apply(ev.HostRegistered(T0, "other", 2, 1000))
    running = submit(state, user="bob", slots=2)
    state.apply(ev.JobStarted(T0 - 3600, running, "other"))
    # bob: 1 / (1 + 2 + 2) = 0.2; alice: 1, 1/2, 1/3, 1/4 all above it.
    assert users_placed(state) == ["alice"] * 4


def test_group_fairshare_balances_groups_then_users() -> None:
    # groups physics = alice + bob, chem = carol; two jobs each, equal group shares.
    # physics 1 vs chem 1 -> physics (older), alice -> chem 1 vs physics 1/2 -> carol ->
    # tie 1/2: physics is older (bob's #3 vs carol's #6) -> bob -> carol.
    queue = QueueRecord("normal", plugins=("fairshare-group",))
    state = new_state(queues=(queue,), hosts={"h": (4, 1000)})
    for user in ("alice", "alice", "bob", "bob", "carol", "carol"):
        submit(state, user=user)
    groups = {"alice": "physics", "bob": "physics", "carol": "chem"}
    assert users_placed(state, groups=groups) == ["alice", "carol", "bob", "carol"]


def test_group_shares() -> None:
    # @physics 3: physics 3 -> 3/2 -> 1 (ties chem 1, older) -> chem.
    queue = QueueRecord("normal", plugins=("fairshare-group",), shares=(("@physics", "3"),))
    state = new_state(queues=(queue,), hosts={"h": (4, 1000)})
    for user in ("alice", "bob", "alice", "bob", "carol", "carol"):
        submit(state, user=user)
    groups = {"alice": "physics", "bob": "physics", "carol": "chem"}
    assert users_placed(state, groups=groups) == ["alice", "bob", "alice", "carol"]
