"""Bad requests get a 4xx with a JSON error body, never a 500 or an HTML page."""

from __future__ import annotations

import json
from typing import Any

import pytest
from yarl import URL

from .conftest import Api

JOBS = "/api/v1/jobs"


async def expect_error(
    api: Api, method: str, path: str, status: int | tuple[int, ...], **kwargs: Any
) -> dict[str, str]:
    """Make the request; check the status and the `{"error": {code, message}}` body."""
    # encoded=True: send the path as written, so %2E%2E is not folded away by the client
    resp = await api.client.request(method, URL(path, encoded=True), **kwargs)
    text = await resp.text()
    allowed = status if isinstance(status, tuple) else (status,)
    assert resp.status in allowed, (method, path, resp.status, text)
    assert resp.content_type == "application/json", text
    body = json.loads(text)
    assert set(body) == {"error"}, body
    error = body["error"]
    assert isinstance(error.get("code"), str) and error["code"], body
    assert isinstance(error.get("message"), str) and error["message"], body
    assert resp.headers.get("X-Request-Id"), "every error carries a request id"
    return error


async def bad_submit(api: Api, status: int = 400, **body: Any) -> dict[str, str]:
    return await expect_error(api, "POST", JOBS, status, json=body)


async def upload(api: Api, data: bytes = b"x") -> str:
    return (await api.call("POST", "/api/v1/uploads", 201, data=data))["upload_id"]


async def done_job(api: Api) -> str:
    """A job that ran on worker w1 and finished with exit code 0."""
    job_id = await api.submit()
    await api.register("w1")
    assert await api.service.schedule_once() == 1
    result = await api.call(
        "POST",
        f"/api/v1/workers/w1/jobs/{job_id}/finished",
        200,
        json={"attempt": 0, "exit_code": 0},
    )
    assert result == {"accepted": True}
    assert (await api.show(job_id))["state"] == "DONE"
    return job_id


# --- submit: validation ---------------------------------------------------------------


async def test_unknown_queue_is_named(api: Api) -> None:
    error = await bad_submit(api, command="true", queue="nosuchqueue")
    assert error["code"] == "invalid_request"
    assert "nosuchqueue" in error["message"]


@pytest.mark.parametrize(
    "spec",
    [
        "1-",
        "5-1",
        "1-10%0",
        "",
        "%5",
        "1-10%",
        "a-b",
        "1-10:0",
        "1,1",
        "1-3,2-5",
        "0-99999999999",
        "1-10%-1",
    ],
)
async def test_malformed_array_spec(api: Api, spec: str) -> None:
    error = await bad_submit(api, command="true", array=spec)
    assert error["code"] == "invalid_request"


async def test_array_larger_than_limit(api: Api) -> None:
    limit = api.service.settings.max_array_size
    error = await bad_submit(api, command="true", array=f"1-{limit + 1}")
    assert str(limit) in error["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"memory_mb": -1}, "memory_mb"),
        ({"slots": 0}, "slots"),
        ({"slots": -3}, "slots"),
        ({"slots": "two"}, "slots"),
        ({"slots": 1.5}, "slots"),
        ({"slots": True}, "slots"),
        ({"slots": None}, "slots"),
        ({"slots": 10**9}, "slots"),
        ({"walltime_s": 0}, "walltime_s"),
        ({"env": "A=1"}, "env"),
        ({"env": ["A=1"]}, "env"),
        ({"env": {"A": 1}}, "env.A"),
        ({"hold": "yes"}, "hold"),
        ({"hold": 1}, "hold"),
        ({"outputs": "result/*"}, "outputs"),
        ({"inputs": ["a"]}, "inputs"),
        ({"queue": "bad queue"}, "queue"),
        ({"colour": "blue"}, "colour"),
        ({"command": 5}, "command"),
        ({"name": "x" * 500}, "name"),
    ],
)
async def test_wrong_field_is_named(api: Api, body: dict[str, Any], field: str) -> None:
    body.setdefault("command", "true")
    error = await bad_submit(api, **body)
    assert error["code"] == "invalid_request"
    assert field in error["message"], error


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"env": {"XCE_ARRAY_INDEX": "1"}}, "reserved"),
        ({"env": {"1BAD": "x"}}, "1BAD"),
        ({"env": {"A-B": "x"}}, "A-B"),
        ({"cwd": "relative/dir"}, "cwd"),
        ({"user": "Bad User"}, "Bad User"),
        ({"command": "   "}, "empty"),
        ({"outputs": ["stdout"]}, "reserved"),
    ],
)
async def test_service_level_validation(api: Api, body: dict[str, Any], words: str) -> None:
    body.setdefault("command", "true")
    error = await bad_submit(api, **body)
    assert words in error["message"], error


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"command": "echo a\u0000b"}, "command"),
        ({"script": "#!/bin/sh\necho \u0000\n"}, "script"),
        ({"name": "nu\u0000l"}, "name"),
        ({"env": {"A": "x\u0000y"}}, "env variable A"),
        ({"env": {"A\u0000": "x"}}, "env variable name"),
        ({"cwd": "/tmp/\u0000"}, "cwd"),
        ({"user": "root\u0000"}, "user"),
        ({"resources": 'select[os=="\u0000"]'}, "resources"),
        ({"dependency": "afterok:1\u0000"}, "dependency"),
        ({"array": "1-3\u0000"}, "array"),
        ({"outputs": ["out\u0000"]}, "output pattern"),
    ],
)
async def test_nul_bytes_are_refused_at_submit_naming_the_field(
    api: Api, body: dict[str, Any], field: str
) -> None:
    """A NUL cannot reach a command line, an environment or a file name: the job would only
    fail at launch, so the submit is refused, naming the field."""
    if "script" not in body:
        body.setdefault("command", "true")
    error = await bad_submit(api, **body)
    assert error["code"] == "invalid_request"
    assert field in error["message"] and "NUL" in error["message"], error
    assert (await api.call("GET", JOBS, 200))["jobs"] == []


@pytest.mark.parametrize(
    "extra",
    [
        {"array": "1-10%99999999999999999999"},
        {"array": "1-10:99999999999999999999"},
        {"array": "1-10%2147483648"},
        {"array": "1-10:2147483648"},
        {"array": "1-" + "9" * 5000},
        {"array": "1-10%" + "9" * 5000},
        {"resources": "rusage[mem=99999999999999999999999]"},
        {"resources": "rusage[mem=1e300]"},
        {"resources": "rusage[mem=" + "9" * 5000 + "]"},
    ],
    ids=[
        "limit",
        "step",
        "limit-2^31",
        "step-2^31",
        "long-index",
        "long-limit",
        "mem",
        "mem-float",
        "mem-long",
    ],
)
async def test_overflowing_numbers_get_a_plain_400(
    api: Api, tmp_path: Any, extra: dict[str, str]
) -> None:
    """Numbers past what a job can hold are refused by the parsers with a plain message,
    not by the WAL encoder (`wire_error`, with Cap'n Proto's words in it)."""
    from xce.store.durable import DurableLog, StoreSettings

    store = DurableLog.open(tmp_path / "wal-state", StoreSettings(segment_bytes=64 * 1024))
    api.service.log = store  # the real encoder, as in a controller
    try:
        error = await bad_submit(api, command="true", **extra)
        assert error["code"] == "invalid_request", error
        message = error["message"]
        assert len(message) < 300, message
        for word in ("Error", "capnp", "Traceback", "encode", "Value out of range", "int("):
            assert word not in message, message
        assert store.writer.next_seq == 1  # nothing reached the log
    finally:
        await store.writer.close()


@pytest.mark.parametrize("raw", [b"{not json", b"", b'{"command": "x"', b"\xff\xfe"])
async def test_body_is_not_json(api: Api, raw: bytes) -> None:
    await expect_error(
        api, "POST", JOBS, 400, data=raw, headers={"Content-Type": "application/json"}
    )


@pytest.mark.parametrize("raw", [b"[]", b"null", b'"echo hi"', b"42"])
async def test_body_is_json_but_not_an_object(api: Api, raw: bytes) -> None:
    error = await expect_error(
        api, "POST", JOBS, 400, data=raw, headers={"Content-Type": "application/json"}
    )
    assert "object" in error["message"]


@pytest.mark.parametrize(
    "ctype", ["text/plain", "application/x-www-form-urlencoded", "application/octet-stream"]
)
async def test_wrong_content_type(api: Api, ctype: str) -> None:
    error = await expect_error(
        api, "POST", JOBS, (400, 415), data=b'{"command": "true"}', headers={"Content-Type": ctype}
    )
    assert "JSON" in error["message"]
    assert api.service.state.jobs == {}


async def test_body_larger_than_max_body_kb(api: Api) -> None:
    limit = api.service.settings.max_body_kb * 1024
    body = json.dumps(
        {
            "command": "x" * 60000,
            "script": None,
            "name": "y" * (limit // 2),
            "env": {f"V{i}": "z" * 1000 for i in range(limit // 1000)},
        }
    )
    assert len(body) > limit
    error = await expect_error(
        api, "POST", JOBS, 413, data=body, headers={"Content-Type": "application/json"}
    )
    assert error["code"] == "payload_too_large"


async def test_upload_larger_than_the_file_limit(api: Api) -> None:
    limit = api.service.files.max_bytes
    error = await expect_error(api, "POST", "/api/v1/uploads", 413, data=b"\0" * (limit + 1))
    assert error["code"] == "too_large"
    assert "max_upload_mb" in error["message"]
    assert list((api.service.files.root / "uploads").iterdir()) == []


async def test_missing_command_and_script(api: Api) -> None:
    error = await expect_error(api, "POST", JOBS, 400, json={"name": "nothing"})
    assert "command" in error["message"] and "script" in error["message"]


async def test_both_command_and_script(api: Api) -> None:
    error = await bad_submit(api, command="true", script="#!/bin/sh\ntrue\n")
    assert "exactly one" in error["message"]


@pytest.mark.parametrize("dep", ["afterok:999", "afterany:1[3]", "afternotok:5"])
async def test_dependency_on_missing_job(api: Api, dep: str) -> None:
    error = await bad_submit(api, 404, command="true", dependency=dep)
    assert "does not exist" in error["message"]


@pytest.mark.parametrize(
    "dep", ["sometimes:1", "afterok", "afterok:", "afterok:x", "afterok:1[", ":1"]
)
async def test_dependency_malformed(api: Api, dep: str) -> None:
    await api.submit()
    error = await bad_submit(api, command="true", dependency=dep)
    assert error["code"] == "invalid_request"


@pytest.mark.parametrize("key", ["../x", "/etc/passwd", "a/../../x", "", "a\\b", "a\x00b"])
async def test_input_path_traversal(api: Api, key: str) -> None:
    upload_id = await upload(api)
    error = await bad_submit(api, command="true", inputs={key: upload_id})
    assert error["code"] == "invalid_request"
    assert "path" in error["message"]
    # the upload was not consumed and nothing left the files directory
    assert (api.service.files.root / "uploads" / upload_id).is_file()


@pytest.mark.parametrize("pattern", ["../x", "/etc/passwd", "out/../../x", ""])
async def test_output_path_traversal(api: Api, pattern: str) -> None:
    error = await bad_submit(api, command="true", outputs=[pattern])
    assert error["code"] == "invalid_request"


@pytest.mark.parametrize(("upload_id", "status"), [("nope", 400), ("0" * 32, 404)])
async def test_input_with_bad_upload_id(api: Api, upload_id: str, status: int) -> None:
    await bad_submit(api, status, command="true", inputs={"in.txt": upload_id})


async def test_same_upload_for_two_inputs(api: Api) -> None:
    upload_id = await upload(api)
    await bad_submit(api, command="true", inputs={"a.txt": upload_id, "b.txt": upload_id})


async def test_refused_submit_leaves_no_files(api: Api) -> None:
    upload_id = await upload(api)
    resp = await api.client.post(
        JOBS, json={"command": "true", "inputs": {"a": upload_id, "b": upload_id}}
    )
    assert resp.status >= 400
    assert not (api.service.files.root / "jobs" / "1").exists()


@pytest.mark.parametrize("order", ["file_first", "dir_first"])
async def test_input_paths_that_collide(api: Api, order: str) -> None:
    first, second = await upload(api), await upload(api)
    inputs = {"a": first, "a/b": second} if order == "file_first" else {"a/b": first, "a": second}
    await bad_submit(api, command="true", inputs=inputs)


# --- job ids --------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["", "/files", "/files/stdout"])
async def test_unknown_job_is_404(api: Api, suffix: str) -> None:
    error = await expect_error(api, "GET", f"{JOBS}/4242{suffix}", 404)
    assert error["code"] == "not_found"
    assert "4242" in error["message"]


@pytest.mark.parametrize("action", ["stop", "resume", "requeue", "kill"])
async def test_control_unknown_job_is_404(api: Api, action: str) -> None:
    await expect_error(api, "POST", f"{JOBS}/4242/{action}", 404)


@pytest.mark.parametrize("job_id", ["abc", "1[x]", "1[2][3]", "1[2", "[3]", "1.5"])
@pytest.mark.parametrize("suffix", ["", "/kill", "/files"])
async def test_malformed_job_id_is_400(api: Api, job_id: str, suffix: str) -> None:
    method = "POST" if suffix == "/kill" else "GET"
    error = await expect_error(api, method, f"{JOBS}/{job_id}{suffix}", 400)
    assert error["code"] == "invalid_request"
    assert "job id" in error["message"]


async def test_unknown_task_of_existing_array(api: Api) -> None:
    job_id = await api.submit(array="1-3")
    await expect_error(api, "GET", f"{JOBS}/{job_id}[9]", 404)
    await expect_error(api, "POST", f"{JOBS}/{job_id}[9]/kill", 404)


@pytest.mark.parametrize("path", ["..%2F..%2Fetc%2Fpasswd", "%2E%2E/secret", "a/%2E%2E/%2E%2E/x"])
async def test_download_path_traversal(api: Api, path: str) -> None:
    job_id = await api.submit()
    error = await expect_error(api, "GET", f"{JOBS}/{job_id}/files/{path}", 400)
    assert ".." in error["message"]


# --- routing --------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/v1/nothing", "/api/v2/jobs", "/", "/api/v1/jobs/1/zap"])
async def test_unknown_route_is_json_404(api: Api, path: str) -> None:
    error = await expect_error(api, "GET", path, 404)
    assert error["code"] == "not_found"
    assert path in error["message"]


@pytest.mark.parametrize(
    ("method", "path"),
    [("DELETE", JOBS), ("PUT", "/api/v1/queues"), ("GET", f"{JOBS}/1/kill"), ("POST", "/healthz")],
)
async def test_wrong_method_is_json_405(api: Api, method: str, path: str) -> None:
    error = await expect_error(api, method, path, 405)
    assert error["code"] == "method_not_allowed"
    assert method in error["message"]


async def test_request_id_is_echoed(api: Api) -> None:
    resp = await api.client.get("/api/v1/nothing", headers={"X-Request-Id": "abc123"})
    assert resp.headers["X-Request-Id"] == "abc123"


# --- state conflicts ------------------------------------------------------------------


async def test_kill_done_job_is_409(api: Api) -> None:
    job_id = await done_job(api)
    error = await expect_error(api, "POST", f"{JOBS}/{job_id}/kill", 409)
    assert error["code"] == "conflict"
    assert "DONE" in error["message"]
    for action in ("stop", "resume"):
        await expect_error(api, "POST", f"{JOBS}/{job_id}/{action}", 409)


async def test_resume_pending_job_is_409(api: Api) -> None:
    job_id = await api.submit()
    await expect_error(api, "POST", f"{JOBS}/{job_id}/resume", 409)
    await expect_error(api, "POST", f"{JOBS}/{job_id}/requeue", 409)


async def test_array_control_with_nothing_to_do_is_409(api: Api) -> None:
    job_id = await api.submit(array="1-3")
    await expect_error(api, "POST", f"{JOBS}/{job_id}/resume", 409)


async def test_submit_to_closed_queue_is_409(api: Api) -> None:
    await api.call("POST", "/api/v1/queues/short/close", 200)
    error = await bad_submit(api, 409, command="true", queue="short")
    assert "short" in error["message"] and "closed" in error["message"]


async def test_duplicate_queue_is_409(api: Api) -> None:
    await api.call("POST", "/api/v1/queues", 201, json={"name": "extra"})
    error = await expect_error(api, "POST", "/api/v1/queues", 409, json={"name": "extra"})
    assert "extra" in error["message"]
    await expect_error(api, "POST", "/api/v1/queues", 409, json={"name": "normal"})


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"name": "bad name"},
        {"name": "q", "priority": "high"},
        {"name": "q", "on_host_failure": "explode"},
        {"name": "q", "hosts": "w1"},
        {"name": "q", "x": 1},
    ],
)
async def test_queue_create_invalid(api: Api, body: dict[str, Any]) -> None:
    await expect_error(api, "POST", "/api/v1/queues", 400, json=body)


@pytest.mark.parametrize("action", ["open", "close", "activate", "deactivate"])
async def test_queue_action_unknown_queue(api: Api, action: str) -> None:
    await expect_error(api, "POST", f"/api/v1/queues/nosuch/{action}", 404)
    await expect_error(api, "GET", "/api/v1/queues/nosuch", 404)


@pytest.mark.parametrize("action", ["open", "close", "drain"])
async def test_host_action_unknown_host(api: Api, action: str) -> None:
    error = await expect_error(api, "POST", f"/api/v1/hosts/ghost/{action}", 404)
    assert "ghost" in error["message"]
    await expect_error(api, "GET", "/api/v1/hosts/ghost", 404)


@pytest.mark.parametrize(
    ("kwargs", "status"),
    [
        ({"json": {"reason": 5}}, 400),
        ({"json": {"why": "x"}}, 400),
        ({"json": {"reason": "r" * 300}}, 400),
        ({"data": b"disk swap", "headers": {"Content-Type": "text/plain"}}, 400),
        ({"data": b"{oops", "headers": {"Content-Type": "application/json"}}, 400),
    ],
)
async def test_host_action_bad_reason(api: Api, kwargs: dict[str, Any], status: int) -> None:
    await api.register("w1")
    await expect_error(api, "POST", "/api/v1/hosts/w1/drain", status, **kwargs)


# --- listing parameters ---------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    ["limit=0", "offset=-1", "limit=abc", "offset=1.5", "limit=100001", "offset=", "limit=1e3"],
)
async def test_paging_params_invalid(api: Api, query: str) -> None:
    error = await expect_error(api, "GET", f"{JOBS}?{query}", 400)
    assert query.split("=")[0] in error["message"]


@pytest.mark.parametrize("state", ["RUNNING", "PEND,BOGUS", "done,x"])
async def test_unknown_state_filter(api: Api, state: str) -> None:
    error = await expect_error(api, "GET", f"{JOBS}?state={state}", 400)
    assert "state" in error["message"]


async def test_bad_array_filter(api: Api) -> None:
    await expect_error(api, "GET", f"{JOBS}?array=abc", 400)


# --- worker protocol ------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"host": "w1", "slots": 0, "memory_mb": 1},
        {"host": "../w1", "slots": 1, "memory_mb": 1},
        {"host": "w1", "slots": 1, "memory_mb": 0},
        {"host": "w1", "slots": 1, "memory_mb": 1, "attributes": {"rack": 1}},
    ],
)
async def test_register_invalid(api: Api, body: dict[str, Any]) -> None:
    await expect_error(api, "POST", "/api/v1/workers/register", 400, json=body)


@pytest.mark.parametrize(
    ("method", "path", "kwargs"),
    [
        ("POST", "/api/v1/workers/ghost/heartbeat", {"json": {}}),
        ("GET", "/api/v1/workers/ghost/assignments", {}),
        ("GET", "/api/v1/workers/ghost/assignments?version=0&timeout=1", {}),
        ("POST", "/api/v1/workers/ghost/jobs/1/finished", {"json": {"attempt": 0, "exit_code": 0}}),
    ],
)
async def test_worker_routes_unknown_host(
    api: Api, method: str, path: str, kwargs: dict[str, Any]
) -> None:
    await expect_error(api, method, path, 404, **kwargs)


@pytest.mark.parametrize("query", ["version=abc", "timeout=61", "timeout=-1", "version=-2"])
async def test_assignments_bad_query(api: Api, query: str) -> None:
    await api.register("w1")
    await expect_error(api, "GET", f"/api/v1/workers/w1/assignments?{query}", 400)


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"attempt": 0},
        {"attempt": -1, "exit_code": 0},
        {"attempt": 0, "exit_code": "0"},
        {"attempt": 0, "exit_code": 0, "cpu_user_s": -1},
    ],
)
async def test_finished_invalid(api: Api, body: dict[str, Any]) -> None:
    await api.register("w1")
    await expect_error(api, "POST", "/api/v1/workers/w1/jobs/1/finished", 400, json=body)


async def test_heartbeat_invalid(api: Api) -> None:
    await api.register("w1")
    await expect_error(
        api, "POST", "/api/v1/workers/w1/heartbeat", 400, json={"running": [{"job_id": "1"}]}
    )
    await expect_error(
        api, "POST", "/api/v1/workers/w1/heartbeat", 400, json={"load": {"cpu": "high"}}
    )


async def test_files_of_a_job_not_running_here_are_409(api: Api) -> None:
    job_id = await api.submit(inputs={"in.txt": await upload(api)})
    await api.register("w1")
    base = f"/api/v1/workers/w1/jobs/{job_id}"
    await expect_error(api, "GET", f"{base}/inputs/in.txt?attempt=0", 409)
    await expect_error(api, "PUT", f"{base}/outputs/out.txt?attempt=0", 409, data=b"x")
    assert await api.service.schedule_once() == 1
    # now it runs here, but under attempt 0 only
    await expect_error(api, "GET", f"{base}/inputs/in.txt?attempt=1", 409)
    await expect_error(api, "GET", f"{base}/inputs/in.txt", 409)
    await expect_error(api, "GET", f"{base}/inputs/in.txt?attempt=x", 400)
    await expect_error(api, "GET", f"{base}/inputs/missing.txt?attempt=0", 404)
    await expect_error(api, "PUT", f"{base}/outputs/%2E%2E/x?attempt=0", 400, data=b"x")
    await api.register("w2")
    await expect_error(api, "GET", f"/api/v1/workers/w2/jobs/{job_id}/inputs/in.txt?attempt=0", 409)


# --- hostile JSON ---------------------------------------------------------------------


@pytest.mark.parametrize("depth", [1000, 20000])
async def test_deeply_nested_json_is_400(api: Api, depth: int) -> None:
    body = '{"env": ' + "[" * depth + "]" * depth + "}"
    await expect_error(
        api, "POST", JOBS, 400, data=body, headers={"Content-Type": "application/json"}
    )


@pytest.mark.parametrize(
    "path", ["/api/v1/auth/login", "/api/v1/auth/device/token", JOBS, "/api/v1/queues"]
)
@pytest.mark.parametrize("depth", [65, 1000, 20000])
async def test_deep_json_is_400_on_every_route(api: Api, path: str, depth: int) -> None:
    # The public login route read its body in the guard with another decoder: a 500 there.
    body = '{"username": ' + "[" * depth + "]" * depth + ', "password": "x"}'
    error = await expect_error(
        api, "POST", path, 400, data=body, headers={"Content-Type": "application/json"}
    )
    assert error["message"] == "the body is nested more than 64 levels deep"


async def test_json_nested_to_the_limit_reaches_validation(api: Api) -> None:
    body = '{"username": ' + "[" * 63 + "]" * 63 + ', "password": "x"}'
    error = await expect_error(
        api,
        "POST",
        "/api/v1/auth/login",
        400,
        data=body,
        headers={"Content-Type": "application/json"},
    )
    assert error["message"] == "body.username must be string, got list"


async def test_huge_integer_literal_is_400(api: Api) -> None:
    body = '{"command": "true", "slots": ' + "1" * 5000 + "}"
    await expect_error(
        api, "POST", JOBS, 400, data=body, headers={"Content-Type": "application/json"}
    )


async def test_non_finite_numbers_are_refused(api: Api) -> None:
    await api.register("w1")
    resp = await api.client.post(
        "/api/v1/workers/w1/heartbeat",
        data='{"load": {"cpu": NaN, "mem": Infinity}}',
        headers={"Content-Type": "application/json"},
    )
    assert resp.status == 400
    text = await (await api.client.get("/api/v1/hosts/w1")).text()

    def strict(const: str) -> None:
        raise AssertionError(f"the response holds {const}, which is not JSON")

    json.loads(text, parse_constant=strict)


async def test_lone_surrogate_text_is_400_and_changes_nothing(api: Api) -> None:
    body = '{"command": "echo", "name": "\\ud800"}'
    err = await expect_error(
        api, "POST", JOBS, 400, data=body, headers={"Content-Type": "application/json"}
    )
    assert "Unicode" in err["message"]
    assert api.service.state.next_number == 1


async def test_out_of_range_worker_numbers_are_400(api: Api) -> None:
    await api.register("w1")
    job_id = await api.submit(command="true")
    await api.service.schedule_once()
    err = await expect_error(
        api,
        "POST",
        f"/api/v1/workers/w1/jobs/{job_id}/finished",
        400,
        json={"attempt": 0, "exit_code": 2**70},
    )
    assert "exit_code" in err["message"]


async def test_bad_resource_requirement_names_the_column(api: Api) -> None:
    err = await expect_error(
        api, "POST", JOBS, 400, json={"command": "true", "resources": "select[mem>4000 && "}
    )
    assert "at column" in err["message"], err


async def test_resource_requirement_is_kept_and_reserves_memory(api: Api) -> None:
    job_id = await api.submit(resources="select[mem>10] rusage[mem=200]")
    shown = await api.show(job_id)
    assert shown["resources"] == "select[mem>10] rusage[mem=200]"
    assert shown["memory_mb"] == 200


async def test_a_405_names_the_allowed_methods(api) -> None:
    resp = await api.client.request("TRACE", "/healthz")
    assert resp.status == 405
    assert "GET" in resp.headers["Allow"]
    assert (await resp.json())["error"]["code"] == "method_not_allowed"


async def test_integral_numbers_count_as_integers(api) -> None:
    # JSON Schema (and so every generated client) treats 2.0 as an integer.
    job = await api.call("POST", "/api/v1/jobs", 201, json={"command": "true", "slots": 2.0})
    shown = await api.show(job["job_id"])
    assert shown["slots"] == 2 and isinstance(shown["slots"], int)
    body = await api.call("POST", "/api/v1/jobs", 400, json={"command": "true", "slots": 2.5})
    assert "slots" in body["error"]["message"]


async def test_a_fair_share_must_be_positive(api) -> None:
    body = await api.call(
        "POST", "/api/v1/queues", 400, json={"name": "q0", "shares": {"alice": 0}}
    )
    assert "body.shares.alice must be more than 0" in body["error"]["message"]


async def test_an_unknown_query_parameter_is_named(api) -> None:
    body = await api.call("GET", "/api/v1/jobs?stat=RUN", 400)
    assert "unknown query parameter 'stat'" in body["error"]["message"]
    assert "state" in body["error"]["message"]  # what it does take
    await api.call("GET", "/api/v1/jobs?state=RUN", 200)
