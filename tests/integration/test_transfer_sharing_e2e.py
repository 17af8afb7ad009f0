"""Job files that never hold up the rest, through a real controller and worker on 127.0.0.1:
an array's input crosses once per host (and each task still owns its copy), heartbeats and
other jobs' finish reports go on while an input crawls through a slow link
(tests/integration/throttle.py), and a download resumes to the same SHA-256 across a
controller killed with SIGKILL and started again on its state directory, as does a
worker's input fetch.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.integration.cluster import ADMIN_TOKEN, Cluster, linux_users
from tests.integration.throttle import ThrottleProxy

USER = "xcearray1"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _metric(c: Cluster, name: str, kind: str) -> float:
    text = c.get("/metrics").decode()
    found = re.search(rf'^{name}_total{{kind="{kind}"}} (\S+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def _cli(url: str, home: Path, *args: str, **kw: object) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "XCE_TOKEN": ADMIN_TOKEN, "HOME": str(home), "PYTHONUNBUFFERED": "1"}
    env.pop("XCE_CLIENT_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "xce", *args[:2], "--controller", url, *args[2:]],
        capture_output=True,
        env=env,
        timeout=300,
        **kw,  # type: ignore[arg-type]
    )


def test_an_array_input_crosses_once_per_host_and_each_task_owns_its_copy(
    tmp_path: Path,
) -> None:
    """Four tasks of one array on a host with two slots, submitted by the CLI with one
    --stage-in: the file goes up once and down to the worker once (the controller's own
    byte counters say so), and every task reads the whole file as its user. Each task then
    overwrites its copy: the tasks of the second wave must still read the original, so the
    host's cached copy is out of the jobs' reach and never linked into their trees."""
    data = os.urandom(3 << 20)
    local = tmp_path / "shared.bin"
    local.write_bytes(data)
    c = Cluster(tmp_path / "cluster")
    c.start_controller()
    c.start_worker("w1", slots=2)
    try:
        with linux_users(USER):
            got = _cli(
                c.url,
                tmp_path,
                "job",
                "submit",
                "--array",
                "1-4",
                "--stage-in",
                f"{local}:in.bin",
                "--stage-out",
                "in.sum",
                "--quiet",
                "--json",
                "--user",
                USER,
                "--",
                "sh",
                "-c",
                "sha256sum in.bin > in.sum && stat -c %U in.bin >> in.sum"
                " && echo spoiled > in.bin && chmod 666 in.bin",
            )
            assert got.returncode == 0, got.stderr
            array = json.loads(got.stdout)["job_id"]

            def ended() -> bool:
                counts = c.job(array)["array"]["counts"]
                return bool(counts["DONE"] + counts["EXIT"] == 4)

            c.wait_for(ended, 120, "four tasks")
            for index in range(1, 5):
                task = f"{array}[{index}]"
                job = c.job(task)
                assert job["state"] == "DONE", (job, c.log_text())
                digest, owner = c.download(task, "in.sum").decode().split("\n")[:2]
                assert digest.split()[0] == sha(data), task
                assert owner == USER, task
        assert _metric(c, "xce_file_received_bytes", "upload") == len(data)
        assert _metric(c, "xce_file_sent_bytes", "input") == len(data)
        assert _metric(c, "xce_file_not_modified", "input") == 3
        cache = tmp_path / "cluster" / "w1" / "input-cache"
        assert cache.stat().st_mode & 0o777 == 0o700 and cache.stat().st_uid == 0
        assert [p.name for p in cache.iterdir()] == [sha(data)]
    finally:
        c.stop()


def test_heartbeats_and_finish_reports_go_on_while_an_input_crawls(tmp_path: Path) -> None:
    """The worker reaches the controller through a link of 512 KiB/s per connection, and a
    job's 8 MiB input takes many heartbeat intervals to cross it. While that input has not
    arrived, the worker's heartbeats keep coming (counted in what the proxy relayed), a
    second job starts, ends and is reported DONE, and a kill ends the first job at once."""
    data = os.urandom(8 << 20)
    c = Cluster(tmp_path / "cluster")
    c.start_controller()
    proxy = ThrottleProxy(c.port, down_rate=512 << 10)
    try:
        c.worker_controllers["w1"] = [proxy.url]
        c.start_worker("w1", slots=2)
        upload = c.request(
            "POST", "/api/v1/uploads", raw=data, extra_headers={"X-XCE-SHA256": sha(data)}
        )
        slow = c.submit(command="sha256sum in.bin > in.sum", inputs={"in.bin": upload["upload_id"]})
        c.wait_for(lambda: proxy.down_bytes > 1 << 20, 60, "the input under way")
        beats = proxy.captured().count(b"/heartbeat HTTP/1.1")
        quick = c.submit(command="echo quick")
        c.wait_state(quick, "DONE", timeout=60)
        c.wait_for(
            lambda: proxy.captured().count(b"/heartbeat HTTP/1.1") >= beats + 3,
            60,
            "three more heartbeats",
        )
        assert proxy.down_bytes < len(data), "the input arrived before the test could see"
        assert c.job(slow)["state"] != "DONE"
        assert c.download(quick, "stdout") == b"quick\n"
        # Killed while its input crawls: it ends now, not once the input is in.
        c.control(slow, "kill")
        job = c.wait_state(slow, "EXIT", timeout=60)
        assert proxy.down_bytes < len(data), "the kill waited for the input"
        assert "killed" in job["reason"], job
    finally:
        c.stop()
        proxy.close()


def test_a_download_resumes_to_the_same_digest_across_a_controller_killed_mid_file(
    tmp_path: Path,
) -> None:
    """The CLI downloads a 6 MiB output through a 1 MiB/s link; one MiB in, the
    controller is killed with SIGKILL and started again on the same state directory. The
    CLI resumes where it stopped (a `Range` from that byte, sent after the restart) and the
    file it writes has the output's SHA-256."""
    data = os.urandom(6 << 20)
    c = Cluster(tmp_path / "cluster")
    c.extra_controller = "max_job_outputs_mb = 64\n"
    c.start_controller()
    c.start_worker("w1", slots=1)
    proxy = ThrottleProxy(c.port, down_rate=1 << 20)
    try:
        upload = c.request(
            "POST", "/api/v1/uploads", raw=data, extra_headers={"X-XCE-SHA256": sha(data)}
        )
        job_id = c.submit(
            command="cp in.bin out.bin", inputs={"in.bin": upload["upload_id"]}, outputs=["out.bin"]
        )
        job = c.wait_state(job_id, "DONE", "EXIT", timeout=60)
        assert job["state"] == "DONE", (job, c.log_text())
        dest = tmp_path / "dest"
        env = {
            **os.environ,
            "XCE_TOKEN": ADMIN_TOKEN,
            "HOME": str(tmp_path),
            "XCE_TRANSFER_IDLE_TIMEOUT_S": "5",
        }
        env.pop("XCE_CLIENT_CONFIG", None)
        cli = subprocess.Popen(
            [
                *(sys.executable, "-m", "xce", "job", "output", "--controller", proxy.url),
                *(job_id, "--dest", str(dest), "--quiet"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        try:
            c.wait_for(lambda: proxy.down_bytes > 1 << 20, 60, "1 MiB of the download")
            assert c.controller is not None
            c.controller.send_signal(signal.SIGKILL)
            c.controller.wait(10)
            before = len(proxy.captured())
            c.start_controller()
            _, err = cli.communicate(timeout=240)
        finally:
            if cli.poll() is None:
                cli.kill()
        assert cli.returncode == 0, err
        assert sha((dest / "out.bin").read_bytes()) == sha(data)
        after = proxy.captured()[before:]
        resumed = [int(n) for n in re.findall(rb"\r\nRange: bytes=(\d+)-", after)]
        assert resumed and resumed[0] >= 1 << 20, after[:2000]
        assert proxy.down_bytes < 2 * len(data)  # not fetched again from its start
    finally:
        c.stop()
        proxy.close()


def test_an_input_fetch_resumes_across_a_controller_killed_mid_file(tmp_path: Path) -> None:
    """The worker fetches a 6 MiB input through a 1 MiB/s link; one MiB in, the controller
    is killed with SIGKILL and started again on its state directory. The worker resumes
    the fetch with a `Range` from where it stopped, and the job reads the whole file."""
    data = os.urandom(6 << 20)
    c = Cluster(tmp_path / "cluster")
    c.start_controller()
    proxy = ThrottleProxy(c.port, down_rate=1 << 20)
    try:
        c.worker_controllers["w1"] = [proxy.url]
        c.start_worker("w1", slots=1, attrs="transfer_idle_timeout_s = 5")
        upload = c.request(
            "POST", "/api/v1/uploads", raw=data, extra_headers={"X-XCE-SHA256": sha(data)}
        )
        job_id = c.submit(command="sha256sum in.bin", inputs={"in.bin": upload["upload_id"]})
        c.wait_for(lambda: proxy.down_bytes > 1 << 20, 60, "1 MiB of the input")
        assert c.controller is not None
        c.controller.send_signal(signal.SIGKILL)
        c.controller.wait(10)
        before = len(proxy.captured())
        c.start_controller()
        job = c.wait_state(job_id, "DONE", "EXIT", timeout=120)
        assert job["state"] == "DONE", (job, c.log_text())
        assert c.download(job_id, "stdout").split()[0].decode() == sha(data)
        after = proxy.captured()[before:]
        resumed = [int(n) for n in re.findall(rb"\r\nRange: bytes=(\d+)-", after)]
        assert resumed and resumed[0] >= 1 << 20, after[:2000]
    finally:
        c.stop()
        proxy.close()
