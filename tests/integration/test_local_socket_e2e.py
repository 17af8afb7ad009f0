"""Local users are who the kernel says they are: the controller's Unix socket.

Two real Linux users with no XCE account, token or password submit and list through the
controller's local socket (from the system Python, as those users: the kernel's
SO_PEERCRED names them); each sees only their own jobs, the jobs run as their uids, and
neither can submit as the other. Root on the socket is an admin. A socket directory that
another user could write makes the controller refuse to start.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster
from tests.worker.linux_users import LinuxUser, LinuxUsers, linux_users  # noqa: F401
from xce.client.light import LightClient
from xce.core.errors import XceError
from xce.server import local_socket

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not Path("/usr/bin/python3").exists(),
    reason="needs root (users) and the system Python (run as those users)",
)

# Run by the system Python as the test's user: only the standard library, no token.
CLIENT = r"""
import http.client, json, socket, sys
class Unix(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=20)
        self.path_ = path
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path_)
path, method, url, body = sys.argv[1:5]
conn = Unix(path)
conn.request(method, url, body=body or None, headers={"Content-Type": "application/json"})
resp = conn.getresponse()
print(json.dumps({"status": resp.status, "body": json.loads(resp.read() or b"null")}))
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    folder = Path(tempfile.mkdtemp(prefix="xce-sock-", dir="/tmp"))
    os.chmod(folder, 0o755)  # root's, written by no one else; users may reach the socket
    c = Cluster(tmp_path / "cluster")
    c.socket = folder / "xce.sock"  # type: ignore[attr-defined]
    c.extra_controller = f'local_socket = "{c.socket}"'  # type: ignore[attr-defined]
    c.start_controller()
    c.start_worker("w1", slots=4)
    try:
        yield c
    finally:
        c.stop()
        shutil.rmtree(folder, ignore_errors=True)


def _as(user: LinuxUser, sock: Path, method: str, url: str, body: object = None) -> dict:
    done = subprocess.run(
        [
            "/usr/bin/python3",
            "-c",
            CLIENT,
            str(sock),
            method,
            url,
            json.dumps(body) if body else "",
        ],
        user=user.uid,
        group=user.gid,
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "HOME": user.home},
    )
    assert done.returncode == 0, done.stderr
    answer: dict = json.loads(done.stdout)
    return answer


def test_local_users_submit_and_see_only_their_own_jobs(
    cluster: Cluster, linux_users: LinuxUsers
) -> None:
    sock: Path = cluster.socket  # type: ignore[attr-defined]
    assert sock.stat().st_mode & 0o777 == 0o666
    alice, bob = linux_users.user(), linux_users.user()
    ids = {}
    for user in (alice, bob):
        answer = _as(user, sock, "POST", "/api/v1/jobs", {"command": "id -u"})
        assert answer["status"] == 201, answer
        ids[user.name] = answer["body"]["job_id"]
    for user in (alice, bob):
        job = cluster.wait_state(ids[user.name], "DONE", "EXIT", timeout=60)
        assert job["user"] == user.name and job["state"] == "DONE", job
        assert cluster.download(ids[user.name], "stdout").decode().strip() == str(user.uid)
        listed = _as(user, sock, "GET", "/api/v1/jobs")
        assert listed["status"] == 200
        assert {j["id"] for j in listed["body"]["jobs"]} == {ids[user.name]}
        me = _as(user, sock, "GET", "/api/v1/auth/whoami")["body"]
        assert (me["user"], me["roles"]) == (user.name, ["user"])
    # a process cannot claim another uid: the body's user is checked against the kernel's
    claim = _as(alice, sock, "POST", "/api/v1/jobs", {"command": "true", "user": bob.name})
    assert claim["status"] == 403, claim
    other = _as(alice, sock, "GET", f"/api/v1/jobs/{ids[bob.name]}")
    assert other["status"] in (403, 404), other


def test_root_on_the_socket_is_an_admin_and_a_token_still_wins(cluster: Cluster) -> None:
    sock: Path = cluster.socket  # type: ignore[attr-defined]
    with LightClient([f"unix:{sock}"]) as client:
        me = client.request("GET", "/api/v1/auth/whoami")
        assert me["user"] == "root" and me["roles"] == ["admin"]
        assert client.hosts()[0]["name"] == "w1"
    from tests.integration.cluster import USER_TOKEN

    with LightClient([f"unix:{sock}"], token=USER_TOKEN) as client:
        assert client.request("GET", "/api/v1/auth/whoami")["user"] == "alice"


def test_a_socket_directory_others_could_write_is_refused(tmp_path: Path) -> None:
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    with pytest.raises(XceError, match="writable by others"):
        local_socket.prepare(open_dir / "xce.sock")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    with pytest.raises(XceError, match="owned by uid 65534"):
        local_socket.prepare(theirs / "xce.sock")
    squatted = tmp_path / "ok"
    squatted.mkdir(mode=0o755)
    (squatted / "xce.sock").write_text("not a socket")
    with pytest.raises(XceError, match="is not a socket"):
        local_socket.prepare(squatted / "xce.sock")
