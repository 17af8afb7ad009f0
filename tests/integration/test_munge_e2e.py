"""MUNGE logins end to end: real munged daemons (the controller's node and a login node with
the same key, another site's key), a real controller with the munge backend, and users who
never type a password.

- A real Linux user, from the system Python as that user, makes a credential on the "login
  node" and trades it for a token; the job they submit with it runs as their uid; the same
  credential a second time, another site's credential and garbage are refused, and garbage
  from one address backs off there only (the guard's login backoff).
- The CLI with `auth = "munge"` gets, saves and renews its token by itself: after the token
  is revoked (401) it logs in again silently; a saved token of another user name is never
  replaced; `xce login --munge` logs in on request.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.auth_backends.munged import Munged, munge_available, new_key
from tests.integration.cluster import ADMIN_TOKEN, ISSUER, Cluster
from tests.integration.test_guard import hit
from tests.worker.linux_users import LinuxUsers, linux_users  # noqa: F401
from xce.auth import munge

pytestmark = pytest.mark.skipif(
    not munge_available() or os.geteuid() != 0 or not Path("/usr/bin/python3").exists(),
    reason="needs munged and libmunge, root (users, root's credentials) and the system Python",
)

REPO = Path(__file__).resolve().parents[2]
GUARD = """
[guard]
login_free_failures = 2
login_backoff_s = 30
login_max_lockout_s = 60
"""

# Run by the system Python as the test's user: the standard library and a copy of
# xce/auth/munge.py (stdlib only) in a folder that user may read.
USER_SCRIPT = r"""
import json, sys, urllib.error, urllib.request
sys.path.insert(0, sys.argv[3])
import munge
url, sock = sys.argv[1:3]

def call(method, path, body=None, token=None):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")

_, info = call("GET", "/api/v1/auth/munge")
credential = munge.login_credential(info["audience"], sock)
status, session = call("POST", "/api/v1/auth/munge", {"credential": credential})
out = {"login": status, "session": session}
if status == 200:
    token = session["token"]
    out["replay"] = call("POST", "/api/v1/auth/munge", {"credential": credential})[0]
    out["whoami"] = call("GET", "/api/v1/auth/whoami", token=token)[1]
    out["job"] = call("POST", "/api/v1/jobs", {"command": "id -u"}, token=token)
print(json.dumps(out))
"""


@dataclass
class World:
    cluster: Cluster
    controller: Munged
    login: Munged
    stranger: Munged
    lib: Path  # the folder with the user-readable copy of xce/auth/munge.py

    @property
    def audit(self) -> Path:
        return self.cluster.root / "controller" / "audit.log"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    keys = tmp_path_factory.mktemp("munge-keys")
    key, other = new_key(keys), new_key(keys)
    daemons: list[Munged] = []
    lib = Path(tempfile.mkdtemp(prefix="xce-munge-lib-", dir="/tmp"))
    lib.chmod(0o755)
    shutil.copyfile(REPO / "xce" / "auth" / "munge.py", lib / "munge.py")
    (lib / "munge.py").chmod(0o644)
    cluster = None
    try:
        for k in (key, key, other):
            daemons.append(Munged(k))
        cluster = Cluster(tmp_path_factory.mktemp("munge") / "cluster")
        # root's own credentials log the CLI tests in (they run as root): allow_root.
        cluster.extra_auth = (
            f'[[auth.backend]]\ntype = "munge"\nsocket = "{daemons[0].socket}"\n'
            "allow_root = true\ntoken_ttl_s = 600\n"
        )
        cluster.role_sections["controller"] = GUARD
        cluster.start_controller()
        cluster.start_worker("w1", slots=4)
        yield World(cluster, *daemons, lib)
    finally:
        if cluster is not None:
            cluster.stop()
        for daemon in daemons:
            daemon.stop()
        shutil.rmtree(lib, ignore_errors=True)


def _munge_audit(world: World, outcome: str) -> list[dict[str, object]]:
    entries = [json.loads(x) for x in world.audit.read_text().splitlines()]
    return [e for e in entries if e["action"] == "auth.munge" and e["outcome"] == outcome]


def test_a_user_logs_in_with_munge_and_their_job_runs_as_them(
    world: World,
    linux_users: LinuxUsers,
) -> None:
    user = linux_users.user()
    done = subprocess.run(
        ["/usr/bin/python3", "-c", USER_SCRIPT, world.cluster.url, world.login.socket, world.lib],
        user=user.uid,
        group=user.gid,
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "HOME": user.home},
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["login"] == 200, out
    assert out["session"]["user"] == user.name and out["session"]["roles"] == ["user"]
    assert 590 <= out["session"]["expires_at"] - time.time() <= 601  # token_ttl_s
    assert out["replay"] == 401
    assert out["whoami"]["user"] == user.name
    status, body = out["job"]
    assert status == 201, body
    job = world.cluster.wait_state(body["job_id"], "DONE", "EXIT", timeout=60)
    assert job["user"] == user.name and job["state"] == "DONE", job
    assert world.cluster.download(body["job_id"], "stdout").decode().strip() == str(user.uid)
    assert any(e["object"] == f"user:{user.name}" for e in _munge_audit(world, "ok"))


def test_other_keys_and_garbage_are_refused_and_back_off_per_address(world: World) -> None:
    url = world.cluster.url
    stranger = munge.login_credential("xce", world.stranger.socket)

    async def attempts() -> list[tuple[int, dict]]:
        out = []
        for credential in (stranger, "MUNGE:AAAA:", stranger):
            status, body, _ = await hit(
                url, "127.0.0.2", "POST", "/api/v1/auth/munge", body={"credential": credential}
            )
            out.append((status, body))
        return out

    first, second, third = asyncio.run(attempts())
    assert first[0] == 401 and "another key" in first[1]["error"]["message"]
    assert second[0] == 401, second
    assert third[0] == 429 and third[1]["error"]["code"] == "login_locked"
    # another address is not held back by the first one's failures
    good = munge.login_credential("xce", world.login.socket)
    status, body, _ = asyncio.run(
        hit(url, "127.0.0.3", "POST", "/api/v1/auth/munge", body={"credential": good})
    )
    assert status == 200 and body["user"] == "root", body
    denied = _munge_audit(world, "denied")
    assert any("another key" in str(e["detail"]) for e in denied)


@pytest.fixture
def cli_env(world: World, tmp_path: Path) -> dict[str, str]:
    """A CLI environment of its own: client.toml saying auth = "munge", no site file, no
    token, munged of the login node."""
    client = tmp_path / "xce" / "client.toml"
    client.parent.mkdir()
    client.write_text(f'controllers = ["{world.cluster.url}"]\nauth = "munge"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("XCE_")}
    env.update(
        XCE_CLIENT_CONFIG=str(client),
        XCE_SITE_CONFIG="",
        XCE_SOCKET=str(tmp_path / "no-local-socket"),
        XCE_MUNGE_SOCKET=world.login.socket,
    )
    return env


def xce(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xce", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_cli_gets_saves_and_renews_its_token_by_itself(
    world: World, cli_env: dict[str, str]
) -> None:
    saved = Path(cli_env["XCE_CLIENT_CONFIG"]).parent / "token"
    logins = len(_munge_audit(world, "ok"))
    first = xce(cli_env, "whoami", "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["user"] == "root"
    assert saved.stat().st_mode & 0o777 == 0o600
    token = saved.read_text().strip()
    assert len(_munge_audit(world, "ok")) == logins + 1
    # the saved token serves the next commands: no new MUNGE login
    assert xce(cli_env, "whoami").returncode == 0
    assert saved.read_text().strip() == token
    assert len(_munge_audit(world, "ok")) == logins + 1
    # revoked: the controller refuses it (401), and the CLI logs in again once, silently
    time.sleep(1.1)  # revocation is "tokens issued before now", to the second
    world.cluster.post("/api/v1/auth/revoke", {"user": "root"}, token=ADMIN_TOKEN)
    time.sleep(1.1)
    renewed = xce(cli_env, "whoami")
    assert renewed.returncode == 0, renewed.stderr
    assert renewed.stderr == ""
    assert saved.read_text().strip() != token
    assert len(_munge_audit(world, "ok")) == logins + 2


def test_a_saved_token_of_another_name_is_not_replaced(
    world: World, cli_env: dict[str, str]
) -> None:
    saved = Path(cli_env["XCE_CLIENT_CONFIG"]).parent / "token"
    expired = ISSUER.issue("alice", (), ("user",), now=time.time() - 6 * 3600)[0]
    saved.write_text(expired + "\n")
    done = xce(cli_env, "whoami")
    assert done.returncode != 0
    assert "not this account's" in done.stderr and done.stderr.count("\n") == 1
    assert saved.read_text().strip() == expired


def test_xce_login_munge_and_the_settings_that_opt_out(
    world: World, cli_env: dict[str, str]
) -> None:
    done = xce(cli_env, "login", "--munge")
    assert done.returncode == 0, done.stderr
    assert "Logged in as root" in done.stdout
    # XCE_TOKEN is used as it is: a refused one is not renewed by MUNGE
    refused = xce({**cli_env, "XCE_TOKEN": "not-a-token"}, "whoami")
    assert refused.returncode != 0 and "not a valid token" in refused.stderr
    bogus = xce({**cli_env, "XCE_AUTH": "mungee"}, "whoami")
    assert bogus.returncode != 0 and "must be one of munge, token" in bogus.stderr
    # no munged on this "node": the command says why it has no token, in one line
    gone = xce({**cli_env, "XCE_MUNGE_SOCKET": "/nonexistent/munge.socket"}, "logout")
    assert gone.returncode == 0
    down = xce({**cli_env, "XCE_MUNGE_SOCKET": "/nonexistent/munge.socket"}, "whoami")
    assert down.returncode != 0, down.stdout
    assert "MUNGE login failed" in down.stderr and down.stderr.count("\n") == 1
