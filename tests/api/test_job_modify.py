"""Per-job priority, `xce job modify` and `xce job priority` through the API:
who may set what, validation as at submit, the WAL events, the factors."""

from __future__ import annotations

from tests.api.conftest import Api, as_user
from xce.core import events as ev

ALICE = as_user("alice")
DAVE = as_user("dave", "operator")


async def test_priority_at_submit_users_only_at_or_below_the_default(api: Api) -> None:
    job = await api.submit(priority=20, hold=True)
    assert (await api.show(job))["priority"] == 20
    answer = await api.call(
        "POST", "/api/v1/jobs", 400, headers=ALICE, json={"command": "true", "priority": 51}
    )
    assert "above the default of 50" in answer["error"]["message"]
    await api.call(
        "POST", "/api/v1/jobs", 201, headers=ALICE, json={"command": "true", "priority": 50}
    )
    await api.call(
        "POST",
        "/api/v1/jobs",
        201,
        headers=DAVE,
        json={"command": "true", "priority": 90, "user": "dave"},
    )
    answer = await api.call("POST", "/api/v1/jobs", 400, json={"command": "true", "priority": 101})
    assert "between 0 and 100" in answer["error"]["message"]


async def test_modify_a_pending_job_is_one_event_and_validated_like_submit(api: Api) -> None:
    job = await api.submit(walltime_s=600)
    changed = await api.call(
        "PATCH",
        f"/api/v1/jobs/{job}",
        200,
        json={
            "priority": 80,
            "queue": "short",
            "walltime_s": 1200,
            "slots": 2,
            "memory_mb": 100,
            "resources": "select[type==any]",
            "name": "renamed",
        },
    )
    assert changed["changed"] is True and changed["priority"] == 80
    assert (changed["queue"], changed["walltime_s"], changed["slots"]) == ("short", 1200, 2)
    record = api.service.state.jobs[job]
    assert record.spec.name == "renamed" and record.spec.memory_mb == 100
    counts = api.service.state.counts
    assert counts[(record.state, "short")] == 1 and counts[(record.state, "normal")] == 0
    for body, status, expected in [
        ({"queue": "nosuch"}, 400, "does not exist"),
        ({"resources": "select[(]"}, 400, ""),
        ({"dependency": f"afterok:{job}"}, 400, "cannot depend on itself"),
        ({"dependency": "afterok:9999"}, 404, "does not exist"),
        ({"owner": "bob"}, 400, "owner"),
        ({"name": "a\x00b"}, 400, "name contains a NUL byte"),
        ({"resources": "select[a==\ud800]"}, 400, "not valid Unicode"),
        ({}, 400, ""),
    ]:
        answer = await api.call("PATCH", f"/api/v1/jobs/{job}", status, json=body)
        assert expected in answer["error"]["message"], (body, answer)
    # hold and release are the suspend/resume events of a pending job
    held = await api.call("PATCH", f"/api/v1/jobs/{job}", 200, json={"hold": True})
    assert held["state"] == "PSUSP"
    released = await api.call("PATCH", f"/api/v1/jobs/{job}", 200, json={"hold": False})
    assert released["state"] == "PEND"


async def test_users_may_only_shorten_and_lower(api: Api) -> None:
    job = (
        await api.call(
            "POST", "/api/v1/jobs", 201, headers=ALICE, json={"command": "true", "walltime_s": 600}
        )
    )["job_id"]
    answer = await api.call(
        "PATCH", f"/api/v1/jobs/{job}", 403, headers=ALICE, json={"walltime_s": 601}
    )
    assert "only shorten" in answer["error"]["message"]
    await api.call("PATCH", f"/api/v1/jobs/{job}", 400, headers=ALICE, json={"priority": 60})
    ok = await api.call(
        "PATCH", f"/api/v1/jobs/{job}", 200, headers=ALICE, json={"walltime_s": 300, "priority": 10}
    )
    assert ok["walltime_s"] == 300 and ok["priority"] == 10
    other = await api.submit(hold=True)  # root's job
    await api.call("PATCH", f"/api/v1/jobs/{other}", 403, headers=ALICE, json={"name": "x"})


async def test_a_running_job_changes_only_its_name_and_walltime_by_an_admin(api: Api) -> None:
    await api.register("w1", slots=4)
    job = (
        await api.call(
            "POST",
            "/api/v1/jobs",
            201,
            headers=ALICE,
            json={"command": "sleep 100", "walltime_s": 600},
        )
    )["job_id"]
    await api.service.schedule_once()
    assert api.service.state.jobs[job].state.value == "RUN"
    answer = await api.call("PATCH", f"/api/v1/jobs/{job}", 409, json={"slots": 2})
    assert "only its name and walltime" in answer["error"]["message"]
    answer = await api.call(
        "PATCH", f"/api/v1/jobs/{job}", 403, headers=ALICE, json={"walltime_s": 300}
    )
    assert "operators and admins" in answer["error"]["message"]
    await api.call("PATCH", f"/api/v1/jobs/{job}", 200, headers=ALICE, json={"name": "mine"})
    version = api.service.host_versions.get("w1", 0)
    done = await api.call("PATCH", f"/api/v1/jobs/{job}", 200, json={"walltime_s": 3600})
    assert done["walltime_s"] == 3600
    assert api.service.host_versions["w1"] > version  # the worker's long-poll wakes
    polled = await api.call(
        "GET", "/api/v1/workers/w1/assignments?version=0", 200, headers=as_user("w1", "worker")
    )
    assert polled["jobs"][0]["walltime_s"] == 3600 and polled["jobs"][0]["name"] == "mine"


async def test_modify_is_logged_as_job_modified(api: Api) -> None:
    seen: list[ev.Event] = []
    api.service.listeners.append(seen.append)
    job = await api.submit(hold=True)
    await api.call("PATCH", f"/api/v1/jobs/{job}", 200, json={"priority": 5})
    assert [type(e) for e in seen][-1] is ev.JobModified
    history = [e for e in (await api.show(job))["history"] if e["event"] == "modified"]
    assert "priority 5" in history[0]["detail"]
    unchanged = await api.call("PATCH", f"/api/v1/jobs/{job}", 200, json={"priority": 5})
    assert unchanged["changed"] is False


async def test_whole_array_modify_and_a_finished_job_refused(api: Api) -> None:
    array = await api.submit(array="1-4", hold=True)
    shown = await api.call("PATCH", f"/api/v1/jobs/{array}", 200, json={"priority": 3})
    assert shown["changed"] is True
    assert api.service.state.arrays[int(array)].spec.priority == 3
    answer = await api.call("PATCH", f"/api/v1/jobs/{array}[2]", 409, json={"priority": 1})
    assert "modify the whole array" in answer["error"]["message"]
    job = await api.submit()
    await api.call("POST", f"/api/v1/jobs/{job}/kill", 200)
    answer = await api.call("PATCH", f"/api/v1/jobs/{job}", 409, json={"name": "late"})
    assert "it is EXIT" in answer["error"]["message"]


async def test_priority_shows_each_factor_and_multifactor_orders_by_it(api: Api) -> None:
    await api.call("PATCH", "/api/v1/queues/normal", 200, json={"plugins": ["multifactor"]})
    await api.register("w1", slots=1)
    low = await api.submit(command="sleep 1", priority=10)
    high = await api.submit(command="sleep 1", priority=90)
    table = await api.call("GET", "/api/v1/priority", 200)
    rows = {r["job_id"]: r for r in table["jobs"]}
    assert [r["job_id"] for r in table["jobs"]] == [high, low]
    assert rows[high]["factors"]["job"] == 0.9 and rows[low]["factors"]["job"] == 0.1
    assert rows[high]["order"] == "multifactor"
    assert rows[high]["factors"]["queue"] == 0.6  # 30 of the top queue priority 50
    f = rows[high]["factors"]
    expected = 1000 * f["queue"] + 1000 * f["job"] + 100 * f["age"] + 100 * f["fairshare"]
    assert abs(rows[high]["priority"] - expected) < 0.01
    assert table["weights"]["job"] == 1000
    await api.service.schedule_once()
    assert api.service.state.jobs[high].state.value == "RUN"  # submitted later, ran first
    assert api.service.state.jobs[low].state.value == "PEND"
    mine = await api.call("GET", "/api/v1/priority", 200, headers=ALICE)
    assert mine["jobs"] == []  # alice sees only her own jobs


async def test_an_empty_name_clears_a_running_jobs_name_as_slurm_does(api: Api) -> None:
    """`scontrol update JobName=` applies to a running job; `name: ""` clears the name, so
    the job shows the default an unnamed job has (its command), as one submitted unnamed."""
    await api.register("w1", slots=4)
    job = (
        await api.call(
            "POST",
            "/api/v1/jobs",
            201,
            headers=ALICE,
            json={"command": "sleep 100", "name": "first"},
        )
    )["job_id"]
    await api.service.schedule_once()
    assert api.service.state.jobs[job].state.value == "RUN"
    changed = await api.call("PATCH", f"/api/v1/jobs/{job}", 200, headers=ALICE, json={"name": ""})
    assert changed["changed"] is True and changed["name"] == "sleep 100"
    assert api.service.state.jobs[job].spec.name == ""
    again = await api.call("PATCH", f"/api/v1/jobs/{job}", 200, headers=ALICE, json={"name": ""})
    assert again["changed"] is False  # already unnamed: nothing to commit
