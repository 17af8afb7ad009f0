"""The controller survives kill -9: nothing acknowledged is lost, running jobs carry on."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.integration.cluster import ADMIN_TOKEN, ApiFailure, Cluster
from xce.worker.tasks.installer import LAUNCHER_DIR

# 20 seeds in every run; `pytest -m slow` adds 100 more (or set XCE_CRASH_RUNS).
SEEDS = int(os.environ.get("XCE_CRASH_RUNS", "20"))
CRASH_SEEDS = [
    *range(SEEDS),
    *(pytest.param(s, marks=pytest.mark.slow) for s in range(SEEDS, SEEDS + 100)),
]


async def _burst(
    url: str, clients: int, stop_after: float, seed: int, first: asyncio.Event
) -> dict[str, dict]:
    """Submit from `clients` concurrent sessions; returns acknowledged id -> body. `first`
    is set at the first acknowledgement."""
    acked: dict[str, dict] = {}
    rng = random.Random(seed)
    deadline = asyncio.get_running_loop().time() + stop_after
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}

    async def client(n: int) -> None:
        async with aiohttp.ClientSession(headers=headers) as session:
            i = 0
            while asyncio.get_running_loop().time() < deadline:
                body = {
                    "command": f"echo {n}-{i}",
                    "name": f"c{n}-{i}",
                    "user": "crash",
                    "env": {"SEED": str(seed), "R": str(rng.random())},
                    "slots": 1 + i % 3,
                    "hold": True,
                }
                i += 1
                try:
                    async with session.post(f"{url}/api/v1/jobs", json=body) as resp:
                        if resp.status == 201:
                            acked[(await resp.json())["job_id"]] = body
                            first.set()
                except (aiohttp.ClientError, ConnectionError):
                    return  # the controller died under us: this request was not acknowledged

    await asyncio.gather(*(client(n) for n in range(clients)))
    return acked


def _check(cluster: Cluster, acked: dict[str, dict]) -> None:
    for job_id, body in acked.items():
        job = cluster.job(job_id)
        assert job["name"] == body["name"], job_id
        assert job["command"] == body["command"]
        assert job["env"] == body["env"]
        assert job["slots"] == body["slots"]
        assert job["state"] == "PSUSP"


@pytest.mark.parametrize("seed", CRASH_SEEDS)
def test_kill_9_during_a_submit_burst_loses_nothing_acknowledged(tmp_path: Path, seed: int) -> None:
    cluster = Cluster(tmp_path / "c", queues="")
    cluster.start_controller()
    try:
        rng = random.Random(seed)
        kill_at = 0.3 + rng.random() * 1.2
        assert cluster.controller is not None

        async def scenario() -> dict[str, dict]:
            first = asyncio.Event()
            task = asyncio.ensure_future(_burst(cluster.url, 16, 5.0, seed, first))
            # Into the burst, counted from its first acknowledgement: on a loaded machine
            # the clients may take longer than `kill_at` to get going at all.
            await asyncio.wait_for(first.wait(), 30)
            await asyncio.sleep(kill_at)
            cluster.controller.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
            return await task

        acked = asyncio.run(scenario())
        cluster.controller.wait(10)
        assert acked, "the burst got nothing acknowledged before the kill"
        cluster.start_controller()
        _check(cluster, acked)
        listed = cluster.get("/api/v1/jobs?limit=100000")
        assert set(acked) <= {j["id"] for j in listed["jobs"]}
        # Numbers are never reused after a crash.
        new = cluster.submit(command="true", hold=True)
        assert int(new) > max(int(j) for j in acked)
    finally:
        cluster.stop()


def test_running_job_survives_controller_kill_9(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "c")
    cluster.start_controller()
    cluster.start_worker("w1", slots=2)
    try:
        marker = tmp_path / "runs.log"
        job_id = cluster.submit(command=f"echo started >> {marker}; sleep 4; echo finished")
        cluster.wait_state(job_id, "RUN")
        cluster.wait_for(marker.exists, 10, "job started")
        cluster.controller.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
        cluster.controller.wait(10)  # type: ignore[union-attr]
        time.sleep(1)
        cluster.start_controller()
        assert cluster.job(job_id)["state"] == "RUN"
        job = cluster.wait_state(job_id, "DONE", "EXIT", timeout=30)
        assert job["state"] == "DONE", job
        assert cluster.download(job_id, "stdout") == b"finished\n"
        assert marker.read_text() == "started\n", "the job must not start twice"
        # The host never went unavailable: its worker re-reported after the restart.
        assert cluster.get("/api/v1/hosts/w1")["status"] == "online"
    finally:
        cluster.stop()


def test_admin_state_and_queues_survive_restart(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "c")
    cluster.start_controller()
    cluster.start_worker("w1")
    try:
        cluster.post("/api/v1/hosts/w1/close", {"reason": "bad dimm"})
        cluster.post("/api/v1/queues", {"name": "night", "priority": 5})
        cluster.post("/api/v1/queues/night/close")
        cluster.post("/api/v1/queues/normal/deactivate")
        cluster.controller.terminate()  # type: ignore[union-attr]  # clean: checkpoint
        cluster.controller.wait(20)  # type: ignore[union-attr]
        cluster.start_controller()
        host = cluster.get("/api/v1/hosts/w1")
        assert host["admin"] == "closed" and host["admin_reason"] == "bad dimm"
        night = cluster.get("/api/v1/queues/night")
        assert (night["open"], night["priority"]) == (False, 5)
        assert cluster.get("/api/v1/queues/normal")["active"] is False
        ckpts = list((tmp_path / "c" / "controller" / "checkpoints").glob("*.ckpt"))
        assert ckpts, "a clean shutdown writes a checkpoint"
    finally:
        cluster.stop()


def _xce(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xce", *args], text=True, capture_output=True, timeout=60
    )


def test_a_bit_flip_in_the_last_record_stops_start_until_repaired(tmp_path: Path) -> None:
    """The last record is complete but fails its checksum: it was acknowledged, so the
    controller refuses to start (it used to cut it as a torn write and lose the job)."""
    from xce.store.wal.framing import read_frames

    cluster = Cluster(tmp_path / "c")
    cluster.start_controller()
    ids = [cluster.submit(command="true", hold=True) for _ in range(5)]
    cluster.controller.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
    cluster.controller.wait(10)  # type: ignore[union-attr]
    state_dir = tmp_path / "c" / "controller"
    segment = sorted((state_dir / "wal").glob("*.seg"))[-1]
    data = bytearray(segment.read_bytes())
    last = list(read_frames(bytes(data)))[-1]
    data[last.offset + 30] ^= 0x10
    segment.write_bytes(bytes(data))
    cluster.controller = cluster._spawn(
        "controller", "controller", "-c", str(tmp_path / "c" / "controller.toml")
    )
    assert cluster.controller.wait(20) != 0
    log = (tmp_path / "c" / "controller.log").read_text()
    assert "not a torn write" in log and "xce admin wal-check" in log, log[-2000:]
    assert "wal-repair" in log and "--yes" in log and "Traceback" not in log
    repaired = _xce("admin", "wal-repair", "--state-dir", str(state_dir), "--yes")
    assert repaired.returncode == 0 and ".broken" in repaired.stdout, repaired.stdout
    assert (segment.parent / (segment.name + ".broken")).exists()
    cluster.start_controller()
    try:
        present = {j["id"] for j in cluster.get("/api/v1/jobs")["jobs"]}
        assert present == set(ids[:-1])  # the operator chose to drop the damaged record
    finally:
        cluster.stop()


def test_mid_log_corruption_stops_start_until_repaired(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "c")
    cluster.start_controller()
    ids = [cluster.submit(command="true", hold=True) for _ in range(30)]
    cluster.controller.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
    cluster.controller.wait(10)  # type: ignore[union-attr]
    state_dir = tmp_path / "c" / "controller"
    (segment,) = sorted((state_dir / "wal").glob("*.seg"))
    data = bytearray(segment.read_bytes())
    data[1000] ^= 0xFF  # inside an early record: later records are intact
    segment.write_bytes(bytes(data))

    check = _xce("admin", "wal-check", "--state-dir", str(state_dir))
    assert check.returncode == 1 and "DAMAGED" in check.stdout, check.stdout
    cluster.controller = cluster._spawn(
        "controller", "controller", "-c", str(tmp_path / "c" / "controller.toml")
    )
    assert cluster.controller.wait(20) != 0
    log = (tmp_path / "c" / "controller.log").read_text()
    assert "wal-repair" in log and "Traceback" not in log

    refused = _xce("admin", "wal-repair", "--state-dir", str(state_dir))
    assert refused.returncode != 0 and "--yes" in refused.stderr
    repaired = _xce("admin", "wal-repair", "--state-dir", str(state_dir), "--yes")
    assert repaired.returncode == 0 and "cut" in repaired.stdout, repaired.stdout
    assert _xce("admin", "wal-check", "--state-dir", str(state_dir)).returncode == 0
    cluster.start_controller()
    try:
        present = {j["id"] for j in cluster.get("/api/v1/jobs")["jobs"]}
        assert present < set(ids)  # what came after the damage was dropped, on request
    finally:
        cluster.stop()


def test_group_writable_state_dir_is_refused(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "c")
    state_dir = tmp_path / "c" / "controller"
    state_dir.mkdir(parents=True)
    state_dir.chmod(0o770)
    cluster.controller = None
    cluster.root.mkdir(parents=True, exist_ok=True)
    proc = cluster._spawn("controller", "controller", "-c", str(cluster._config()))
    assert proc.wait(20) != 0
    log = (tmp_path / "c" / "controller.log").read_text()
    # StrictModes (xce/auth/strict_modes.py) names the folder and the fix, before any write
    assert "refusing to start" in log and str(state_dir) in log and "chmod 750" in log
    assert "Traceback" not in log
    assert stat.S_IMODE(state_dir.stat().st_mode) == 0o770


def _ack_then_503(cluster: Cluster) -> tuple[list[str], Any]:
    acked: list[str] = []
    for _ in range(20000):
        try:
            acked.append(cluster.submit(command="x" * 4000, hold=True))
        except ApiFailure as exc:
            return acked, exc
    raise AssertionError("the disk never filled")


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_disk_full_refuses_writes_serves_reads_and_recovers(tmp_path: Path) -> None:
    root = tmp_path / "small"
    root.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=6m,mode=0700", "tmpfs", str(root)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        (root / "reserve").write_bytes(b"\0" * 3 * 1024 * 1024)
        cluster = Cluster(root / "c")  # 1 MiB WAL segments, as every test cluster
        cluster.start_controller()
        try:
            acked, error = _ack_then_503(cluster)
            assert error.status == 503, error.body
            assert "No space left on device" in error.body["error"]["message"]
            with pytest.raises(ApiFailure) as later:
                cluster.submit(command="refused", hold=True)
            assert later.value.status == 503
            assert "cannot write its log" in later.value.body["error"]["message"]
            assert len(acked) > 10
            # Reads still work.
            assert cluster.job(acked[0])["state"] == "PSUSP"
            assert cluster.get("/api/v1/jobs?limit=5")["total"] >= len(acked)
            # Free space: writes come back by themselves.
            (root / "reserve").unlink()
            deadline = time.monotonic() + 20
            while True:
                try:
                    acked.append(cluster.submit(command="after", hold=True))
                    break
                except ApiFailure as exc:
                    assert exc.status == 503
                    assert time.monotonic() < deadline, "writes did not come back"
                    time.sleep(0.5)
            cluster.controller.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
            cluster.controller.wait(10)  # type: ignore[union-attr]
            cluster.start_controller()
            present = {j["id"] for j in cluster.get("/api/v1/jobs?limit=100000")["jobs"]}
            assert set(acked) <= present
        finally:
            cluster.stop()
    finally:
        subprocess.run(["umount", "-l", str(root)], capture_output=True)


def test_a_restarted_worker_adopts_the_jobs_its_keepers_kept(tmp_path: Path) -> None:
    """kill -9 of the worker leaves its jobs to their keepers; the worker that starts again
    takes them back (never trusting a file of the job's tree) and reports their real end."""
    # A 3 s heartbeat window: the restarted worker must re-register before the host is
    # declared unavailable, even on a loaded machine.
    cluster = Cluster(tmp_path / "c", heartbeat=1.0)
    cluster.start_controller()
    cluster.start_worker("w1")
    try:
        marker = tmp_path / "runs.log"
        job_id = cluster.submit(command=f"echo run >> {marker}; sleep 4; echo out; exit 3")
        cluster.wait_state(job_id, "RUN")
        state = tmp_path / "c" / "w1" / "state"
        cluster.wait_for(lambda: any(state.glob("*/keeper.json")), 10, "the job's keeper")
        cluster.kill_worker("w1")  # SIGKILL: the job's keeper and the job carry on
        cluster.start_worker("w1")
        job = cluster.wait_state(job_id, "DONE", "EXIT", timeout=30)
        assert (job["state"], job["exit_code"], job["attempt"]) == ("EXIT", 3, 0), job
        assert cluster.download(job_id, "stdout") == b"out\n"
        assert marker.read_text() == "run\n"
    finally:
        cluster.stop()


def test_job_that_ends_while_controller_and_then_worker_are_down(tmp_path: Path) -> None:
    """The finish report and outputs survive on the worker's disk until delivered."""
    cluster = Cluster(tmp_path / "c")
    cluster.start_controller()
    cluster.start_worker("w1")
    try:
        marker = tmp_path / "runs.log"
        job_id = cluster.submit(command=f"echo run >> {marker}; sleep 1; echo out; exit 5")
        # Started on the worker, not only dispatched: a controller killed between its
        # dispatch (RUN) and the worker's next poll takes the assignment with it.
        cluster.wait_for(marker.exists, 30, "the job started on the worker")
        cluster.controller.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
        cluster.controller.wait(10)  # type: ignore[union-attr]
        state = tmp_path / "c" / "w1" / "state"
        cluster.wait_for(
            lambda: any(state.glob("*/report.json")), 40, "the worker saved its report"
        )
        cluster.kill_worker("w1")
        cluster.start_controller()
        cluster.start_worker("w1")
        job = cluster.wait_state(job_id, "DONE", "EXIT", timeout=30)
        assert (job["state"], job["exit_code"]) == ("EXIT", 5), job
        assert cluster.download(job_id, "stdout") == b"out\n"
        assert marker.read_text() == "run\n"
        cluster.wait_for(
            lambda: (
                not [p for p in (cluster.jobs_root / "w1").iterdir() if p.name != LAUNCHER_DIR]
                and not [p for p in state.iterdir() if p.is_dir()]
            ),
            10,
            "the attempt's directories removed once delivered",
        )
    finally:
        cluster.stop()
