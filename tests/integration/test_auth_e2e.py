"""Identity end to end with real processes: users file, `xce login`, tenants, service tokens,
revocation and the audit log, all through the CLI against a real controller and workers."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import (
    ADMIN_TOKEN,
    WORKER_TOKEN,
    ApiFailure,
    Cluster,
    linux_users,
)
from xce.auth.backends.configfile import UsersFile

PASSWORDS = {
    "xcealice": "xcealice-pass-1",
    "xcebob": "xcebob-pass-12",
    "xcecarol": "xcecarol-pass-1",
}
GROUPS = {
    "xcealice": ["physics"],
    "xcebob": ["chemistry"],
    "xcecarol": ["physics", "physics-leads"],
}


class Shell:
    """One user's CLI: its own client config folder (so its own saved login token)."""

    def __init__(self, cluster: Cluster, name: str, token: str | None = None) -> None:
        home = cluster.root / "home" / name
        home.mkdir(parents=True)
        (home / "client.toml").write_text(f'controllers = ["{cluster.url}"]\n')
        self.env = {**os.environ, "XCE_CLIENT_CONFIG": str(home / "client.toml")}
        self.env.pop("XCE_CONTROLLERS", None)
        self.env.pop("XCE_TOKEN", None)
        if token:
            self.env["XCE_TOKEN"] = token
        self.token_file = home / "token"

    def __call__(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "xce", *args],
            env=self.env,
            text=True,
            capture_output=True,
            timeout=60,
            input=stdin,
        )

    def ok(self, *args: str, stdin: str | None = None) -> str:
        result = self(*args, stdin=stdin)
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result.stdout

    def refused(self, *args: str, needle: str, stdin: str | None = None) -> None:
        result = self(*args, stdin=stdin)
        assert result.returncode != 0, args
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0] and "Traceback" not in result.stderr, (
            args,
            result.stderr,
        )


def _login(cluster: Cluster, name: str) -> str:
    return cluster.post(
        "/api/v1/auth/login", {"username": name, "password": PASSWORDS[name]}, token=None
    )["token"]


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[Cluster]:
    if os.geteuid() != 0:
        pytest.skip("needs root: jobs run as the logged-in users' own accounts (useradd)")
    with linux_users(*PASSWORDS):
        yield from _secured_cluster(tmp_path)


def _secured_cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "cluster")
    c.root.mkdir(parents=True)
    users = UsersFile(c.root / "users.toml")
    for name in ("xcebob", "xcecarol"):
        users.add(name, PASSWORDS[name], tuple(GROUPS[name]))
    # The first through the CLI, as an admin bootstraps a cluster before it runs.
    Shell(c, "setup").ok(
        "user",
        "add",
        "xcealice",
        "--group",
        "physics",
        "--file",
        str(users.path),
        stdin=PASSWORDS["xcealice"] + "\n",
    )
    c.extra_auth = (
        '[auth.groups]\n"physics-leads" = ["group-admin"]\n'
        '[[auth.backend]]\ntype = "configfile"\npath = "users.toml"\n'
    )
    c.start_controller()
    try:
        yield c
    finally:
        c.stop()


def _view(cluster: Cluster, token: str, path: str) -> int:
    try:
        cluster.get(path, token=token)
    except ApiFailure as exc:
        return exc.status
    return 200


def test_tenants_through_the_cli(secured: Cluster) -> None:
    secured.start_worker("w1", slots=2)
    xcealice, xcebob = Shell(secured, "xcealice"), Shell(secured, "xcebob")
    xcebob.refused("login", "xcebob", needle="wrong user name or password", stdin="guess\n")
    xcebob.refused("job", "list", needle="needs a bearer token")
    out = xcealice.ok("login", "xcealice", stdin=PASSWORDS["xcealice"] + "\n")
    assert "Logged in as xcealice (roles user)" in out
    assert stat.S_IMODE(xcealice.token_file.stat().st_mode) == 0o600

    submitted = xcealice.ok("job", "submit", "--", "echo xcealice-secret; id -un")
    job = submitted.split("<")[1].split(">")[0]
    done = secured.wait_state(job, "DONE", "EXIT")
    assert done["state"] == "DONE" and done["user"] == "xcealice", done
    assert xcealice.ok("job", "output", job) == "xcealice-secret\nxcealice\n"

    # xcebob (chemistry) sees nothing of xcealice's job and cannot touch it.
    xcebob.ok("login", "xcebob", stdin=PASSWORDS["xcebob"] + "\n")
    xcebob.refused("job", "output", job, needle=f"xcebob may not view job {job}")
    xcebob.refused("job", "kill", job, needle=f"xcebob may not control job {job}")
    bob = _login(secured, "xcebob")
    for path in (
        f"/api/v1/jobs/{job}",
        f"/api/v1/jobs/{job}/files",
        f"/api/v1/jobs/{job}/files/stdout",
    ):
        assert _view(secured, bob, path) == 403, path
    assert secured.get("/api/v1/jobs", token=bob)["jobs"] == []
    # xcecarol leads physics: she sees xcealice's job and its output.
    carol = _login(secured, "xcecarol")
    assert secured.download(job, "stdout") == secured.get(
        f"/api/v1/jobs/{job}/files/stdout", token=carol
    )
    assert [j["id"] for j in secured.get("/api/v1/jobs", token=carol)["jobs"]] == [job]

    # An admin revokes xcealice: her saved token stops working; a new login works.
    admin = Shell(secured, "admin", ADMIN_TOKEN)
    admin.ok("token", "revoke", "xcealice")
    xcealice.refused("job", "list", needle="revoked")
    assert _view(secured, _login(secured, "xcealice"), "/api/v1/jobs") == 200
    assert "Logged out" in xcealice.ok("logout")
    assert not xcealice.token_file.exists()

    # Her own password: `xce user passwd` asks for the current one first (stdin: old, new).
    xcebob.refused(
        "user",
        "passwd",
        needle="current password (old_password) is wrong",
        stdin="a wrong guess\nbob-new-password\n",
    )
    before = xcebob.token_file.read_text() if xcebob.token_file.exists() else None
    out = xcebob.ok("user", "passwd", stdin=PASSWORDS["xcebob"] + "\nbob-new-password\n")
    assert "revoked" in out
    # The token from before the change is revoked; the CLI saved the fresh one it got.
    assert _view(secured, bob, "/api/v1/jobs") == 401
    assert xcebob.token_file.read_text() != before
    xcebob.ok("job", "list")
    bob = secured.post(
        "/api/v1/auth/login", {"username": "xcebob", "password": "bob-new-password"}, token=None
    )["token"]

    # The audit log has the logins, the refused kill and the revocation.
    audit = json.loads(admin.ok("admin", "audit", "--json", "--limit", "1000"))["records"]
    seen = {(r["user"], r["action"], r["object"], r["outcome"]) for r in audit}
    assert ("xcebob", "auth.login", "user:xcebob", "denied") in seen
    assert ("xcebob", "job.kill", f"job:{job}", "denied") in seen
    assert ("admin", "token.revoke", "user:xcealice", "ok") in seen
    assert ("xcebob", "user.passwd", "user:xcebob", "denied") in seen
    assert _view(secured, bob, "/api/v1/audit") == 403


def test_service_tokens_for_workers(secured: Cluster) -> None:
    admin = Shell(secured, "admin", ADMIN_TOKEN)
    token_file = secured.root / "w2.token"
    admin.ok("token", "create", "--service", "worker", "w2", "--out", str(token_file))
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    secured.worker_tokens["w2"] = token_file.read_text().strip()
    secured.start_worker("w2", slots=1)  # waits until w2 is online
    # A worker token runs the worker protocol but cannot submit or read jobs.
    for token in (WORKER_TOKEN, secured.worker_tokens["w2"]):
        with pytest.raises(ApiFailure) as info:
            secured.post("/api/v1/jobs", {"command": "true"}, token=token)
        assert info.value.status == 403 and "job:submit" in info.value.body["error"]["message"]
    # Revoking the service token cuts the worker off.
    secured.post("/api/v1/auth/revoke", {"user": "w2"})
    assert _view(secured, secured.worker_tokens["w2"], "/api/v1/cluster") == 401
    # Users cannot mint service tokens.
    with pytest.raises(ApiFailure) as info:
        secured.post(
            "/api/v1/auth/tokens",
            {"name": "w3", "role": "worker"},
            token=_login(secured, "xcealice"),
        )
    assert "xcealice (role user) may not use user:admin" in info.value.body["error"]["message"]
