"""`GET /api/v1/cluster/history` and `GET /api/v1/jobs/{id}/usage` through the real app, and
the history's figures on `/metrics` (what the console and a Grafana dashboard draw)."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.api.conftest import Api, as_user, auth
from xce.api.http import CLUSTER_HISTORY

HISTORY = "/api/v1/cluster/history"


def _close_step(api: Api) -> None:
    """Close the step now running, as the controller's timer does once it has passed."""
    history = api.app[CLUSTER_HISTORY]
    history.tick(api.service.clock() + history.step)


async def _finish(api: Api, job_id: str, **usage: Any) -> None:
    body = {"attempt": 0, "exit_code": 0, **usage}
    await api.call("POST", f"/api/v1/workers/w1/jobs/{job_id}/finished", 200, json=body)


async def test_history_answers_the_samples_of_the_cluster_and_of_one_queue(api: Api) -> None:
    await api.register("w1", slots=4)
    done = await api.submit(slots=2)
    await api.submit(slots=2)
    await api.submit(slots=2, queue="short")
    assert await api.service.schedule_once() == 2
    await _finish(api, done)
    assert await api.service.schedule_once() == 1
    _close_step(api)
    body = await api.call("GET", HISTORY, 200)
    assert body["step_s"] == 60 and body["window_s"] >= 86_400 and body["queue"] is None
    newest = body["samples"][-1]
    assert newest["t"] % 60 == 0
    # the step may have begun before the submissions: add up what the answer holds
    assert sum(s["submitted"] for s in body["samples"]) == 3
    assert sum(s["finished"] for s in body["samples"]) == 1
    assert (newest["running"], newest["pending"]) == (2, 0)
    assert (newest["slots_busy"], newest["slots_total"]) == (4, 4)
    assert (newest["gpus_busy"], newest["gpus_total"]) == (0, 0)
    short = await api.call("GET", f"{HISTORY}?queue=short", 200)
    assert short["queue"] == "short"
    assert (short["samples"][-1]["running"], short["samples"][-1]["slots_busy"]) == (1, 2)
    assert sum(s["submitted"] for s in short["samples"]) == 1
    recent = await api.call("GET", f"{HISTORY}?minutes=1", 200)
    assert recent["samples"] == body["samples"][-1:]


async def test_history_aggregates_to_a_coarser_step(api: Api) -> None:
    history = api.app[CLUSTER_HISTORY]
    for n in range(1, 6):
        history.tick(api.service.clock() + n * history.step)
    fine = await api.call("GET", HISTORY, 200)
    coarse = await api.call("GET", f"{HISTORY}?step=120", 200)
    assert coarse["step_s"] == 120
    assert {s["t"] for s in coarse["samples"]} <= {s["t"] for s in fine["samples"]}
    assert all(s["t"] % 120 == 0 for s in coarse["samples"])
    assert 2 <= len(coarse["samples"]) <= 3


async def test_history_refuses_what_it_cannot_answer(api: Api) -> None:
    missing = await api.call("GET", f"{HISTORY}?queue=nope", 404)
    assert "nope" in missing["error"]["message"]
    uneven = await api.call("GET", f"{HISTORY}?step=90", 400)
    assert "multiple of 60" in uneven["error"]["message"]
    for bad in ("minutes=0", "minutes=x", "step=0"):
        await api.call("GET", f"{HISTORY}?{bad}", 400)
    # more than the ring holds is all it holds
    await api.call("GET", f"{HISTORY}?minutes=100000", 200)


async def test_history_is_readable_with_cluster_view(secured: Api) -> None:
    await secured.call("GET", HISTORY, 401)
    await secured.call("GET", HISTORY, 200, headers=as_user("alice"))
    await secured.call("GET", HISTORY, 200, headers=auth("worker"))
    await secured.call("GET", HISTORY, 403, headers=as_user("nobody", "nonexistent-role"))


async def test_usage_follows_a_running_job_and_keeps_its_final_figures(api: Api) -> None:
    await api.register("w1")
    job_id = await api.submit()
    path = f"/api/v1/jobs/{job_id}/usage"
    waiting = await api.call("GET", path, 200)
    assert (waiting["points"], waiting["kept"]) == ([], False)
    assert await api.service.schedule_once() == 1
    report = {"job_id": job_id, "attempt": 0, "cpu_user_s": 3.0, "cpu_system_s": 1.0}
    report["max_rss_bytes"] = 1 << 20
    await api.call("POST", "/api/v1/workers/w1/heartbeat", 200, json={"running": [report]})
    running = await api.call("GET", path, 200)
    assert running["kept"] and running["state"] == "RUN" and running["max_points"] >= 16
    assert [(p["cpu_s"], p["rss_bytes"]) for p in running["points"]] == [
        (0.0, 0.0),
        (4.0, float(1 << 20)),
    ]
    await _finish(api, job_id, cpu_user_s=5.0, cpu_system_s=1.0, max_rss_bytes=2 << 20)
    ended = await api.call("GET", path, 200)
    assert ended["state"] == "DONE"
    assert (ended["points"][-1]["cpu_s"], ended["points"][-1]["rss_bytes"]) == (6.0, 2 << 20)
    assert [p["t"] for p in ended["points"]] == sorted(p["t"] for p in ended["points"])


async def test_usage_is_the_owners_and_names_one_task(secured: Api) -> None:
    alice = as_user("alice")
    job_id = (
        await secured.call("POST", "/api/v1/jobs", 201, json={"command": "x"}, headers=alice)
    )["job_id"]
    await secured.call("GET", f"/api/v1/jobs/{job_id}/usage", 200, headers=alice)
    await secured.call("GET", f"/api/v1/jobs/{job_id}/usage", 403, headers=as_user("bob"))
    await secured.call("GET", "/api/v1/jobs/999/usage", 404, headers=alice)
    array = await secured.call(
        "POST", "/api/v1/jobs", 201, json={"command": "x", "array": "1-3"}, headers=alice
    )
    whole = await secured.call("GET", f"/api/v1/jobs/{array['job_id']}/usage", 400, headers=alice)
    assert "name one of its tasks" in whole["error"]["message"]


def _metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_metrics_export_the_history_figures_and_each_hosts_use(api: Api) -> None:
    await api.register("w1", slots=4, memory_mb=1000)
    job_id = await api.submit(slots=3, memory_mb=100)
    assert await api.service.schedule_once() == 1
    resp = await api.client.get("/metrics")
    got = _metrics(await resp.text())
    assert got[("xce_slots_busy", (("queue", ""),))] == 3
    assert got[("xce_slots_busy", (("queue", "normal"),))] == 3
    assert got[("xce_slots_total", (("queue", ""),))] == 4
    assert got[("xce_gpus_total", (("queue", ""),))] == 0
    assert got[("xce_jobs_submitted_total", ())] == 1
    assert got[("xce_jobs_finished_total", ())] == 0
    assert got[("xce_host_used", (("host", "w1"), ("resource", "slots")))] == 3
    assert got[("xce_host_used", (("host", "w1"), ("resource", "memory_bytes")))] == 100 << 20
    assert got[("xce_host_capacity", (("host", "w1"), ("resource", "memory_bytes")))] == 1000 << 20
    await _finish(api, job_id)
    got = _metrics(await (await api.client.get("/metrics")).text())
    assert got[("xce_jobs_finished_total", ())] == 1
    assert got[("xce_slots_busy", (("queue", ""),))] == 0
