"""An integer literal with an absurd number of digits is a 400 naming the field, not
Python's own message about its conversion limit (sys.set_int_max_str_digits)."""

from __future__ import annotations

import pytest

from .conftest import Api

HUGE = "9" * 5000


@pytest.mark.parametrize(
    ("path", "raw", "field"),
    [
        ("/api/v1/jobs", '{"command": "true", "slots": ' + HUGE + "}", "body.slots"),
        ("/api/v1/jobs", '{"command": "true", "walltime_s": -' + HUGE + "}", "body.walltime_s"),
        ("/api/v1/jobs", '{"command": "true", "env": {"A": ' + HUGE + "}}", "body.env.A"),
        (
            "/api/v1/reservations",
            '{"name": "r", "hosts": ["w1"], "start": ' + HUGE + "}",
            "body.start",
        ),
        (
            "/api/v1/auth/login",
            '{"username": "a", "password": [1, ' + HUGE + "]}",
            "body.password[1]",
        ),
    ],
)
async def test_a_huge_integer_is_refused_naming_its_field(
    api: Api, path: str, raw: str, field: str
) -> None:
    resp = await api.client.post(path, data=raw, headers={"Content-Type": "application/json"})
    assert resp.status == 400
    body = await resp.json()
    message = body["error"]["message"]
    assert body["error"]["code"] == "invalid_request"
    assert message.startswith(f"{field} is an integer of 5000 digits"), message
    assert "set_int_max_str_digits" not in message and len(message) < 200, message


async def test_ordinary_large_values_keep_their_range_message(api: Api) -> None:
    """Up to the digit limit the field's own rule answers, as before."""
    body = await api.call("POST", "/api/v1/jobs", 400, json={"command": "true", "slots": 10**30})
    assert "slots" in body["error"]["message"], body
    await api.submit(command="true")  # and the controller still takes work
