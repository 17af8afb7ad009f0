"""Hostile input against the API surface of issues 15-17 (job modify, priority,
reservations, submit gres/licenses/begin/priority, queue preemption settings, worker
registration, share usage in heartbeats, accounting queries): every refusal is a 4xx whose
JSON names the problem in plain words, and the state and the WAL are as before, so a
restarted controller replays to the same state.

The controller here writes a real WAL (`DurableLog`, the Cap'n Proto encoder), so a value
the encoder cannot hold shows up as what it would be in production."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import Api, as_user
from xce.api.openapi import document
from xce.core import events as ev
from xce.store.durable import DurableLog, StoreSettings
from xce.store.recovery import recover

ALICE = as_user("alice")
BOB = as_user("bob")
WORKER = as_user("w1", "worker")
# What an error message must never carry: the encoder's or Python's own words.
LEAKS = ("capnp", "Traceback", "encode", "C unsigned long", "int64_t", "Error")


@pytest.fixture
async def walled(api: Api, tmp_path: Path) -> AsyncIterator[tuple[Api, DurableLog, Path]]:
    """The api fixture writing a real WAL; it starts with the queues the fixture made."""
    state_dir = tmp_path / "wal-state"
    store = DurableLog.open(state_dir, StoreSettings(segment_bytes=64 * 1024))
    for queue in list(api.service.state.queues.values()):
        store.append(store.prepare(ev.QueueCreated(0.0, queue)))
    await store.sync()
    api.service.log = store
    await api.register("w1")
    try:
        yield api, store, state_dir
    finally:
        await store.writer.close()


async def refused(
    api: Api,
    method: str,
    path: str,
    body: Any,
    status: int = 400,
    headers: dict[str, str] | None = None,
) -> str:
    """The request is refused with `status` and a plain JSON error; returns its message."""
    resp = await api.client.request(method, path, json=body, headers=headers or {})
    answer = await resp.json()
    assert resp.status == status, (method, path, body, resp.status, answer)
    error = answer["error"]
    assert error["code"] != "wire_error", (body, error)
    for word in LEAKS:
        assert word not in error["message"], (body, error)
    return str(error["message"])


def fingerprint(api: Api) -> tuple[Any, ...]:
    state = api.service.state
    return (
        sorted((k, repr(v)) for k, v in state.queues.items()),
        sorted((k, repr(v.spec), v.state) for k, v in state.jobs.items()),
        sorted((k, repr(v)) for k, v in state.reservations.items()),
    )


async def test_queue_limits_past_what_the_wal_holds_are_a_plain_400(
    walled: tuple[Api, DurableLog, Path],
) -> None:
    """max_running had no upper bound: 2**70 reached the encoder and came back as a
    `wire_error` quoting Cap'n Proto / Python int conversion."""
    api, store, _ = walled
    before, seq = fingerprint(api), store.writer.next_seq
    for key, value in (("max_running", 2**70), ("max_running_per_user", 2**63)):
        message = await refused(api, "POST", "/api/v1/queues", {"name": "q", key: value})
        assert key in message, message
        message = await refused(api, "PATCH", "/api/v1/queues/normal", {key: value})
        assert key in message, message
    assert fingerprint(api) == before and store.writer.next_seq == seq


async def test_a_queue_preempts_each_queue_once(walled: tuple[Api, DurableLog, Path]) -> None:
    api, _, _ = walled
    message = await refused(
        api, "POST", "/api/v1/queues", {"name": "q", "preempt": ["normal", "normal"]}
    )
    assert "preempt" in message
    await refused(api, "PATCH", "/api/v1/queues/short", {"preempt": ["normal", "normal"]})
    assert "q" not in api.service.state.queues


async def test_schema_item_rules_are_enforced(walled: tuple[Api, DurableLog, Path]) -> None:
    """The schemas declared minItems and uniqueItems, which the validator ignored: an
    empty host list or a repeated flag reached the reservation code."""
    api, store, _ = walled
    now = api.service.clock()
    ok = {"name": "r", "hosts": ["w1"], "start": now + 100, "end": now + 200, "users": ["alice"]}
    seq = store.writer.next_seq
    assert "host" in await refused(api, "POST", "/api/v1/reservations", ok | {"hosts": []})
    message = await refused(
        api, "POST", "/api/v1/reservations", ok | {"flags": ["overlap", "overlap"]}
    )
    assert "flags" in message
    assert api.service.state.reservations == {} and store.writer.next_seq == seq


@pytest.mark.parametrize("address", ["h:99999", "h:65536", "[::1]:70000", "::::0", "h:0"])
async def test_task_address_port_must_be_a_port(
    walled: tuple[Api, DurableLog, Path], address: str
) -> None:
    api, _, _ = walled
    body = {"host": "w2", "slots": 1, "memory_mb": 1, "task_address": address}
    message = await refused(api, "POST", "/api/v1/workers/register", body)
    assert "task_address" in message
    assert "w2" not in api.service.state.hosts


async def test_usage_past_any_real_figure_is_refused(walled: tuple[Api, DurableLog, Path]) -> None:
    """A worker's usage figures had no upper bound: cpu_user_s + cpu_system_s of 1.7e308
    each summed to inf in the job's view, and every later GET /api/v1/jobs answered 400
    "Out of range float values are not JSON compliant" for every user."""
    api, store, _ = walled
    job = await api.submit()
    await api.service.schedule_once()
    path = f"/api/v1/workers/w1/jobs/{job}/finished"
    seq = store.writer.next_seq
    for key in ("cpu_user_s", "cpu_system_s", "wall_time_s"):
        body = {"attempt": 0, "exit_code": 0, "cpu_user_s": 1.0, key: 1.7e308}
        assert key in await refused(api, "POST", path, body, headers=WORKER)
        running = {"running": [{"job_id": job, "attempt": 0, key: 1.7e308}]}
        assert key in await refused(
            api, "POST", "/api/v1/workers/w1/heartbeat", running, headers=WORKER
        )
        shares = {"shares": [{"job_id": job, "attempt": 0, "cpu_user_s": 1.7e308}]}
        assert "cpu_user_s" in await refused(
            api, "POST", "/api/v1/workers/w1/heartbeat", shares, headers=WORKER
        )
    assert store.writer.next_seq == seq and api.service.state.jobs[job].state.active
    await api.call("GET", "/api/v1/jobs", 200)
    await api.call("GET", f"/api/v1/jobs/{job}", 200)


async def test_a_reservation_holds_no_more_slots_than_its_hosts_have(
    walled: tuple[Api, DurableLog, Path],
) -> None:
    """slots (per host) past what a host has was stored as if it meant something (100000
    slots on a 4-slot host), reading back as a reservation of 100000 slots."""
    api, store, _ = walled
    now = api.service.clock()
    ok = {"name": "r", "hosts": ["w1"], "start": now + 100, "end": now + 200, "users": ["alice"]}
    seq = store.writer.next_seq
    message = await refused(api, "POST", "/api/v1/reservations", ok | {"slots": 100000})
    assert "slots" in message and "w1" in message, message
    assert api.service.state.reservations == {} and store.writer.next_seq == seq
    await api.call("POST", "/api/v1/reservations", 201, json=ok | {"slots": 4})


async def test_span_numbers_past_any_slot_count_are_refused(
    walled: tuple[Api, DurableLog, Path],
) -> None:
    """span[ptile=99999999999999999999] was stored (submit and modify), where the same
    number in rusage[mem=...] is refused: past the most slots a job may ask for, it means
    nothing."""
    api, store, _ = walled
    job = await api.submit(hold=True, slots=2, resources="span[ptile=2]")
    seq = store.writer.next_seq
    for key in ("ptile", "block"):
        huge = f"span[{key}=99999999999999999999]"
        message = await refused(
            api, "POST", "/api/v1/jobs", {"command": "true", "slots": 2, "resources": huge}
        )
        assert key in message, message
        assert key in await refused(api, "PATCH", f"/api/v1/jobs/{job}", {"resources": huge})
    assert store.writer.next_seq == seq
    assert api.service.state.jobs[job].spec.resources == "span[ptile=2]"


BAD_SUBMITS: list[tuple[dict[str, Any], str]] = [
    ({"begin": 1e308}, "begin"),
    ({"begin": "9999-12-31"}, "366 days"),
    ({"begin": 2**70}, "begin"),
    ({"begin": -5}, "begin"),
    ({"begin": ""}, "begin"),
    ({"begin": "a\x00b"}, "begin"),
    ({"begin": "now+99999999999d"}, "begin"),
    ({"gres": {"": 1}}, "gres"),
    ({"gres": {"gpu\x00": 1}}, "gres"),
    ({"gres": {"g" * 500: 1}}, "gres"),
    ({"gres": {"gpu": 1}}, "gpu"),
    ({"licenses": {"nope": 1}}, "license"),
    ({"licenses": {"\u00e9": 1}}, "license"),
    ({"reservation": "nosuch"}, "nosuch"),
    ({"reservation": ""}, "reservation"),
    ({"priority": 1.5}, "priority"),
    ({"priority": True}, "priority"),
    ({"priority": 2**70}, "priority"),
    ({"priority": -1}, "priority"),
    ({"priority": 101}, "between 0 and 100"),
    ({"exclusive": "yes"}, "exclusive"),
    ({"exclusive": True, "slots": 100000}, "slots"),
    ({"mem_per_slot_mb": 2**40}, "MB"),
    ({"mem_per_slot_mb": -1}, "mem_per_slot_mb"),
    ({"unknown": 1}, "unknown"),
]


async def test_bad_new_submit_fields(walled: tuple[Api, DurableLog, Path]) -> None:
    api, store, _ = walled
    before, seq = fingerprint(api), store.writer.next_seq
    for extra, expected in BAD_SUBMITS:
        message = await refused(api, "POST", "/api/v1/jobs", {"command": "true", **extra})
        assert expected in message, (extra, message)
    message = await refused(
        api, "POST", "/api/v1/jobs", {"command": "true", "priority": 51}, headers=ALICE
    )
    assert "above the default" in message
    assert fingerprint(api) == before and store.writer.next_seq == seq


async def test_bad_modifies_change_nothing_and_the_wal_replays(
    walled: tuple[Api, DurableLog, Path],
) -> None:
    api, store, state_dir = walled
    await api.call("POST", "/api/v1/queues", 201, json={"name": "bobq", "users": ["bob"]})
    job = (
        await api.call(
            "POST",
            "/api/v1/jobs",
            201,
            headers=ALICE,
            json={"command": "true", "hold": True, "walltime_s": 100},
        )
    )["job_id"]
    bobs = (
        await api.call(
            "POST", "/api/v1/jobs", 201, headers=BOB, json={"command": "true", "hold": True}
        )
    )["job_id"]
    before, seq = fingerprint(api), store.writer.next_seq
    path = f"/api/v1/jobs/{job}"
    for body, status, expected in [
        ({"priority": 2**70}, 400, "priority"),
        ({"priority": 51}, 400, "above the default"),
        ({"priority": "1"}, 400, "priority"),
        ({"walltime_s": 0.5}, 400, "walltime_s"),
        ({"walltime_s": 200}, 403, "shorten"),
        ({"slots": 100000}, 400, "slots"),
        ({"memory_mb": 2**40}, 400, "MB"),
        ({"queue": ""}, 400, "queue"),
        ({"queue": "nosuch"}, 400, "does not exist"),
        ({"queue": "bobq"}, 403, "bobq"),
        ({"name": "x" * 10000}, 400, "name"),
        ({"name": "a\x00"}, 400, "NUL"),
        ({"dependency": "\x00"}, 400, "NUL"),
        ({"dependency": f"afterok:{job}"}, 400, "itself"),
        ({"dependency": f"afterok:{bobs}"}, 404, "may not view"),
        ({"dependency": "afterok:" + "9" * 50}, 404, "does not exist"),
        ({"hold": None}, 400, "hold"),
        ({"owner": "bob"}, 400, "owner"),
        ({}, 400, ""),
    ]:
        message = await refused(api, "PATCH", path, body, status, ALICE)
        assert expected in message, (body, message)
    await refused(api, "PATCH", f"/api/v1/jobs/{bobs}", {"name": "x"}, 403, ALICE)
    await refused(api, "PATCH", "/api/v1/jobs/1%00", {"name": "x"}, 400)
    await refused(api, "PATCH", "/api/v1/jobs/99999999999999999999999", {"name": "x"}, 404)
    assert fingerprint(api) == before and store.writer.next_seq == seq
    # the user sees only their own jobs' priority, whatever they ask for
    rows = (await api.call("GET", "/api/v1/priority?user=bob", 200, headers=ALICE))["jobs"]
    assert rows == []
    await store.sync()
    replayed = recover(state_dir).state
    assert sorted(replayed.jobs) == sorted(api.service.state.jobs)
    assert replayed.jobs[job].spec == api.service.state.jobs[job].spec
    assert sorted(replayed.queues) == sorted(api.service.state.queues)


async def test_bad_reservations_change_nothing(walled: tuple[Api, DurableLog, Path]) -> None:
    api, store, state_dir = walled
    now = api.service.clock()
    ok = {"name": "r", "hosts": ["w1"], "start": now + 100, "end": now + 200, "users": ["alice"]}
    await api.call("POST", "/api/v1/reservations", 201, json=ok)
    before, seq = fingerprint(api), store.writer.next_seq
    for body, status, expected in [
        (ok | {"name": "d", "hosts": ["w1", "w1"]}, 400, "twice"),
        (ok | {"name": "r"}, 409, "already exists"),
        (ok | {"name": "o"}, 409, "holds host w1"),
        (ok | {"name": "z", "end": now + 100}, 400, "end after it starts"),
        (ok | {"name": "z", "start": 2**41}, 400, "start"),
        (ok | {"name": "z", "end": None}, 400, "end"),
        (ok | {"name": "z", "users": ["\u00e9"]}, 400, "users"),
        (ok | {"name": "a\x00"}, 400, "name"),
        (ok | {"name": "x" * 100}, 400, "name"),
        (ok | {"name": "z", "slots": -1}, 400, "slots"),
        (ok | {"name": "z", "description": "x" * 2000}, 400, "description"),
    ]:
        message = await refused(api, "POST", "/api/v1/reservations", body, status)
        assert expected in message, (body, message)
    await refused(api, "POST", "/api/v1/reservations", ok | {"name": "u"}, 403, ALICE)
    await refused(api, "DELETE", "/api/v1/reservations/r", None, 403, ALICE)
    await refused(api, "DELETE", "/api/v1/reservations/%00", None, 404)
    assert fingerprint(api) == before and store.writer.next_seq == seq
    await store.sync()
    assert sorted(recover(state_dir).state.reservations) == ["r"]


async def test_bad_worker_reports_and_accounting_queries(
    walled: tuple[Api, DurableLog, Path],
) -> None:
    api, _, _ = walled
    for body in [
        {"host": "w2", "slots": 1, "memory_mb": 1, "gres": {"": ["0"]}},
        {"host": "w2", "slots": 1, "memory_mb": 1, "gres": {"gpu": ["0", "0"]}},
        {"host": "w2", "slots": 1, "memory_mb": 1, "gres": {"gpu": [""]}},
        {"host": "w2", "slots": 1, "memory_mb": 1, "gres": {"gpu": 2}},
    ]:
        assert "gres" in await refused(api, "POST", "/api/v1/workers/register", body)
    for body in [
        {"shares": [{"job_id": "1", "attempt": -1}]},
        {"shares": [{"job_id": "1", "attempt": 0, "cpu_user_s": -1}]},
        {"shares": [{"job_id": "1"}]},
        {"shares": "x"},
    ]:
        assert "shares" in await refused(
            api, "POST", "/api/v1/workers/w1/heartbeat", body, headers=WORKER
        )
    for query in [
        "since=1e400",
        "since=nan",
        "until=inf",
        "limit=1e3",
        "limit=99999999999999999999",
        "job=%00",
        "next=%00",
        "time=x",
    ]:
        for path in ("/api/v1/accounting/jobs", "/api/v1/accounting/summary"):
            if "limit" in query or "next" in query:
                path = "/api/v1/accounting/jobs"
            resp = await api.client.get(f"{path}?{query}")
            answer = await resp.json()
            assert resp.status == 400, (query, answer)
            assert query.split("=")[0] in answer["error"]["message"], (query, answer)


def test_the_new_routes_are_in_the_openapi_document_the_fuzzer_reads() -> None:
    """tests/fuzz/test_api_schemathesis.py fuzzes what this document lists."""
    paths = document()["paths"]
    for path, methods in [
        ("/api/v1/jobs/{job_id}", {"patch"}),
        ("/api/v1/priority", {"get"}),
        ("/api/v1/reservations", {"get", "post"}),
        ("/api/v1/reservations/{name}", {"get", "delete"}),
        ("/api/v1/accounting/jobs", {"get"}),
        ("/api/v1/accounting/summary", {"get"}),
    ]:
        assert methods <= set(paths.get(path, {})), path
    patch = paths["/api/v1/jobs/{job_id}"]["patch"]["requestBody"]["content"]
    assert "priority" in patch["application/json"]["schema"]["properties"]
