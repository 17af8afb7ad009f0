"""Job files through a real controller and worker on 127.0.0.1, without shared storage:
digests end to end, resumed downloads, a file refused from its headers before its body
crosses, an output the worker could not return shown on its job, and transfers through a
slow, breaking link (tests/integration/throttle.py) that finish whole and verified.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import ADMIN_TOKEN, ApiFailure, Cluster
from tests.integration.throttle import ThrottleProxy

DATA = bytes(range(256)) * 4096  # 1 MiB


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def small(tmp_path: Path) -> Iterator[Cluster]:
    """A controller whose jobs may return 1 MB of outputs each, and one worker."""
    c = Cluster(tmp_path / "cluster")
    c.extra_controller = "max_job_outputs_mb = 1\nupload_quota_mb = 64\n"
    c.start_controller()
    c.start_worker("w1", slots=2)
    try:
        yield c
    finally:
        c.stop()


def _get(cluster: Cluster, path: str, headers: dict[str, str]) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(
        cluster.url + path, headers={"Authorization": f"Bearer {ADMIN_TOKEN}", **headers}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_inputs_and_outputs_keep_their_digest_and_resume(small: Cluster) -> None:
    upload = small.request(
        "POST", "/api/v1/uploads", raw=DATA, extra_headers={"X-XCE-SHA256": sha(DATA)}
    )
    assert upload["sha256"] == sha(DATA) and upload["size"] == len(DATA)
    damaged = bytearray(DATA)
    damaged[4096] ^= 0x80
    with pytest.raises(ApiFailure) as err:
        small.request(
            "POST", "/api/v1/uploads", raw=bytes(damaged), extra_headers={"X-XCE-SHA256": sha(DATA)}
        )
    assert err.value.status == 400 and err.value.body["error"]["code"] == "digest_mismatch"

    job_id = small.submit(
        command="cp in.bin out.bin", inputs={"in.bin": upload["upload_id"]}, outputs=["out.bin"]
    )
    job = small.wait_state(job_id, "DONE", "EXIT", timeout=60)
    assert job["state"] == "DONE", (job, small.log_text())
    files = {f["path"]: f for f in small.get(f"/api/v1/jobs/{job_id}/files")["files"]}
    assert files["out.bin"]["sha256"] == sha(DATA) and files["out.bin"]["size"] == len(DATA)

    path = f"/api/v1/jobs/{job_id}/files/out.bin"
    status, headers, first = _get(small, path, {"Range": "bytes=0-99999"})
    assert status == 206 and first == DATA[:100000]
    status, headers, rest = _get(small, path, {"Range": f"bytes={len(first)}-"})
    assert status == 206
    assert headers["Content-Range"] == f"bytes 100000-{len(DATA) - 1}/{len(DATA)}"
    assert sha(first + rest) == headers["X-XCE-SHA256"] == sha(DATA)
    status, headers, body = _get(small, path, {"Range": f"bytes={len(DATA)}-"})
    assert status == 416 and headers["Content-Range"] == f"bytes */{len(DATA)}"
    assert json.loads(body)["error"]["code"] == "range_not_satisfiable"


def test_an_empty_input_and_output_cross_whole(small: Cluster) -> None:
    """An empty file has no byte for `sendfile` to send (it refuses a count of 0): the
    worker still fetches it, the job runs, and its outputs (empty ones too) come back."""
    upload = small.request(
        "POST", "/api/v1/uploads", raw=b"", extra_headers={"X-XCE-SHA256": sha(b"")}
    )
    job_id = small.submit(
        command="cp in.bin out.bin", inputs={"in.bin": upload["upload_id"]}, outputs=["out.bin"]
    )
    job = small.wait_state(job_id, "DONE", "EXIT", timeout=60)
    assert job["state"] == "DONE" and not job.get("output_problems"), (job, small.log_text())
    files = {f["path"]: f for f in small.get(f"/api/v1/jobs/{job_id}/files")["files"]}
    assert files["out.bin"]["size"] == 0 and files["out.bin"]["sha256"] == sha(b"")
    assert small.download(job_id, "out.bin") == b""


def test_a_file_over_the_quota_is_refused_from_its_headers(small: Cluster) -> None:
    """Headers of a 1 PB body and not one byte of it: the answer can only come from them."""
    with socket.create_connection(("127.0.0.1", small.port), timeout=30) as conn:
        conn.sendall(
            (
                "POST /api/v1/uploads HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {ADMIN_TOKEN}\r\n"
                f"Content-Length: {2**50}\r\nExpect: 100-continue\r\n\r\n"
            ).encode()
        )
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += conn.recv(65536)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 413"), head  # never 100 Continue first
        length = int(
            next(
                line.split(b":", 1)[1]
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
        )
        while len(body) < length:
            body += conn.recv(65536)
    error = json.loads(body)["error"]
    assert error["code"] == "too_large"
    assert (
        error["message"].startswith("upload: 1024.0 TB") and "upload_quota_mb" in error["message"]
    )
    # The controller still serves, and kept nothing.
    assert small.get("/api/v1/uploads")["used_bytes"] == 0


def test_an_output_that_cannot_be_returned_shows_on_the_job(small: Cluster) -> None:
    job_id = small.submit(
        command="head -c 3000000 /dev/zero > big.dat && echo small > small.dat",
        outputs=["*.dat"],
    )
    job = small.wait_state(job_id, "DONE", "EXIT", timeout=60)
    problems = job.get("output_problems") or []
    assert any(p.startswith("big.dat") for p in problems), job
    assert "not returned" in job["reason"] and "big.dat" in job["reason"], job
    names = {f["path"] for f in small.get(f"/api/v1/jobs/{job_id}/files")["files"]}
    assert "small.dat" in names and "big.dat" not in names
    shown = _cli(small.url, small.root, "job", "show", job_id)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout.decode()
    listed = text[text.index("output_problems:") :].splitlines()[1]  # one per line below
    assert "big.dat" in listed and "max_job_outputs_mb" in listed, text


def _cli(
    url: str, home: Path, *args: str, stdout: int | None = subprocess.PIPE
) -> subprocess.CompletedProcess[bytes]:
    """The CLI as a user runs it, with a one-second idle timeout: every stall the proxy
    makes is longer than that."""
    env = {
        **os.environ,
        "XCE_TOKEN": ADMIN_TOKEN,
        "HOME": str(home),
        "PYTHONUNBUFFERED": "1",  # stdout is the raw file: short writes must be continued
        "XCE_TRANSFER_IDLE_TIMEOUT_S": "1",
    }
    env.pop("XCE_CLIENT_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "xce", *args, "--controller", url],
        stdout=stdout,
        stderr=subprocess.PIPE,
        env=env,
        timeout=300,
    )


def test_transfers_over_a_slow_breaking_link_finish_whole_and_verified(tmp_path: Path) -> None:
    """The worker and the CLI reach the controller through a proxy that relays 1 MiB/s per
    connection (a 4 MiB file takes longer than an idle timeout), cuts one stream, stalls another
    for longer than the idle timeout and flips a byte of a third: the job still gets its
    input whole, returns its output whole, other jobs finish meanwhile, and the CLI
    resumes its download to the same bytes, or refuses a damaged one and keeps nothing."""
    data = os.urandom(4 << 20)
    c = Cluster(tmp_path / "cluster")
    c.start_controller()
    proxy = ThrottleProxy(c.port, down_rate=1 << 20, up_rate=1 << 20)
    try:
        c.worker_controllers["w1"] = [proxy.url]
        # 3 s, not less: once every byte is out of the worker's socket, up to a few MiB may
        # still sit in the proxy's receive buffer, moving at 1 MiB/s while the worker, which
        # cannot see them, waits for the answer on the idle clock.
        c.start_worker("w1", slots=2, attrs="transfer_idle_timeout_s = 3")
        upload = c.request(
            "POST", "/api/v1/uploads", raw=data, extra_headers={"X-XCE-SHA256": sha(data)}
        )
        proxy.cut_after = 2 << 20  # the input's fetch breaks halfway and is resumed
        slow = c.submit(
            command="sha256sum in.bin > in.sum && cp in.bin out.bin",
            inputs={"in.bin": upload["upload_id"]},
            outputs=["out.bin", "in.sum"],
        )
        # A small job on the same worker while the input crawls: it does not wait for it.
        quick = c.submit(command="echo quick")
        c.wait_state(quick, "DONE", timeout=120)
        assert c.job(slow)["state"] != "DONE"
        job = c.wait_state(slow, "DONE", "EXIT", timeout=180)
        assert job["state"] == "DONE", (job, c.log_text())
        assert not job.get("output_problems"), job  # 4 MiB back up the same slow link
        assert proxy.cuts == 1
        assert c.download(slow, "in.sum").split()[0].decode() == sha(data)
        files = {f["path"]: f for f in c.get(f"/api/v1/jobs/{slow}/files")["files"]}
        assert files["out.bin"]["sha256"] == sha(data)
        assert c.download(quick, "stdout") == b"quick\n"

        # The CLI to a pipe: stalled once (longer than its idle timeout), then cut.
        proxy.pause_after, proxy.pause_s = 1 << 20, 3.0
        proxy.cut_after = 3 << 20
        got = _cli(proxy.url, tmp_path, "job", "output", slow, "--file", "out.bin")
        assert got.returncode == 0, got.stderr
        assert proxy.pauses == 1 and proxy.cuts == 2
        assert sha(got.stdout) == sha(data)

        # One flipped byte: an error naming the file, and nothing kept under --dest.
        dest = tmp_path / "dest"
        proxy.flip_at = 2 << 20
        got = _cli(proxy.url, tmp_path, "job", "output", slow, "--dest", str(dest))
        assert got.returncode == 1 and proxy.flips == 1
        assert b"out.bin" in got.stderr and b"SHA-256" in got.stderr, got.stderr
        assert sorted(p.name for p in dest.iterdir()) == ["in.sum"]
        # Again, undamaged: the declared outputs only (--all adds stdout and stderr).
        got = _cli(proxy.url, tmp_path, "job", "output", slow, "--dest", str(dest), "--quiet")
        assert got.returncode == 0, got.stderr
        assert sha((dest / "out.bin").read_bytes()) == sha(data)
        assert sorted(p.name for p in dest.iterdir()) == ["in.sum", "out.bin"]
        listing = _cli(c.url, tmp_path, "job", "output", slow, "--list")
        assert listing.returncode == 0, listing.stderr
        assert f"out.bin {len(data)} {sha(data)}".encode() in b" ".join(listing.stdout.split())
    finally:
        c.stop()
        proxy.close()


def _measured(url: str, home: Path, *args: str) -> subprocess.Popen[bytes]:
    """The CLI in a process that writes its own peak resident memory (KiB) last on stderr;
    stdout is a pipe. The CLI's exit status is the process's."""
    code = (
        "import resource, runpy, sys\n"
        "sys.argv = ['xce', *sys.argv[1:]]\n"
        "status = 0\n"
        "try:\n"
        "    runpy.run_module('xce', run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    status = exc.code if isinstance(exc.code, int) else 1\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
        "sys.exit(status)\n"
    )
    env = {**os.environ, "XCE_TOKEN": ADMIN_TOKEN, "HOME": str(home), "PYTHONUNBUFFERED": "1"}
    env.pop("XCE_CLIENT_CONFIG", None)
    return subprocess.Popen(
        # the controller before the command's own arguments (`--` may end the options)
        [sys.executable, "-c", code, *args[:2], "--controller", url, *args[2:]],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


def _peak(err: bytes) -> int:
    return int(err.split()[-1])


@pytest.mark.slow
def test_a_file_over_2_gib_goes_up_and_down_a_pipe_byte_exact_in_flat_memory(
    tmp_path: Path,
) -> None:
    """Past 2 GiB one raw write() returns a short count, and with PYTHONUNBUFFERED=1 stdout
    is that raw file: every byte must still arrive, with the same SHA-256, and neither the
    upload at submit nor the download to a pipe may hold the file in memory (each CLI's
    peak stays within 64 MiB of the same CLI's for an empty file)."""
    block = os.urandom(1 << 20)
    big = tmp_path / "big.bin"
    digest = hashlib.sha256()
    with big.open("wb") as f:
        for i in range(2100):  # 2.05 GiB, each MiB different
            piece = i.to_bytes(8, "big") + block[8:]
            digest.update(piece)
            f.write(piece)
    want = digest.hexdigest()
    c = Cluster(tmp_path / "cluster")
    # the quota counts the job's input and its output, 2.05 GiB each
    c.extra_controller = "max_job_outputs_mb = 4096\nupload_quota_mb = 8192\nmin_free_disk_mb = 0\n"
    c.start_controller()
    c.start_worker("w1", slots=1)
    try:
        empty = tmp_path / "empty.bin"
        empty.write_bytes(b"")
        peaks = {}
        for name, path in (("idle", empty), ("big", big)):
            proc = _measured(
                c.url,
                tmp_path,
                "job",
                "submit",
                "--stage-in",
                f"{path}:in.bin",
                "--stage-out",
                "out.bin",
                "--quiet",
                "--json",
                "--user",
                "root",  # the workers here run jobs as root (the admin token's user is no account)
                "--",
                "mv",
                "in.bin",
                "out.bin",
            )
            out, err = proc.communicate(timeout=600)
            assert proc.returncode == 0, err
            job_id = json.loads(out)["job_id"]
            job = c.wait_state(job_id, "DONE", "EXIT", timeout=600)
            assert job["state"] == "DONE" and not job.get("output_problems"), (job, c.log_text())
            peaks[f"upload {name}"] = _peak(err)

            proc = _measured(c.url, tmp_path, "job", "output", job_id, "-f", "out.bin")
            assert proc.stdout is not None
            got, size = hashlib.sha256(), 0
            while chunk := proc.stdout.read(1 << 20):
                got.update(chunk)
                size += len(chunk)
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
            peaks[f"download {name}"] = _peak(err)
        assert size == 2100 << 20 and got.hexdigest() == want
        for what in ("upload", "download"):
            grew = peaks[f"{what} big"] - peaks[f"{what} idle"]
            assert grew < 64 << 10, (what, peaks)
    finally:
        c.stop()
