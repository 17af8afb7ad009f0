"""The event bus inside a real controller service: order, overflow, visibility."""

from __future__ import annotations

from tests.api.conftest import Api
from xce.api.http import BUS


async def test_changes_arrive_in_commit_order_with_keys(api: Api) -> None:
    bus = api.app[BUS]
    sub, resumed = bus.subscribe(None, lambda c: True)
    assert resumed is False
    first = await api.submit(user="alice")
    await api.call("POST", "/api/v1/queues/short/close", 200)
    batch = await sub.get_batch(1)
    assert [(c.kind, c.key, c.user) for c in batch] == [
        ("job", first, "alice"),
        ("queue", "short", None),
    ]
    assert [c.seq for c in batch] == sorted(c.seq for c in batch)


async def test_a_slow_subscriber_is_told_to_resync_and_never_blocks(api: Api) -> None:
    bus = api.app[BUS]
    bus.queue_size = 5
    slow, _ = bus.subscribe(None, lambda c: True)
    for _ in range(12):
        await api.submit(user="alice")  # commits go through although nobody reads
    batch = await slow.get_batch(1)
    assert batch[0].kind == "resync"
    assert len(batch) < 5


async def test_the_bus_costs_nothing_until_its_first_subscriber(api: Api) -> None:
    bus = api.app[BUS]
    await api.submit(user="alice")
    assert (bus.seq, len(bus.history)) == (0, 0)  # not hooked on the commit path yet
    sub, _ = bus.subscribe(None, lambda c: True)
    job = await api.submit(user="alice")
    assert [c.key for c in await sub.get_batch(1)] == [job] and bus.seq == 1
    sub.close()
    await api.submit(user="alice")  # hooked for good: history for clients that resume
    assert bus.seq == 2


async def test_resume_from_history_or_resync_when_too_old(api: Api) -> None:
    bus = api.app[BUS]
    bus.subscribe(None, lambda c: False)  # a client already connected: the bus is hooked
    await api.submit(user="alice")
    since = bus.event_id(bus.seq)
    job = await api.submit(user="bob")
    sub, resumed = bus.subscribe(since, lambda c: True)
    assert resumed and [c.key for c in await sub.get_batch(1)] == [job]
    bus.history.clear()
    for _ in range(3):
        await api.submit(user="alice")
    _, resumed = bus.subscribe(since, lambda c: True)
    assert resumed is False


async def test_subscribers_see_only_visible_jobs(api: Api) -> None:
    bus = api.app[BUS]
    sub, _ = bus.subscribe(None, lambda c: c.user in (None, "alice"))
    await api.submit(user="bob")
    mine = await api.submit(user="alice")
    assert [c.key for c in await sub.get_batch(1)] == [mine]


async def test_a_requeued_job_also_updates_the_host_it_left(api: Api) -> None:
    await api.register("w1")
    bus = api.app[BUS]
    sub, _ = bus.subscribe(None, lambda c: True)
    job = await api.submit(user="alice")
    await api.service.schedule_once()
    await api.call("POST", f"/api/v1/jobs/{job}/requeue", 200)
    # The requeue ends the running attempt first; the job leaves its host when it has.
    await api.call(
        "POST",
        f"/api/v1/workers/w1/jobs/{job}/finished",
        200,
        json={"attempt": 0, "exit_code": None, "exit_signal": 15},
    )
    changes = [(c.kind, c.key) for c in await sub.get_batch(1)]
    assert changes[-2:] == [("job", job), ("host", "w1")]
    assert api.service.state.jobs[job].host is None
