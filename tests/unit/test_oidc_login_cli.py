"""`xce login --device` polling rules (RFC 8628 3.5) against a scripted controller: the
interval is honoured and grows by 5 s on slow_down; denied, expired and "no OIDC backend" end
in one LoginFailed line. The real-provider path is tests/integration/test_oidc_cli_e2e.py."""

from __future__ import annotations

from typing import Any

import pytest

from xce.cli.oidc_login import LoginFailed, device_login
from xce.client import ApiError

GRANT = {
    "device_code": "dc",
    "user_code": "ABCD-EFGH",
    "verification_uri": "https://idp/device",
    "verification_uri_complete": "https://idp/device?user_code=ABCD-EFGH",
    "expires_in": 600,
    "interval": 2,
}
SESSION = {"token": "t", "user": "alice", "roles": ["user"], "expires_at": 0.0}


class Scripted:
    """Answers device_token with the next scripted error code, or the session at the end."""

    def __init__(self, answers: list[str], start: ApiError | None = None) -> None:
        self.answers = answers
        self.start = start

    async def device_start(self) -> dict[str, Any]:
        if self.start is not None:
            raise self.start
        return GRANT

    async def device_token(self, device_code: str) -> dict[str, Any]:
        assert device_code == "dc"
        if self.answers:
            code = self.answers.pop(0)
            raise ApiError(404 if code == "not_found" else 400, code, f"said {code}")
        return SESSION


async def run(client: Scripted) -> tuple[dict[str, Any], list[float], list[str]]:
    waits: list[float] = []
    said: list[str] = []

    async def sleep(s: float) -> None:
        waits.append(s)

    return await device_login(client, said.append, sleep), waits, said  # type: ignore[arg-type]


async def test_pending_then_slow_down_then_success() -> None:
    session, waits, said = await run(
        Scripted(["authorization_pending", "slow_down", "authorization_pending"])
    )
    assert session is SESSION
    assert waits == [2, 2, 7, 7]
    assert "https://idp/device" in said[0] and "ABCD-EFGH" in said[0]
    assert GRANT["verification_uri_complete"] in said[1]


@pytest.mark.parametrize(
    ("code", "needle"),
    [
        ("access_denied", "denied at the identity provider"),
        ("expired_token", "expired before the sign-in was completed"),
        ("not_found", "no OpenID Connect backend"),
    ],
)
async def test_failures_are_one_line(code: str, needle: str) -> None:
    with pytest.raises(LoginFailed) as info:
        await run(Scripted(["authorization_pending", code]))
    assert needle in info.value.message and "\n" not in info.value.message


async def test_no_oidc_backend_at_start() -> None:
    with pytest.raises(LoginFailed, match="no OpenID Connect backend"):
        await run(Scripted([], start=ApiError(404, "not_found", "no OpenID Connect backend")))
