"""The PAM backend against the real pam_unix with Linux users the test creates (as root)."""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pam as python_pam
import pytest

from xce.auth.backends import PasswordBackend, build_backend
from xce.auth.backends.pam import PAM_DIR, PamBackend
from xce.core.errors import ConfigError

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="creating Linux users and PAM service files needs root"
)


@dataclass(frozen=True)
class PamWorld:
    user: str
    password: str
    group: str
    passwordless: str
    service: str
    nullok_service: str


def _run(*argv: str, stdin: str | None = None) -> None:
    subprocess.run(argv, input=stdin, text=True, check=True, capture_output=True)


@pytest.fixture(scope="module")
def world() -> Iterator[PamWorld]:
    tag = secrets.token_hex(3)
    w = PamWorld(
        user=f"xceu{tag}",
        password="S3cret pass-" + tag,
        group=f"xceg{tag}",
        passwordless=f"xcen{tag}",
        service=f"xce-test-{tag}",
        nullok_service=f"xce-test-nullok-{tag}",
    )
    files = [PAM_DIR / w.service, PAM_DIR / w.nullok_service]
    try:
        _run("groupadd", w.group)
        _run("useradd", "-M", "-N", "-G", w.group, "-s", "/usr/sbin/nologin", w.user)
        _run("chpasswd", stdin=f"{w.user}:{w.password}\n")
        _run("useradd", "-M", "-N", "-s", "/usr/sbin/nologin", w.passwordless)
        _run("passwd", "-d", w.passwordless)
        # The dedicated service the README documents (nodelay only to keep the test fast).
        files[0].write_text("auth required pam_unix.so nodelay\naccount required pam_unix.so\n")
        files[1].write_text(
            "auth required pam_unix.so nullok nodelay\naccount required pam_unix.so\n"
        )
        yield w
    finally:
        for f in files:
            f.unlink(missing_ok=True)
        for user in (w.user, w.passwordless):
            subprocess.run(["userdel", user], capture_output=True)
        subprocess.run(["groupdel", w.group], capture_output=True)


def backend(service: str) -> PamBackend:
    return build_backend({"type": "pam", "service": service}, Path("/"), "auth.backend[2]")


async def test_right_password_logs_in_with_system_groups(world: PamWorld) -> None:
    assert isinstance(backend(world.service), PasswordBackend)
    principal = await backend(world.service).authenticate(world.user, world.password)
    assert principal is not None
    assert principal.user == world.user and principal.backend == "pam"
    assert world.group in principal.groups
    assert "users" in principal.groups  # useradd -N: primary group "users"


async def test_default_login_service_accepts_the_password(world: PamWorld) -> None:
    principal = await backend("login").authenticate(world.user, world.password)
    assert principal is not None and principal.user == world.user


@pytest.mark.parametrize("password", ["wrong", "S3cret pass", " "])
async def test_wrong_password_is_refused(world: PamWorld, password: str) -> None:
    assert await backend(world.service).authenticate(world.user, password) is None


async def test_unknown_user_is_refused(world: PamWorld) -> None:
    assert (
        await backend(world.service).authenticate("nosuchuser" + world.group, world.password)
        is None
    )


async def test_user_name_with_control_characters_is_refused(world: PamWorld) -> None:
    assert await backend(world.service).authenticate(world.user + "\n", world.password) is None


async def test_empty_password_never_logs_in_even_where_pam_would(world: PamWorld) -> None:
    # The trap is real: with nullok, PAM itself lets the password-less account in ...
    assert python_pam.pam().authenticate(world.passwordless, "", service=world.nullok_service)
    # ... the backend refuses empty passwords before PAM is asked.
    assert await backend(world.nullok_service).authenticate(world.passwordless, "") is None
    assert await backend(world.service).authenticate(world.user, "") is None


async def test_locked_account_is_refused(world: PamWorld) -> None:
    _run("usermod", "-L", world.user)
    try:
        assert await backend(world.service).authenticate(world.user, world.password) is None
    finally:
        _run("usermod", "-U", world.user)
    assert await backend(world.service).authenticate(world.user, world.password) is not None


async def test_denied_users_never_log_in(world: PamWorld) -> None:
    assert backend(world.service).deny_users == {"root"}
    denied = build_backend(
        {"type": "pam", "service": world.service, "deny_users": ["root", world.user]},
        Path("/"),
        "auth.backend[2]",
    )
    assert await denied.authenticate(world.user, world.password) is None


def test_config_names_the_bad_key() -> None:
    with pytest.raises(ConfigError, match=r"auth\.backend\[2\]\.service .*does not exist"):
        backend("no-such-service-" + secrets.token_hex(4))
    with pytest.raises(ConfigError, match=r"auth\.backend\[2\]\.service must be a file name"):
        backend("../etc/passwd")
    with pytest.raises(ConfigError, match=r"auth\.backend\[0\]\.deny_users must be a list"):
        build_backend({"type": "pam", "deny_users": "root"}, Path("/"), "auth.backend[0]")
    with pytest.raises(ConfigError, match=r"unknown key auth\.backend\[0\]\.servce"):
        build_backend({"type": "pam", "servce": "login"}, Path("/"), "auth.backend[0]")
