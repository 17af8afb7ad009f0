"""HA keeps what a job needs, with real processes on
127.0.0.1: staged inputs, returned outputs, the users file and the audit log reach the
standby, so after a kill -9 of the primary a held job runs with its inputs, finished jobs'
outputs download and users added before the failover log in; a file that stayed on the
old primary is a 503 naming it (never an empty success) until that controller is back as
a standby and the new primary takes the file from it.
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import ApiFailure
from tests.integration.ha_cluster import HaCluster

TAKEOVER_BOUND_S = 15.0


class FilesCluster(HaCluster):
    """Each candidate has its own users file (`users<i>.toml`), as on separate machines."""

    def _candidate_config(self, i: int) -> Path:
        path = super()._candidate_config(i)
        path.write_text(path.read_text().replace('path = "users.toml"', f'path = "users{i}.toml"'))
        return path


@pytest.fixture
def ha(tmp_path: Path) -> Iterator[FilesCluster]:
    c = FilesCluster(tmp_path / "ha", candidates=2, failover_timeout=2.0, replication="sync")
    c.extra_auth = '[[auth.backend]]\ntype = "configfile"\npath = "users.toml"\n'
    try:
        c.start_pair()
        c.start_worker("w1", slots=2)
        yield c
    finally:
        c.stop()


def quoted(job: str) -> str:
    return urllib.parse.quote(job, safe="")


def test_after_a_failover_jobs_keep_inputs_outputs_users_and_audit(ha: FilesCluster) -> None:
    # Before the failover: a user, a held job with an input, a finished job with outputs.
    ha.post("/api/v1/users", {"user": "dora", "password": "dora-password-1"})
    # Sync mode: the answer came once the standby had the users file.
    assert "dora" in tomllib.loads((ha.root / "users1.toml").read_text())["users"]
    upload = ha.request("POST", "/api/v1/uploads", raw=b"3\n1\n2\n")["upload_id"]
    held = ha.submit(
        command="mkdir -p out && sort -n data/in.txt > out/sorted.txt",
        inputs={"data/in.txt": upload},
        outputs=["out/*.txt"],
        hold=True,
    )
    # ... and the submit once it had the input.
    standby_input = ha.root / "controller1" / "files" / "jobs" / held / "inputs" / "data" / "in.txt"
    assert standby_input.read_bytes() == b"3\n1\n2\n"
    # An upload whose submit comes only after the failover (the CLI uploads, then submits).
    later = ha.request("POST", "/api/v1/uploads", raw=b"staged\n")["upload_id"]
    done = ha.submit(
        command="echo before the failover > result.txt && echo said", outputs=["result.txt"]
    )
    assert ha.wait_state(done, "DONE", "EXIT")["state"] == "DONE"

    ha.kill_candidate(0)
    assert ha.wait_primary(TAKEOVER_BOUND_S, other_than=0) == 1

    # The user added before logs in on the new primary; the audit log says who added them.
    login = ha.request(
        "POST",
        "/api/v1/auth/login",
        {"username": "dora", "password": "dora-password-1"},
        token=None,
        retry_for=20,
    )
    assert login["token"]
    audit = ha.get("/api/v1/audit?action=user.add&limit=100")["records"]
    assert any(r["object"] == "user:dora" for r in audit), audit
    # The finished job's outputs download from the new primary.
    assert ha.download(done, "result.txt") == b"before the failover\n"
    assert ha.download(done, "stdout") == b"said\n"
    listed = {f["path"] for f in ha.get(f"/api/v1/jobs/{done}/files")["files"]}
    assert listed == {"stdout", "stderr", "result.txt"}
    # The held job runs on the new primary with the input it was submitted with.
    ha.request("POST", f"/api/v1/jobs/{quoted(held)}/resume", {}, retry_for=20)
    job = ha.wait_state(held, "DONE", "EXIT", timeout=60)
    assert job["state"] == "DONE", job
    assert ha.download(held, "out/sorted.txt") == b"1\n2\n3\n"
    after = ha.submit(command="cat in.txt", inputs={"in.txt": later})
    assert ha.wait_state(after, "DONE", "EXIT", timeout=60)["state"] == "DONE"
    assert ha.download(after, "stdout") == b"staged\n"

    # A file that stayed on the old primary (here: removed from the new one's store) is a
    # 503 naming the controller that has it, for the download and for the listing ...
    outputs = ha.root / "controller1" / "files" / "jobs" / done / "outputs" / done
    (outputs / "result.txt").unlink()
    (outputs / "stdout").unlink()
    for path in (
        f"/api/v1/jobs/{done}/files/result.txt",
        f"/api/v1/jobs/{done}/files",
        f"/api/v1/jobs/{done}/tail?stream=stdout",
    ):
        with pytest.raises(ApiFailure) as info:
            ha.get(path)
        assert info.value.status == 503
        error = info.value.body["error"]
        assert error["code"] == "file_not_replicated"
        assert ha.candidate_urls[0] in error["message"]
        assert "result.txt" in error["message"] or "stdout" in error["message"]
    # ... until that controller follows again: the new primary takes the file from it.
    ha.start_candidate(0, "standby")
    ha.wait_caught_up(0)

    def back() -> bool:
        try:
            return bool(ha.download(done, "result.txt") == b"before the failover\n")
        except ApiFailure:
            return False

    ha.wait_for(back, 20, "the file taken back from candidate 0")
    assert ha.download(done, "stdout") == b"said\n"
    assert ha.get(f"/api/v1/jobs/{done}/tail?stream=stdout")["data"] == "said\n"


def _input_metric(ha: FilesCluster, name: str) -> float:
    text = ha.get("/metrics").decode()
    found = re.search(rf'^{name}_total{{kind="input"}} (\S+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_a_new_primary_confirms_a_cached_array_input_with_a_304(ha: FilesCluster) -> None:
    """An array's first task fetches its input from the primary and the worker keeps the
    copy; the primary is killed with SIGKILL; the second task starts under the standby that
    took over, which must recognise the copy (the digest it holds for the replicated
    file) and answer 304: the input does not cross again, and the task reads all of it."""
    data = os.urandom(1 << 20)
    upload = ha.request("POST", "/api/v1/uploads", raw=data)["upload_id"]
    gate = ha.root / "gate"
    array = ha.submit(
        command=f"while [ ! -e {gate} ]; do sleep 0.1; done; sha256sum in.bin",
        inputs={"in.bin": upload},
        array="1-2%1",  # one at a time: the second starts after the failover
    )
    ha.wait_state(f"{array}[1]", "RUN", timeout=60)
    cache = ha.root / "w1" / "input-cache"
    digest = hashlib.sha256(data).hexdigest()
    ha.wait_for(lambda: [p.name for p in cache.iterdir()] == [digest], 30, "the cached copy")

    ha.kill_candidate(0)
    assert ha.wait_primary(TAKEOVER_BOUND_S, other_than=0) == 1
    assert _input_metric(ha, "xce_file_not_modified") == 0  # a new process: counts from 0
    gate.touch()
    for index in (1, 2):
        task = f"{array}[{index}]"
        job = ha.wait_state(task, "DONE", "EXIT", timeout=60)
        assert job["state"] == "DONE", (job, ha.log_text())
        assert ha.download(task, "stdout").split()[0].decode() == digest
    assert _input_metric(ha, "xce_file_not_modified") == 1
    assert _input_metric(ha, "xce_file_sent_bytes") == 0
