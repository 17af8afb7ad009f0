"""The login backends end to end: a real controller process (tests/integration/cluster.py)
configured with `[[auth.backend]]` tables that point at real servers (OpenLDAP slapd over
LDAPS, the host's PAM, an OpenID Connect provider over HTTPS), driven through the HTTP API,
the `xce` CLI and the guard, so the whole path (config -> backend -> group mapping -> JWT ->
RBAC on real routes) is proven, not only the backend modules.

The servers are the module-scoped fixtures of tests/auth_backends (slapd: alice in physics +
hpc, bob in admins + hpc, mallory in no group; the provider logs everyone in as alice with
groups hpc + physics).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.auth_backends import test_ldap_backend, test_oauth2_backend
from tests.auth_backends.browser import Browser
from tests.auth_backends.oidc import CLIENT_ID, node_available
from tests.auth_backends.slapd import PASSWORDS, SERVICE_DN, SUFFIX, free_port
from tests.integration.cluster import WORKER_TOKEN, ApiFailure, Cluster
from tests.integration.test_auth_e2e import Shell
from tests.integration.test_guard import hit
from xce.auth.backends.configfile import UsersFile
from xce.auth.backends.pam import PAM_DIR

# The real servers, shared with the backend-level tests (module scope: one each here).
directory = test_ldap_backend.directory  # slapd: Directory(server, ca_file, password_file)
env = test_oauth2_backend.env  # oidc-provider: Env(provider, ca_file)

SLAPD_MISSING = test_ldap_backend.pytestmark.args[0]
needs_slapd = pytest.mark.skipif(SLAPD_MISSING, reason="OpenLDAP slapd is not installed")

FILE_PASSWORDS = {"carol": "carol-file-pw", "bob": "bob-file-pw"}  # bob is also in LDAP
GROUPS = '[auth.groups]\nphysics = ["group-admin"]\nadmins = ["operator"]\n'
GUARD = "[guard]\nlogin_free_failures = 3\nlogin_backoff_s = 30\n"
LOGIN = "/api/v1/auth/login"


def table(header: str, values: dict[str, Any]) -> str:
    """One TOML table; json.dumps writes strings, numbers, booleans and lists TOML accepts."""
    return f"[{header}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items())


def ldap_backend(d: Any, url: str | None = None, name: str = "ldap") -> str:
    return table(
        "[auth.backend]",
        {
            "type": "ldap",
            "name": name,
            "url": url or d.server.ldaps_url,
            "ca_file": str(d.ca_file),
            "bind_dn": SERVICE_DN,
            "bind_password_file": str(d.password_file),
            "user_base": f"ou=people,{SUFFIX}",
            "group_base": f"ou=groups,{SUFFIX}",
            "timeout_s": 3,
        },
    )


def oidc_backend(env: Any) -> str:
    """The `[[auth.backend]]` table for the real provider of tests/auth_backends/oidc.py."""
    return table(
        "[auth.backend]",
        {
            "type": "oauth2",
            "issuer": env.provider.issuer,
            "client_id": CLIENT_ID,
            "ca_file": str(env.ca_file),
            "scopes": ["openid", "profile", "groups"],
            "timeout_s": 5,
        },
    )


def users_file(root: Path) -> str:
    root.mkdir(parents=True, exist_ok=True)
    users = UsersFile(root / "users.toml")
    if not users.path.exists():
        users.add("carol", FILE_PASSWORDS["carol"], ("chemistry",))
        users.add("bob", FILE_PASSWORDS["bob"], ("filegroup",))
    return table("[auth.backend]", {"type": "configfile", "path": "users.toml"})


def login(c: Cluster, user: str, password: str) -> dict[str, Any]:
    return c.post(LOGIN, {"username": user, "password": password}, token=None)


def refused(
    c: Cluster, method: str, path: str, body: Any = None, token: str | None = None
) -> ApiFailure:
    with pytest.raises(ApiFailure) as info:
        c.request(method, path, body, token=token)
    return info.value


@pytest.fixture(scope="module")
def ldap_cluster(directory: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A controller whose backends are, in order, a users file and the LDAPS directory;
    LDAP groups map to roles; the guard locks a (user, address) after 3 failures for 30 s."""
    c = Cluster(tmp_path_factory.mktemp("ldap-e2e") / "cluster")
    c.extra_auth = GROUPS + users_file(c.root) + ldap_backend(directory)
    c.role_sections["controller"] = GUARD
    c.start_controller()
    try:
        yield c
    finally:
        c.stop()


# --- 1. LDAP through the controller ------------------------------------------------------


@needs_slapd
def test_ldap_login_whoami_and_rbac_through_the_controller(ldap_cluster: Cluster) -> None:
    c = ldap_cluster
    alice = login(c, "alice", PASSWORDS["alice"])
    assert (alice["user"], alice["groups"], alice["roles"]) == (
        "alice",
        ["hpc", "physics"],
        ["group-admin"],
    )
    who = c.get("/api/v1/auth/whoami", token=alice["token"])
    assert (who["user"], who["kind"], who["groups"], who["roles"]) == (
        "alice",
        "user",
        ["hpc", "physics"],
        ["group-admin"],
    )
    assert {"job:submit", "job:view:group", "job:control:group"} <= set(who["permissions"])
    assert "host:admin" not in who["permissions"]

    # Her token submits a job that is hers; submitting as someone else is refused.
    job = c.post("/api/v1/jobs", {"command": "true", "hold": True}, token=alice["token"])
    assert c.get(f"/api/v1/jobs/{job['job_id']}", token=alice["token"])["user"] == "alice"
    failure = refused(c, "POST", "/api/v1/jobs", {"command": "true", "user": "bob"}, alice["token"])
    assert failure.status == 403
    assert "may not submit jobs as bob" in str(failure.body)
    assert "user:impersonate" in str(failure.body)

    # Closing a host needs host:admin: alice (group-admin) may not, bob (admins ->
    # operator) may.
    c.post(
        "/api/v1/workers/register",
        {"host": "ldap-h1", "slots": 1, "memory_mb": 64},
        token=WORKER_TOKEN,
    )
    failure = refused(c, "POST", "/api/v1/hosts/ldap-h1/close", {}, alice["token"])
    assert failure.status == 403 and failure.body["error"]["code"] == "forbidden"
    bob = login(c, "bob", PASSWORDS["bob"])
    assert (bob["groups"], bob["roles"]) == (["admins", "hpc"], ["operator"])
    c.post("/api/v1/hosts/ldap-h1/close", {"reason": "e2e"}, token=bob["token"])
    host = c.get("/api/v1/hosts/ldap-h1", token=bob["token"])
    assert (host["admin"], host["admin_reason"]) == ("closed", "e2e")
    # mallory is in no mapped group: the default role.
    assert login(c, "mallory", PASSWORDS["mallory"])["roles"] == ["user"]


@needs_slapd
@pytest.mark.parametrize(
    ("user", "password"),
    [
        ("alice", "not-alices-password"),
        ("*)(uid=*", PASSWORDS["alice"]),  # filter injection: a literal, matches nobody
        ("*", PASSWORDS["alice"]),
        ("ali*", PASSWORDS["alice"]),  # unescaped, this would match alice alone
        ("nopass", "anything"),  # an entry without a password
        ("nosuchuser", "whatever"),
    ],
)
def test_ldap_refusals_are_401_json(ldap_cluster: Cluster, user: str, password: str) -> None:
    failure = refused(ldap_cluster, "POST", LOGIN, {"username": user, "password": password})
    assert failure.status == 401, failure.body
    assert failure.body["error"]["code"] == "auth_denied"
    assert failure.body["error"]["message"] == "wrong user name or password"


@needs_slapd
def test_xce_login_cli_against_the_ldap_controller(ldap_cluster: Cluster) -> None:
    shell = Shell(ldap_cluster, "cli-alice")
    out = shell.ok("login", "alice", stdin=PASSWORDS["alice"] + "\n")
    assert "Logged in as alice (roles group-admin)" in out
    assert shell.token_file.exists()
    who = json.loads(shell.ok("whoami", "--json"))
    assert (who["user"], who["groups"], who["roles"]) == (
        "alice",
        ["hpc", "physics"],
        ["group-admin"],
    )
    shell.refused("login", "alice", needle="wrong user name or password", stdin="guess\n")


# --- 2. Two backends in order, and an LDAP outage ------------------------------------------


@needs_slapd
def test_configfile_then_ldap_in_order(ldap_cluster: Cluster) -> None:
    c = ldap_cluster
    carol = login(c, "carol", FILE_PASSWORDS["carol"])
    assert (carol["user"], carol["groups"], carol["roles"]) == ("carol", ["chemistry"], ["user"])
    alice = login(c, "alice", PASSWORDS["alice"])
    assert alice["groups"] == ["hpc", "physics"]
    # bob is in both: the users file (first) answers for its password; with his directory
    # password the file refuses and LDAP, next in order, accepts with the directory's groups.
    assert login(c, "bob", FILE_PASSWORDS["bob"])["groups"] == ["filegroup"]
    assert login(c, "bob", PASSWORDS["bob"])["groups"] == ["admins", "hpc"]
    assert (
        refused(c, "POST", LOGIN, {"username": "carol", "password": PASSWORDS["alice"]}).status
        == 401
    )


@needs_slapd
async def test_a_directory_that_is_down_does_not_stop_file_users(
    directory: Any, tmp_path: Path
) -> None:
    c = Cluster(tmp_path / "cluster")
    # The dead directory comes *first*, so every login really goes past it.
    c.extra_auth = (
        GROUPS
        + ldap_backend(directory, f"ldaps://127.0.0.1:{free_port()}", "ldap-down")
        + users_file(c.root)
    )
    c.role_sections["controller"] = GUARD
    c.start_controller()  # the controller starts although its directory is unreachable
    try:
        carol = login(c, "carol", FILE_PASSWORDS["carol"])
        assert carol["user"] == "carol"
        assert c.get("/api/v1/auth/whoami", token=carol["token"])["groups"] == ["chemistry"]
        # A directory user cannot be checked: 503 (try later), not 401 (wrong password).
        failure = refused(c, "POST", LOGIN, {"username": "alice", "password": PASSWORDS["alice"]})
        assert failure.status == 503, failure.body
        assert failure.body["error"]["code"] == "auth_backend_unavailable"
        # A wrong guess at carol's password is a 503 too (the directory might have known
        # another carol), yet it was checked against the users file: it counts as a failed
        # login, or an outage would lift the lock-out for everyone.
        for _ in range(3):
            status, body, _ = await hit(
                c.url, "127.0.0.4", "POST", LOGIN, body={"username": "carol", "password": "guess"}
            )
            assert (status, body["error"]["code"]) == (503, "auth_backend_unavailable")
        status, body, _ = await hit(
            c.url,
            "127.0.0.4",
            "POST",
            LOGIN,
            body={"username": "carol", "password": FILE_PASSWORDS["carol"]},
        )
        assert (status, body["error"]["code"]) == (429, "login_locked"), body
    finally:
        c.stop()


@needs_slapd
async def test_a_directory_that_hangs_does_not_hold_up_file_users(
    directory: Any, tmp_path: Path
) -> None:
    """A directory that accepts connections but never answers (each LDAP login waits for its
    timeout in a thread) must not starve the threads that users-file logins and the audit
    log need: more hung logins than asyncio's default executor has threads are in flight
    while a users-file user logs in."""
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(256)  # the kernel completes TCP handshakes; nobody speaks TLS
    c = Cluster(tmp_path / "cluster")
    c.extra_auth = users_file(c.root) + ldap_backend(
        directory, f"ldaps://127.0.0.1:{hole.getsockname()[1]}", "ldap-hung"
    ).replace("timeout_s = 3", "timeout_s = 8")
    c.start_controller()
    hung: list[asyncio.Task[Any]] = []
    try:
        default_threads = min(32, (os.cpu_count() or 1) + 4)
        hung = [
            asyncio.create_task(
                hit(
                    c.url,
                    "127.0.0.1",
                    "POST",
                    LOGIN,
                    body={"username": f"dir-user-{i}", "password": "x"},
                )
            )
            for i in range(default_threads + 8)
        ]
        await asyncio.sleep(1.0)  # all of them are waiting on the directory now
        assert not any(t.done() for t in hung)
        started = time.monotonic()
        status, session, _ = await hit(
            c.url,
            "127.0.0.1",
            "POST",
            LOGIN,
            body={"username": "carol", "password": FILE_PASSWORDS["carol"]},
        )
        took = time.monotonic() - started
        assert status == 200 and session["user"] == "carol"
        assert took < 4.0, f"a users-file login waited {took:.1f} s behind a hung directory"
    finally:
        hole.close()  # queued connections are reset: the hung logins end now
        await asyncio.gather(*hung, return_exceptions=True)
        c.stop()


# --- 3. PAM: a real Linux user ------------------------------------------------------------


@pytest.fixture
def linux_user() -> Iterator[tuple[str, str, str, str]]:
    """(user, password, group, PAM service): a Linux user and a pam_unix-only service."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the test creates a Linux user and a /etc/pam.d service")
    tag = secrets.token_hex(3)
    user, group, service = f"xcep{tag}", f"xcepg{tag}", f"xce-e2e-{tag}"
    password = "pam pass-" + tag
    service_file = PAM_DIR / service

    def run(*argv: str, stdin: str | None = None) -> None:
        subprocess.run(argv, input=stdin, text=True, check=True, capture_output=True)

    try:
        run("groupadd", group)
        run("useradd", "-M", "-N", "-G", group, "-s", "/bin/sh", user)
        run("chpasswd", stdin=f"{user}:{password}\n")
        service_file.write_text("auth required pam_unix.so nodelay\naccount required pam_unix.so\n")
        yield user, password, group, service
    finally:
        service_file.unlink(missing_ok=True)
        subprocess.run(["userdel", user], capture_output=True)
        subprocess.run(["groupdel", group], capture_output=True)


def test_pam_user_logs_in_and_runs_a_job_as_itself(
    linux_user: tuple[str, str, str, str], tmp_path: Path
) -> None:
    user, password, group, service = linux_user
    c = Cluster(tmp_path / "cluster")
    c.extra_auth = f'[auth.groups]\n"{group}" = ["group-admin"]\n' + table(
        "[auth.backend]", {"type": "pam", "service": service}
    )
    c.start_controller()
    try:
        session = login(c, user, password)
        assert session["user"] == user and group in session["groups"]
        assert session["roles"] == ["group-admin"]
        who = c.get("/api/v1/auth/whoami", token=session["token"])
        assert who["user"] == user and group in who["groups"]
        assert refused(c, "POST", LOGIN, {"username": user, "password": "wrong"}).status == 401
        assert refused(c, "POST", LOGIN, {"username": "root", "password": "whatever"}).status == 401
        # The login is a real Unix account: its job runs as that account on a worker.
        c.start_worker("pw1", slots=1)
        job = c.post("/api/v1/jobs", {"command": "id -un"}, token=session["token"])["job_id"]
        done = c.wait_state(job, "DONE", "EXIT", timeout=30)
        assert (done["state"], done["user"]) == ("DONE", user), done
        assert c.download(job, "stdout").decode() == user + "\n"
    finally:
        c.stop()


# --- 4. OpenID Connect device login through the controller ---------------------------------


@pytest.mark.skipif(node_available() is not None, reason=str(node_available()))
async def test_oidc_device_login_through_the_controller(env: Any, tmp_path: Path) -> None:
    c = Cluster(tmp_path / "cluster")
    c.extra_auth = GROUPS + oidc_backend(env)
    c.start_controller()
    browser = Browser(env.ca_file)
    try:
        grant = c.post("/api/v1/auth/device", token=None)
        assert grant["user_code"] and grant["device_code"]
        assert grant["verification_uri"].startswith(env.provider.issuer)
        assert grant["verification_uri_complete"].startswith(env.provider.issuer)
        poll = {"device_code": grant["device_code"]}
        pending = refused(c, "POST", "/api/v1/auth/device/token", poll)
        assert (pending.status, pending.body["error"]["code"]) == (400, "authorization_pending")

        page = await browser.confirm_device(grant["verification_uri_complete"])
        assert "Sign-in Success" in page
        deadline = time.monotonic() + 30
        while True:
            try:
                session = c.post("/api/v1/auth/device/token", poll, token=None)
                break
            except ApiFailure as exc:
                assert exc.body["error"]["code"] == "authorization_pending", exc.body
                assert time.monotonic() < deadline, "device login never completed"
                await asyncio.sleep(grant["interval"])
        assert (session["user"], session["groups"], session["roles"]) == (
            "alice",
            ["hpc", "physics"],
            ["group-admin"],
        )
        who = c.get("/api/v1/auth/whoami", token=session["token"])
        assert (who["user"], who["kind"], who["groups"], who["roles"]) == (
            "alice",
            "user",
            ["hpc", "physics"],
            ["group-admin"],
        )
        # The XCE JWT works on a real route; the device code is spent.
        assert c.get("/api/v1/jobs", token=session["token"])["jobs"] == []
        spent = refused(c, "POST", "/api/v1/auth/device/token", poll)
        assert spent.status == 400 and spent.body["error"]["code"] != "authorization_pending"
    finally:
        await browser.close()
        c.stop()


# --- 5. The guard in front of the real login route -------------------------------------------


@needs_slapd
async def test_login_lockout_per_user_and_address_with_ldap(ldap_cluster: Cluster) -> None:
    url, user, right = ldap_cluster.url, "mallory", PASSWORDS["mallory"]

    async def attempt(source: str, password: str) -> tuple[int, dict[str, Any], dict[str, str]]:
        return await hit(url, source, "POST", LOGIN, body={"username": user, "password": password})

    # Three free failures from the attacker's address ...
    for _ in range(3):
        status, body, _ = await attempt("127.0.0.2", "guess")
        assert (status, body["error"]["code"]) == (401, "auth_denied")
    # ... then the pair is locked, even with the right password (LDAP is not asked).
    status, body, headers = await attempt("127.0.0.2", right)
    assert (status, body["error"]["code"]) == (429, "login_locked"), body
    assert 1 <= int(headers["Retry-After"]) <= 30
    # The real mallory from another address logs in, and the token works.
    status, session, _ = await attempt("127.0.0.3", right)
    assert status == 200 and session["user"] == "mallory"
    status, who, _ = await hit(url, "127.0.0.3", "GET", "/api/v1/auth/whoami", session["token"])
    assert status == 200 and who["user"] == "mallory"
    # The attacker's pair stays locked, under every spelling the directory takes for
    # mallory (LDAP matches uid without regard to case or surrounding spaces).
    assert (await attempt("127.0.0.2", right))[0] == 429
    for spelling in ("MALLORY", " mallory ", "Mallory"):
        status, body, _ = await hit(
            url, "127.0.0.2", "POST", LOGIN, body={"username": spelling, "password": right}
        )
        assert (status, body["error"]["code"]) == (429, "login_locked"), (spelling, body)
    status, session, _ = await hit(
        url, "127.0.0.3", "POST", LOGIN, body={"username": "MALLORY", "password": right}
    )
    assert status == 200 and session["user"] == "mallory"  # the directory's spelling
