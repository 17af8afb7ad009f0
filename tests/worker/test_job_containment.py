"""Hostile jobs against the worker's real execution path (keeper, cgroups, files as the user).

Each test plays one attack or one containment promise as a real unprivileged
Linux user, through xce/worker/attempt/executor.py and staging.py with a real keeper launcher and
the host's real cgroup backend. What each test would have caught in the earlier worker is said in
its docstring.
"""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

from tests.worker.linux_users import LinuxUser, LinuxUsers, linux_users  # noqa: F401
from tests.worker.local_host import LocalHost, needs_cgroups
from xce.worker.attempt import accounts, jobcontrol, readers, recovery, running

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the worker's defences need root")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


async def _until(check, timeout: float = 10.0, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


# --- files: the worker never reads or writes as root what the job controls -------------------


async def test_outputs_are_read_as_the_user_so_cwd_etc_gives_no_shadow(
    host: LocalHost, user: LinuxUser
) -> None:
    """The old worker collected outputs as root from any `cwd`: /etc/shadow came back."""
    _, result, files = await host.run(
        {"command": "true", "cwd": "/etc", "outputs": ["shadow", "passwd"]}, user.name
    )
    assert result.exit_code == 0
    assert "shadow" not in files
    assert files.get("passwd", b"").startswith(b"root:")  # what the user can read is fine


async def test_a_cwd_the_user_cannot_enter_is_a_clear_launch_error(
    host: LocalHost, user: LinuxUser
) -> None:
    """The old worker checked `cwd` as root (is_dir), then chdir'd as root before exec."""
    with pytest.raises(
        running.LaunchError, match="cannot enter working directory /root: Permission denied"
    ):
        await host.run({"command": "true", "cwd": "/root"}, user.name)


async def test_job_directory_belongs_to_the_user_and_its_script_and_inputs_work(
    host: LocalHost, user: LinuxUser
) -> None:
    """The old job directories were 0700 root: a user's `#!` script could not even run."""
    script = "#!/bin/sh\nid -u\ncat data.csv\nls -ln data.csv | cut -d' ' -f3\n"
    job, result, files = await host.run(
        {"script": script, "command": None}, user.name, inputs={"data.csv": b"1,2\n"}
    )
    assert result.exit_code == 0, files.get("stderr")
    assert files["stdout"].decode().split() == [str(user.uid), "1,2", str(user.uid)]
    assert not job.job_dir.exists() or stat.S_IMODE(os.stat(job.job_dir).st_mode) == 0o700


async def test_symlinks_planted_in_the_job_tree_never_make_root_write_through_them(
    host: LocalHost, user: LinuxUser, root: Path
) -> None:
    """The old worker wrote `.xce/result` (and read `.xce/pid`) as root through whatever the
    job had put there: a symlink made it create or overwrite any file of the host."""
    victim = root / "victim"
    victim.write_text("untouched\n")
    os.chmod(victim, 0o644)
    missing = root / "created-by-root"
    command = (
        f'cd "$XCE_JOB_DIR/.xce" && for f in result result.tmp pid key report.json; '
        f"do ln -sf {victim} $f; done; ln -sf {missing} extra; "
        f"rm -f stdout; ln -s {victim} stdout; echo done"
    )
    job, result, files = await host.run({"command": command}, user.name)
    assert result.exit_code == 0
    assert victim.read_text() == "untouched\n"
    assert not missing.exists()
    assert files["stdout"] == b"done\n"  # read through the descriptor, not the planted link
    # The worker's own records are where the job cannot reach them.
    assert job.attempt_dir is not None
    assert stat.S_IMODE(os.stat(job.attempt_dir.parent).st_mode) == 0o700
    assert os.stat(job.attempt_dir).st_uid == 0


async def test_a_forged_pid_file_is_ignored_by_a_restarted_worker(
    host: LocalHost, user: LinuxUser, root: Path
) -> None:
    """The old worker, restarted, killed the process group named by the job's `.xce/pid`."""
    victim = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        job = await host.start(
            {"command": f'echo {victim.pid} > "$XCE_JOB_DIR/.xce/pid"; sleep 30'}, user.name
        )
        await asyncio.sleep(0.5)
        host.launcher.close()  # the worker process goes away; its keeper stays
        again = LocalHost(root, spool=host.spool.root, namespace=host.namespace)
        try:
            found = await recovery.recover(again.spool, again.backend)
            assert [(f.job.key, f.alive) for f in found] == [(job.key, True)]
            assert _alive(victim.pid)
            await jobcontrol.kill(found[0].job, "test over", 1.0)
        finally:
            again.close()
    finally:
        victim.kill()
        victim.wait()


async def test_an_output_directory_swapped_for_a_symlink_during_upload_stays_inside(
    host: LocalHost, user: LinuxUser, root: Path
) -> None:
    """The old worker resolved output paths, then opened them by path as root: a directory
    swapped for a link to /etc in between made it upload /etc's files."""
    command = (
        "mkdir -p out && head -c 20000000 /dev/zero > out/big && "
        "echo mine > out/small && mkdir -p decoy"
    )
    job = await host.start({"command": command, "outputs": ["out/*"]}, user.name)
    await host.wait(job)
    # Another process of the same user swaps out/ <-> a link to /etc while the worker uploads.
    swapper = subprocess.Popen(
        [
            "setpriv",
            f"--reuid={user.uid}",
            f"--regid={user.gid}",
            "--clear-groups",
            "sh",
            "-c",
            f"cd {job.work_dir} && while :; do mv out real && ln -s /etc out; "
            f"rm out && mv real out; done",
        ]
    )
    try:
        from tests.worker.local_host import Recorder
        from xce.worker.attempt import staging

        for _ in range(5):
            client = Recorder()
            await staging.upload_outputs(client, "h1", job)  # type: ignore[arg-type]
            for name, data in client.files.items():
                assert name in ("stdout", "stderr", "out/big", "out/small"), name
                if name == "out/small":
                    assert data == b"mine\n"
    finally:
        swapper.kill()
        swapper.wait()
        readers.close_readers(job)


# --- processes: the cgroup holds every process of the job ----------------------------------

ESCAPE = (
    "setsid sh -c 'while :; do date +%s.%N >> \"$0\"; sleep 0.05; done' {mark} & "
    "( ( sh -c 'while :; do sleep 0.05; done' & ) & ) ; sleep 60"
)


@needs_cgroups
async def test_children_that_leave_the_session_die_with_a_killed_job(
    host: LocalHost, user: LinuxUser, root: Path
) -> None:
    """The old worker killed the job's process group: a `setsid` child kept running."""
    mark = _mark(root, user, "escapee")
    job = await host.start({"command": ESCAPE.format(mark=mark)}, user.name)
    await _until(lambda: mark.exists() and mark.stat().st_size > 0, what="the escapee")
    assert job.cgroup is not None and len(job.cgroup.pids()) >= 4
    await jobcontrol.kill(job, "killed", 1.0)
    result = await host.wait(job)
    assert result.exit_signal in (signal.SIGTERM, signal.SIGKILL)
    size = mark.stat().st_size
    await asyncio.sleep(0.4)
    assert mark.stat().st_size == size, "a process of the job outlived it"
    assert not [pid for pid in _pids_of(user.uid)], "processes of the job's user remain"


@needs_cgroups
async def test_suspend_freezes_every_process_of_the_job_and_resume_thaws_them(
    host: LocalHost, user: LinuxUser, root: Path
) -> None:
    """The old worker sent SIGSTOP to the job's process group: a `setsid` child ran on."""
    mark = _mark(root, user, "escapee")
    job = await host.start({"command": ESCAPE.format(mark=mark)}, user.name)
    await _until(lambda: mark.exists() and mark.stat().st_size > 0, what="the escapee")
    await jobcontrol.suspend(job)
    await asyncio.sleep(0.2)
    size = mark.stat().st_size
    await asyncio.sleep(0.5)
    assert mark.stat().st_size == size, "a process ran while the job was suspended"
    await jobcontrol.resume(job)
    await _until(lambda: mark.stat().st_size > size, what="the job to run again")
    await jobcontrol.kill(job, "killed", 1.0)
    await host.wait(job)


def _mark(root: Path, user: LinuxUser, name: str) -> Path:
    """An empty file the job's user may append to (the test root is root's)."""
    path = root / name
    path.touch()
    os.chown(path, user.uid, user.gid)
    return path


def _pids_of(uid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid and _alive(int(entry)):
                    out.append(int(entry))
            except OSError:
                pass
    return out


@needs_cgroups
async def test_a_fork_bomb_is_held_by_the_pids_limit(host: LocalHost, user: LinuxUser) -> None:
    """The old worker had no limit on tasks: a fork bomb took the host."""
    bomb = (
        'python3 -c "import os,time\nn=0\nfor i in range(400):\n    try:\n        '
        "pid=os.fork()\n    except OSError:\n        break\n    if pid==0:\n        "
        'time.sleep(30); os._exit(0)\n    n+=1\nprint(n, flush=True)\ntime.sleep(30)"'
    )
    job = await host.start({"command": bomb}, user.name)
    await _until(lambda: os.fstat(job.readers["stdout"]).st_size > 0, 20, "the bomb to stop")
    assert job.cgroup is not None
    assert len(job.cgroup.pids()) <= 64
    forked = int(os.pread(job.readers["stdout"], 100, 0))
    assert forked < 64
    await jobcontrol.kill(job, "killed", 0.5)
    await host.wait(job)


@needs_cgroups
async def test_a_memory_hog_is_killed_at_its_limit_with_the_reason(
    host: LocalHost, user: LinuxUser
) -> None:
    """The old worker's --mem was bookkeeping: a job of 100 MB used 1 GB and ended DONE."""
    hog = "python3 -c \"b = bytearray(400 * 1024 * 1024); print('survived')\""
    _, result, files = await host.run({"command": hog, "memory_mb": 64}, user.name)
    assert result.exit_code != 0
    assert result.reason == "memory limit of 64 MB exceeded"
    assert b"survived" not in files["stdout"]


@needs_cgroups
async def test_memory_of_a_forked_job_is_its_real_peak_not_rss_summed(
    host: LocalHost, user: LinuxUser
) -> None:
    """The old worker summed RSS per process: three processes sharing 60 MB counted 180."""
    shared = (
        'python3 -c "import os,time\nb=bytearray(60*1024*1024)\nfor i in range(0,len(b),'
        '4096): b[i]=1\nos.fork(); os.fork(); time.sleep(1.5)"'
    )
    _, result, _ = await host.run({"command": shared, "memory_mb": 1000}, user.name)
    assert result.exit_code == 0
    peak_mb = result.usage.max_rss_bytes / 2**20
    assert 55 < peak_mb < 120, peak_mb


@needs_cgroups
async def test_a_one_slot_job_gets_one_cpu(host: LocalHost, user: LinuxUser) -> None:
    """The old worker's -n was bookkeeping: a one-slot job ran two busy processes at once."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs two cores to tell one from two")
    hog = "timeout 2 sh -c 'while :; do :; done' & timeout 2 sh -c 'while :; do :; done'; wait"
    _, result, _ = await host.run({"command": hog, "slots": 1}, user.name)
    cpu = result.usage.cpu_user_s + result.usage.cpu_system_s
    assert cpu < 1.4 * result.wall_time_s, (cpu, result.wall_time_s)


# --- who may run -------------------------------------------------------------------------


def test_system_accounts_and_root_are_refused_on_the_host() -> None:
    """The old worker ran `--user daemon` as uid 1 and took any account."""
    with pytest.raises(running.LaunchError, match="min_job_uid"):
        accounts.account_for("daemon", allow_root=True)
    with pytest.raises(running.LaunchError, match="allow_root_jobs"):
        accounts.account_for("root", allow_root=False)
    assert accounts.account_for("daemon", allow_root=False, min_uid=0).pw_name == "daemon"


# --- the fence: a keeper kills its job once the worker is out of touch -----------------------


@needs_cgroups
async def test_a_keeper_kills_its_job_when_the_worker_loses_contact(
    root: Path, user: LinuxUser
) -> None:
    """The old worker's jobs ran on after the worker died: requeued elsewhere, they ran
    twice."""
    host = LocalHost(root, fence_timeout_s=1.5)
    try:
        mark = _mark(root, user, "fenced")
        job = await host.start({"command": ESCAPE.format(mark=mark)}, user.name)
        host.touch()  # the last contact: the fence counts from here
        started = time.monotonic()
        host.launcher.close()  # the worker is gone: nobody records a contact any more
        result = await host.wait(job)
        assert 1.0 < time.monotonic() - started < 5.0
        assert "no contact with a controller" in result.reason and result.host_failure
        size = mark.stat().st_size
        await asyncio.sleep(0.3)
        assert mark.stat().st_size == size
    finally:
        host.close()


@needs_cgroups
async def test_a_keeper_keeps_its_job_while_the_worker_keeps_in_touch(
    root: Path, user: LinuxUser
) -> None:
    host = LocalHost(root, fence_timeout_s=1.0)
    try:
        job = await host.start({"command": "sleep 2.5; echo ok"}, user.name)
        for _ in range(12):
            host.touch()
            await asyncio.sleep(0.25)
        result = await host.wait(job)
        assert result.exit_code == 0 and not result.host_failure
    finally:
        host.close()


async def test_without_cgroups_a_job_runs_under_rlimits(root: Path, user: LinuxUser) -> None:
    """The "none" backend (a worker that cannot write cgroups, e.g. not root): the keeper
    applies the limits as rlimits of the leader; the job runs and is reported as usual."""
    host = LocalHost(root, mode="none")
    try:
        _, result, files = await host.run(
            {"command": "echo hi; ulimit -v", "memory_mb": 100}, user.name
        )
        assert result.exit_code == 0, files.get("stderr")
        assert files["stdout"] == b"hi\n102400\n"
    finally:
        host.close()
