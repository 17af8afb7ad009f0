"""The MUNGE backend against real munged daemons: one for the controller, one with the same
key for a login node, one with another key (another site)."""

from __future__ import annotations

import dataclasses
import json
import os
import pwd
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.auth_backends.munged import Munged, munge_available, new_key
from xce.auth import munge
from xce.auth.backends import build_backend
from xce.auth.backends.base import BackendUnavailable
from xce.auth.backends.munge import MungeBackend, MungeDenied, ReplayCache
from xce.auth.runtime import AuthRuntime
from xce.config.auth import parse_auth
from xce.core.errors import ConfigError

pytestmark = pytest.mark.skipif(not munge_available(), reason="munged/libmunge not installed")

AUD = "xce"  # the default [auth] issuer, which names the cluster


@dataclasses.dataclass(frozen=True)
class Site:
    controller: Munged  # the controller's node
    login: Munged  # a login node: the same key
    stranger: Munged  # another site's key


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    keys = tmp_path_factory.mktemp("munge-keys")
    key, other = new_key(keys), new_key(keys)
    started: list[Munged] = []
    try:
        for k in (key, key, other):
            started.append(Munged(k))
        yield Site(*started)
    finally:
        for daemon in started:
            daemon.stop()


def backend(site: Site, **options: object) -> MungeBackend:
    table = {"type": "munge", "socket": site.controller.socket, "allow_root": True, **options}
    made = build_backend(table, Path("/"), "auth.backend[0]")
    assert isinstance(made, MungeBackend)
    return made


def me() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def payload(**fields: object) -> bytes:
    body: dict[str, object] = {"aud": AUD, "nonce": os.urandom(12).hex(), "ts": time.time()}
    body.update(fields)
    return json.dumps({k: v for k, v in body.items() if v is not None}).encode()


async def test_a_login_node_credential_names_its_maker(site: Site) -> None:
    credential = munge.login_credential(AUD, site.login.socket)
    principal = await backend(site).authenticate_credential(credential, AUD)
    assert principal.user == me() and principal.backend == "munge"
    primary = pwd.getpwuid(os.getuid()).pw_gid
    import grp

    assert grp.getgrgid(primary).gr_name in principal.groups


async def test_a_credential_logs_in_once(site: Site) -> None:
    credential = munge.login_credential(AUD, site.controller.socket)
    checker = backend(site)
    await checker.authenticate_credential(credential, AUD)
    with pytest.raises(MungeDenied, match="replayed"):
        await checker.authenticate_credential(credential, AUD)


async def test_replays_through_another_munged_are_caught_by_the_controller(site: Site) -> None:
    # munged remembers only what it decoded itself: a controller asking a second munged
    # (HA, a restarted daemon) relies on its own list of accepted credentials.
    credential = munge.login_credential(AUD, site.login.socket)
    first = backend(site)
    await first.authenticate_credential(credential, AUD)
    through_login_node = dataclasses.replace(first, socket=site.login.socket)  # same list
    with pytest.raises(MungeDenied, match="replayed"):
        await through_login_node.authenticate_credential(credential, AUD)
    # ... and that list is what refused it: a fresh backend on that munged accepts a new
    # credential that the first one saw
    other = munge.login_credential(AUD, site.login.socket)
    await first.authenticate_credential(other, AUD)
    fresh = dataclasses.replace(first, socket=site.login.socket, seen=ReplayCache())
    assert (await fresh.authenticate_credential(other, AUD)).user == me()


async def test_another_sites_key_is_refused(site: Site) -> None:
    credential = munge.login_credential(AUD, site.stranger.socket)
    with pytest.raises(MungeDenied, match="invalid MUNGE credential"):
        await backend(site).authenticate_credential(credential, AUD)


async def test_an_expired_credential_is_refused(site: Site) -> None:
    credential = munge.encode(payload(), site.login.socket, ttl_s=1)
    time.sleep(2.5)  # past its one-second life, whatever the second boundaries
    with pytest.raises(MungeDenied, match="expired"):
        await backend(site).authenticate_credential(credential, AUD)


@pytest.mark.parametrize("at", [0.3, 0.5, 0.8])
async def test_a_tampered_credential_is_refused(site: Site, at: float) -> None:
    credential = munge.login_credential(AUD, site.login.socket)
    body = credential[len("MUNGE:") : -1]
    i = int(len(body) * at)
    flipped = body[:i] + ("B" if body[i] != "B" else "C") + body[i + 1 :]
    with pytest.raises(MungeDenied):
        await backend(site).authenticate_credential(f"MUNGE:{flipped}:", AUD)


async def test_a_credential_for_another_cluster_or_service_is_refused(site: Site) -> None:
    checker = backend(site)
    for body, reason in [
        (payload(aud="other-cluster"), "not this cluster"),
        (b"hello", "not an XCE login"),
        (payload(extra="x"), "not an XCE login"),
        (payload(nonce=None), "not an XCE login"),
        (payload(nonce="short"), "not an XCE login"),
        (b"", "not an XCE login"),
    ]:
        credential = munge.encode(body, site.login.socket)
        with pytest.raises(MungeDenied, match=reason):
            await checker.authenticate_credential(credential, AUD)


@pytest.mark.parametrize("skew", [-900.0, 900.0])
async def test_a_payload_dated_beyond_ttl_is_refused(site: Site, skew: float) -> None:
    credential = munge.encode(payload(ts=time.time() + skew), site.login.socket)
    with pytest.raises(MungeDenied, match="beyond 300 s"):
        await backend(site).authenticate_credential(credential, AUD)
    within = munge.encode(payload(ts=time.time() - 20), site.login.socket)
    assert (await backend(site, ttl_s=60).authenticate_credential(within, AUD)).user == me()
    with pytest.raises(MungeDenied, match="beyond 10 s"):
        await backend(site, ttl_s=10).authenticate_credential(
            munge.encode(payload(ts=time.time() - 20), site.login.socket), AUD
        )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not a credential",
        "MUNGE:abc",
        "MUNGE:ab\ncd:",
        "MUNGE:ab cd:",
        "MUNGE:" + "A" * 5000 + ":",
        "MUNGE:AAAA:\x00",
    ],
)
async def test_text_that_is_no_credential_never_reaches_munged(text: str) -> None:
    gone = MungeBackend(socket="/nonexistent/munge.socket")  # would answer 503 if asked
    with pytest.raises(MungeDenied):
        await gone.authenticate_credential(text, AUD)


async def test_munged_down_is_unavailable_not_denied(site: Site) -> None:
    credential = munge.login_credential(AUD, site.login.socket)
    gone = MungeBackend(socket="/nonexistent/munge.socket")
    with pytest.raises(BackendUnavailable, match=r"/nonexistent/munge\.socket"):
        await gone.authenticate_credential(credential, AUD)


def _credential_as(uid: int, gid: int, socket: str) -> str:
    """A credential made by another uid: the munge command run as that uid."""
    done = subprocess.run(
        ["munge", "--socket", socket, "--string", payload().decode()],
        user=uid,
        group=gid,
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
        check=True,
    )
    return done.stdout.strip()


@pytest.mark.skipif(os.geteuid() != 0, reason="making credentials as other uids needs root")
async def test_root_and_nameless_uids_are_refused(site: Site) -> None:
    root = munge.login_credential(AUD, site.login.socket)
    with pytest.raises(MungeDenied, match="root may not log in"):
        await backend(site, allow_root=False).authenticate_credential(root, AUD)
    nameless = 54321
    assert not any(p.pw_uid == nameless for p in pwd.getpwall())
    credential = _credential_as(nameless, nameless, site.login.socket)
    with pytest.raises(MungeDenied, match="uid 54321 has no user name") as refused:
        await backend(site).authenticate_credential(credential, AUD)
    assert refused.value.uid == nameless


def test_the_replay_list_refuses_new_logins_rather_than_forget_live_ones() -> None:
    now = [0.0]
    cache = ReplayCache(max_entries=2, clock=lambda: now[0])
    assert cache.add(b"a", 10) and cache.add(b"b", 10)
    assert not cache.add(b"a", 10)
    with pytest.raises(BackendUnavailable):
        cache.add(b"c", 10)
    now[0] = 10.5  # a and b expired
    assert cache.add(b"c", 10) and cache.add(b"a", 10)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"ttl_s": 0}, "auth.backend[1].ttl_s must be > 0"),
        ({"ttl_s": 7200}, "auth.backend[1].ttl_s must be > 0 and at most 3600"),
        ({"ttl_s": "5m"}, "auth.backend[1].ttl_s must be"),
        ({"token_ttl_s": -1}, "auth.backend[1].token_ttl_s must be positive"),
        ({"socket": "run/munge.sock"}, "auth.backend[1].socket must be an absolute path"),
        ({"socket": "/" + "x" * 200}, "auth.backend[1].socket must be a Unix socket path"),
        ({"allow_root": "yes"}, "auth.backend[1].allow_root must be"),
        ({"sockett": "/x"}, "unknown key auth.backend[1].sockett"),
    ],
)
def test_bad_config_is_one_line_naming_the_key(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        build_backend({"type": "munge", **table}, Path("/"), "auth.backend[1]")
    assert message in refused.value.message and "\n" not in refused.value.message


def test_defaults() -> None:
    made = build_backend({"type": "munge"}, Path("/"), "auth.backend[0]")
    assert (made.socket, made.ttl_s, made.token_ttl_s, made.allow_root) == (
        "/run/munge/munge.socket.2",
        300.0,
        3600.0,
        False,
    )
    parse_auth({"backend": [{"type": "munge"}]}, Path("/"))  # a known backend type


async def test_a_munge_login_gets_roles_like_a_local_user(site: Site, tmp_path: Path) -> None:
    """The session: the uid's name and OS groups, plus the users file's groups and roles,
    then [auth.groups]; for the backend's token_ttl_s."""
    from xce.auth.backends.configfile import UsersFile

    users = UsersFile(tmp_path / "users.toml")
    users.add(me(), "a-password-nobody-types", ("physics",), ())
    settings = parse_auth(
        {
            "groups": {"physics": ["group-admin"]},
            "backend": [
                {"type": "configfile", "path": "users.toml"},
                {
                    "type": "munge",
                    "socket": site.controller.socket,
                    "allow_root": True,
                    "token_ttl_s": 600,
                },
            ],
        },
        tmp_path,
    )
    runtime = AuthRuntime(settings, tmp_path / "state")
    checker = runtime.munge_backend()
    assert checker is not None and runtime.cluster_id == AUD
    session = await runtime.munge_login(
        checker, munge.login_credential(runtime.cluster_id, site.login.socket)
    )
    assert session.user == me()
    assert "physics" in session.groups and "group-admin" in session.roles
    assert 590 <= session.expires_at - time.time() <= 601
    claims = runtime.tokens.verify(session.token)
    assert claims.user == me()
