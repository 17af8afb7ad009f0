"""Security review of job execution: the attacks a hostile review found.

Each test plays one attack as a real unprivileged Linux user through the worker's real code
(tests/worker/local_host.py: executor, keeper launcher, cgroups, staging). Every one of them
worked against the first version of the keeper and cgroup worker; the comment above each
says what was wrong and the test fails if that comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import resource
import secrets
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.worker.assignments import assignment
from tests.worker.linux_users import LinuxUser, LinuxUsers, linux_users  # noqa: F401
from tests.worker.local_host import LocalHost, Recorder, needs_cgroups, searchable_dir
from xce.worker.attempt import (
    accounts,
    executor,
    jobcontrol,
    readers,
    recovery,
    running,
    spool,
    staging,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the worker's defences need root")


x86_64 = pytest.mark.skipif(os.uname().machine != "x86_64", reason="keyctl numbers are x86_64")


def _as_user(user: LinuxUser, command: str) -> subprocess.CompletedProcess[str]:
    """A local process of `user` (not a job): what a user logged in on the worker can do."""
    return subprocess.run(
        [
            "setpriv",
            f"--reuid={user.uid}",
            f"--regid={user.gid}",
            "--clear-groups",
            "sh",
            "-c",
            command,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )


def _bytes_read() -> int:
    """What this process has read through read(2) and friends so far (`rchar`): the worker's
    file work on a job's tree runs in threads of this process."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


# --- 1. the job inherits root's session keyring ----------------------------------------------

_SYS_ADD_KEY, _SYS_KEYCTL = 248, 250
_KEYCTL_JOIN_SESSION_KEYRING, _KEY_SPEC_SESSION_KEYRING = 1, -3

# The job: find a "user" key by description in its session keyring and print its payload.
_READ_KEY = (
    'python3 -c "import ctypes,sys\n'
    "l=ctypes.CDLL(None,use_errno=True); l.syscall.restype=ctypes.c_long\n"
    "k=l.syscall(250,10,ctypes.c_long(-3),b'user',sys.argv[1].encode(),0)\n"
    "b=ctypes.create_string_buffer(256); n=l.syscall(250,11,ctypes.c_long(k),b,256)\n"
    "print('key', k, b.raw[:max(n,0)].decode(errors='replace'))\" {desc}"
)


def _host_with_root_key(root: Path, desc: str, secret: bytes) -> LocalHost:
    """A worker (its keeper launcher) started from a root session keyring holding a key, as a
    worker under systemd (KeyringMode=private) or started from an admin's login has one.
    Done in a thread of its own, so the test process keeps its own session keyring."""
    made: list[LocalHost] = []
    failed: list[BaseException] = []

    def start() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.syscall.restype = ctypes.c_long
            if libc.syscall(_SYS_KEYCTL, _KEYCTL_JOIN_SESSION_KEYRING, None) < 0:
                raise OSError(ctypes.get_errno(), "keyctl(JOIN_SESSION_KEYRING)")
            if (
                libc.syscall(
                    _SYS_ADD_KEY,
                    b"user",
                    desc.encode(),
                    secret,
                    len(secret),
                    ctypes.c_long(_KEY_SPEC_SESSION_KEYRING),
                )
                < 0
            ):
                raise OSError(ctypes.get_errno(), "add_key")
            made.append(LocalHost(root, pids_limit=64))
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    if failed:
        pytest.skip(f"no session keyrings here: {failed[0]}")
    return made[0]


@x86_64
async def test_a_job_reads_a_key_from_the_workers_session_keyring(
    root: Path, user: LinuxUser
) -> None:
    desc, secret = f"xce-review-{secrets.token_hex(4)}", f"S3CRET-{secrets.token_hex(8)}"
    host = _host_with_root_key(root, desc, secret.encode())
    try:
        _, result, files = await host.run({"command": _READ_KEY.format(desc=desc)}, user.name)
        assert result.exit_code == 0, files.get("stderr")
        assert secret.encode() not in files["stdout"], "the job read root's key"
    finally:
        host.close()


@x86_64
async def test_a_job_reads_a_key_another_users_job_stored(
    root: Path, linux_users: LinuxUsers
) -> None:
    alice, mallory = linux_users.user(), linux_users.user()
    desc, secret = f"xce-review-{secrets.token_hex(4)}", f"alice-{secrets.token_hex(8)}"
    host = _host_with_root_key(root, "xce-review-root", b"unused")
    store = (
        'python3 -c "import ctypes\n'
        "l=ctypes.CDLL(None,use_errno=True); l.syscall.restype=ctypes.c_long\n"
        f"print(l.syscall(248,b'user',b'{desc}',b'{secret}',{len(secret)},"
        'ctypes.c_long(-3)))"; sleep 20'
    )
    victim = await host.start({"command": store}, alice.name)
    try:
        deadline = time.monotonic() + 10
        while os.fstat(victim.readers["stdout"]).st_size == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        _, _, files = await host.run({"command": _READ_KEY.format(desc=desc)}, mallory.name)
        assert secret.encode() not in files["stdout"], "mallory's job read alice's key"
    finally:
        await jobcontrol.kill(victim, "test over", 0.5)
        await host.wait(victim)
        readers.close_readers(victim)
        host.close()


# --- 2. outputs from cwd=/proc/self are the root worker's own /proc files --------------------


async def test_outputs_from_proc_self_are_the_workers_own_memory_map(
    host: LocalHost, user: LinuxUser
) -> None:
    _, result, files = await host.run(
        {"command": "true", "cwd": "/proc/self", "outputs": ["maps", "limits", "status"]}, user.name
    )
    assert result.exit_code == 0
    # The user cannot read /proc/<worker pid>/maps itself:
    denied = _as_user(user, f"cat /proc/{os.getpid()}/maps")
    assert denied.returncode != 0 and not denied.stdout
    leaked = sorted(n for n in files if n not in ("stdout", "stderr"))
    assert not leaked, f"the worker uploaded its own {leaked[:5]}"


# --- 3. descriptor exhaustion: one job's outputs make the worker drop another's --------------


@needs_cgroups
async def test_outputs_of_one_job_use_up_descriptors_and_another_job_is_lost(
    host: LocalHost, linux_users: LinuxUsers
) -> None:
    victim_user, attacker = linux_users.user(), linux_users.user()
    victim = await host.start({"command": "sleep 4; echo fine"}, victim_user.name)
    many = "python3 -c \"[open(f'o{i}', 'w').close() for i in range(1500)]\""
    bomb = await host.start({"command": many, "outputs": ["o*"]}, attacker.name)
    await host.wait(bomb)
    # Scaled down: a worker with LimitNOFILE=65536 (xce-worker.service) and seven such jobs
    # of 10,000 outputs ending together is the same situation.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = max(int(fd) for fd in os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 1000, hard))
    held: list[tuple[str, int]] = []
    busy: list[int] = []
    try:
        held = await staging.collect_outputs(bomb)  # what upload_outputs holds while uploading
        # open_outputs stops at EMFILE and frees its walk's few descriptors again; the other
        # uploads and connections of a busy worker take those.
        with contextlib.suppress(OSError):
            while True:
                busy.append(os.open("/dev/null", os.O_RDONLY))
        waiting = asyncio.ensure_future(executor.wait(victim, 0.1, 1.0))
        await asyncio.sleep(6)  # the victim ends (4 s) while no descriptor is free
        assert not waiting.done(), "the worker decided about the job without its result"
    finally:
        for fd in [fd for _, fd in held] + busy:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        readers.close_readers(bomb)
    result = await asyncio.wait_for(waiting, 30)  # the uploads are done: descriptors again
    still_running = bool(victim.cgroup and victim.cgroup.pids())
    try:
        assert result.exit_code == 0, (result.reason, "still running" if still_running else "")
    finally:
        await jobcontrol.kill(victim, "test over", 0.5)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(executor.wait(victim, 0.1, 1.0), 10)
        readers.close_readers(victim)


# --- 4. accounts that pass min_job_uid but are system accounts --------------------------------


def test_nobody_is_refused_as_a_job_user() -> None:
    try:
        account = accounts.account_for("nobody", allow_root=False)
    except running.LaunchError:
        return
    raise AssertionError(f"a job may run as nobody (uid {account.pw_uid if account else '?'})")


# --- 5. what a job leaves in /dev/shm outlives it, outside its memory limit -------------------


@needs_cgroups
async def test_a_jobs_dev_shm_file_outlives_the_job(host: LocalHost, user: LinuxUser) -> None:
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    leftover = Path(f"/dev/shm/xce-review-{secrets.token_hex(4)}")
    try:
        job, result, _ = await host.run(
            {"command": f"head -c 4000000 /dev/zero > {leftover}", "memory_mb": 64}, user.name
        )
        assert result.exit_code == 0
        await spool.remove_job_dir(job.job_dir, job.creds)
        assert not leftover.exists(), "the job's 4 MB in /dev/shm outlived it"
    finally:
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()


# --- 5b. /tmp is the host's: other users see, plant and outlive the job's temporary files ----


@pytest.fixture
def off_tmp_host() -> Iterator[LocalHost]:
    """A host with `private_tmp = true` whose job directories are not under /tmp (a job
    whose directories are there keeps the host's /tmp, or it could not reach them)."""
    root = searchable_dir("xce-jobs-", "/var/tmp")
    made = LocalHost(root, pids_limit=64, private_tmp=True)
    yield made
    made.close()
    shutil.rmtree(root, ignore_errors=True)


async def test_a_job_shares_tmp_with_other_users_and_leaves_its_files_there(
    off_tmp_host: LocalHost, linux_users: LinuxUsers, tmp_path: Path
) -> None:
    """The job's /tmp was the host's: another user on the node read the job's temporary
    files while it ran, planted a link under a name the job would use (the classic /tmp
    race), and what the job left stayed on the host's disk after it. Now each attempt has a
    /tmp of its own, removed after it without following what the job left in it."""
    owner, other = linux_users.user(), linux_users.user()
    marker = f"xce-review-{secrets.token_hex(4)}"
    planted = Path("/tmp") / f"{marker}-planted"
    planted.symlink_to("/etc/hostname")  # another user's trap, waiting on the host's /tmp
    victim = tmp_path / "victim"  # root's directory, outside the job's reach
    victim.mkdir()
    (victim / "keep").write_text("root's")
    ready = searchable_dir("xce-ready-", "/var/tmp") / "ready"
    os.chown(ready.parent, owner.uid, owner.gid)
    try:
        host = off_tmp_host
        job = await host.start(
            {
                "command": (
                    f"echo secret > /tmp/{marker}; ln -s {victim} /tmp/{marker}-link; "
                    f"if test -e {planted}; then touch $XCE_JOB_DIR/planted-seen; fi; "
                    f"touch {ready}; sleep 30"
                )
            },
            owner.name,
        )
        deadline = time.monotonic() + 20
        while not ready.exists():
            assert time.monotonic() < deadline, "the job never got going"
            await asyncio.sleep(0.05)
        seen = _as_user(other, f"cat /tmp/{marker}")
        assert seen.returncode != 0 and "secret" not in seen.stdout, (
            "another user read the job's file in /tmp"
        )
        assert not Path(f"/tmp/{marker}").exists(), "the job's /tmp file is on the host's /tmp"
        jobcontrol.kill_group_now(job)
        result = await host.wait(job)
        assert result.exit_code != 0 or result.exit_signal
        assert (victim / "keep").read_text() == "root's", "removing /tmp followed the job's link"
        assert not (job.job_dir / "planted-seen").exists(), (
            "the job saw a name another user planted in /tmp"
        )
    finally:
        for left in (planted, Path(f"/tmp/{marker}"), Path(f"/tmp/{marker}-link")):
            with contextlib.suppress(FileNotFoundError):
                left.unlink()
        shutil.rmtree(ready.parent, ignore_errors=True)


# --- 5c. second review: a deep tree in the private /tmp killed the keeper ------------------

_UNFREEZABLE = """import ctypes, os, threading, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
child = os.fork()
if child == 0:
    threading.Thread(target=lambda: (libc.ptrace(0, 0, None, None), time.sleep(3600))).start()
    time.sleep(0.3)
    os.execv("/bin/true", ["/bin/true"])
time.sleep(0.6)
open(os.environ["MARK"], "w").write(str(child))
libc.ptrace(16, child, None, None)
time.sleep(3600)
"""


async def test_a_deep_tree_left_in_the_private_tmp_loses_the_result_and_stops_the_worker(
    off_tmp_host: LocalHost, user: LinuxUser
) -> None:
    """The first private /tmp was a directory of the attempt's state that the keeper removed
    with shutil.rmtree: 1100 nested directories made it raise RecursionError, so the job's
    end was never recorded, its cgroup stayed, and the worker's own clean-up and restart
    (recover) failed on the same tree. /tmp is now a tmpfs of the job's mount namespace."""
    job, result, _ = await off_tmp_host.run(
        {
            "command": (
                "cd /tmp; i=0; while [ $i -lt 1100 ];"
                " do mkdir d && cd d || exit 9; i=$((i+1)); done;"
                " exit 7"
            ),
            "memory_mb": 256,
        },
        user.name,
    )
    assert result.exit_code == 7, result.reason
    assert job.attempt_dir is not None and not any(p.is_dir() for p in job.attempt_dir.iterdir()), (
        "the job left a tree in the state dir"
    )
    assert not off_tmp_host.backend.existing(), "the attempt's cgroup was left behind"
    assert await recovery.recover(off_tmp_host.spool, off_tmp_host.backend) is not None


async def test_a_private_tmp_is_no_larger_than_the_jobs_memory(
    off_tmp_host: LocalHost, user: LinuxUser
) -> None:
    """On disk, a job's /tmp could fill the worker's state file system (no job could start
    after); the tmpfs is capped at the job's memory limit and charged to it."""
    job, result, _ = await off_tmp_host.run(
        {
            "command": (
                "df -k /tmp | tail -1 > $XCE_JOB_DIR/df; "
                "head -c 100000000 /dev/zero > /tmp/big; echo $? > $XCE_JOB_DIR/rc"
            ),
            "memory_mb": 64,
        },
        user.name,
    )
    size_kb = int((job.job_dir / "df").read_text().split()[1])
    assert size_kb <= 64 * 1024, f"/tmp of a 64 MB job holds {size_kb} KB"
    rc = (job.job_dir / "rc").read_text().strip() if (job.job_dir / "rc").exists() else ""
    assert rc not in ("", "0") or result.reason, "100 MB went into the job's 64 MB /tmp"


@needs_cgroups
async def test_suspending_a_job_that_cannot_be_frozen_stalls_the_workers_loop(
    host: LocalHost, user: LinuxUser
) -> None:
    """A task in an exec that waits for a ptrace attach (cred_guard_mutex) is in a killable
    sleep the freezer cannot freeze: the worker's freeze waited 2 s on its event loop per
    job, enough with a few such jobs stopped at once to miss heartbeats and fence every job
    of the host. Freezing now runs in a thread; the loop keeps ticking."""
    mark = searchable_dir("xce-mark-") / "child"
    os.chown(mark.parent, user.uid, user.gid)
    script = mark.parent / "unfreezable.py"
    script.write_text(_UNFREEZABLE)
    os.chmod(script, 0o644)
    try:
        job = await host.start({"command": f"MARK={mark} exec python3 {script}"}, user.name)
        deadline = time.monotonic() + 20
        while not mark.exists() or not mark.read_text():
            assert time.monotonic() < deadline, "the job never got going"
            await asyncio.sleep(0.05)
        child = int(mark.read_text())
        await asyncio.sleep(0.3)
        with open(f"/proc/{child}/stat") as f:
            assert f.read().rsplit(")", 1)[1].split()[0] == "D", "no unfreezable task"
        gaps: list[float] = []

        async def tick() -> None:
            last = time.monotonic()
            while True:
                await asyncio.sleep(0.02)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        ticker = asyncio.create_task(tick())
        started = time.monotonic()
        await jobcontrol.suspend(job)
        waited = time.monotonic() - started
        ticker.cancel()
        assert waited >= 1.0, f"the freeze did not have to wait ({waited:.2f} s)"
        assert max(gaps) < 0.5, f"the worker's loop stalled {max(gaps):.2f} s in a suspend"
        await jobcontrol.kill(job, "killed", 1.0)
        result = await host.wait(job)
        assert result.exit_signal or result.exit_code
    finally:
        shutil.rmtree(mark.parent, ignore_errors=True)


# --- 5d. second review: sparse outputs of terabytes went to the controller in full ---------


async def test_sparse_terabyte_outputs_are_not_sent(host: LocalHost, user: LinuxUser) -> None:
    """A job made its stdout and an output 15 TB sparse files (12 KB on disk): the worker
    read and sent every byte and the controller wrote them, filling its disk. The worker now
    skips what is over the controller's limits per file and per job, without reading it."""
    job = await host.start(
        {
            "command": (
                "truncate -s 15T $XCE_JOB_DIR/.xce/stdout; truncate -s 15T big.out; "
                "head -c 3000 /dev/zero > small.out; head -c 3000 /dev/zero > second.out"
            ),
            "outputs": ["*.out"],
        },
        user.name,
    )
    await host.wait(job)
    client = Recorder()
    before = _bytes_read()
    limits = staging.OutputLimits(file_bytes=1 << 20, job_bytes=5000)
    outcome = await staging.upload_outputs(client, "h1", job, limits)  # type: ignore[arg-type]
    names = outcome.returned
    readers.close_readers(job)
    assert _bytes_read() - before < 64 << 20, "the worker read the sparse files"
    assert "stdout" not in names and "big.out" not in names
    assert "stderr" in names and len([n for n in names if n.endswith(".out")]) == 1, names
    assert sum(len(v) for v in client.files.values()) <= 5000
    # and the report names each output left behind, with why (output_problems)
    refused = {p.split(":", 1)[0] for p in outcome.problems}
    assert {"stdout", "big.out"} <= refused, outcome.problems
    assert len(refused - {"stdout", "big.out"}) == 1, outcome.problems  # over the job's cap


async def test_a_sparse_stdout_copied_to_its_o_file_costs_no_reading(
    host: LocalHost, user: LinuxUser
) -> None:
    """`-o FILE` copies the job's stdout when it ends (as its user): a 15 TB sparse stdout
    was read and written in full, holding a worker thread for hours; holes stay holes."""
    job = await host.start(
        {
            "command": "echo first; truncate -s 15T $XCE_JOB_DIR/.xce/stdout",
            "number": 1,
            "stdout_file": "out.%J",
        },
        user.name,
    )
    await host.wait(job)
    before = _bytes_read()
    await staging.copy_std_files(job)
    readers.close_readers(job)
    assert _bytes_read() - before < 64 << 20, "the copy read the holes"
    copied = job.work_dir / "out.1"
    st = copied.stat()
    assert st.st_size == 15 << 40 and st.st_blocks * 512 < 1 << 20 and st.st_uid == user.uid
    with copied.open("rb") as f:
        assert f.read(6) == b"first\n"


# --- 6. a jobs_dir the worker did not make is trusted as is ----------------------------------


async def test_a_jobs_dir_pre_made_by_a_user_lets_that_user_forge_anothers_outputs(
    linux_users: LinuxUsers,
) -> None:
    """Spool.make kept an existing jobs_dir whoever owned it: its owner could swap other
    users' job directories and forge their outputs. Now the worker refuses to start."""
    attacker = linux_users.user()
    scratch = Path(searchable_dir("xce-review-scratch-"))  # like /scratch or /tmp: 1777
    os.chmod(scratch, 0o1777)
    try:
        made = _as_user(attacker, f"mkdir -m 0755 {scratch}/jobs")
        assert made.returncode == 0, made.stderr
        with pytest.raises(spool.SpoolError, match=f"belongs to uid {attacker.uid}"):
            LocalHost(scratch, pids_limit=64)  # jobs_dir = <scratch>/jobs
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


async def test_a_spool_dir_pre_made_by_a_user_is_refused(linux_users: LinuxUsers) -> None:
    """The spool holds root's state and the host's input cache by path: a spool_dir its
    owner could swap (or plant a cache directory in) must stop the worker, like jobs_dir."""
    attacker = linux_users.user()
    scratch = Path(searchable_dir("xce-review-scratch-"))
    os.chmod(scratch, 0o1777)
    try:
        made = _as_user(attacker, f"mkdir -m 0755 {scratch}/spool")
        assert made.returncode == 0, made.stderr
        with pytest.raises(spool.SpoolError, match=f"belongs to uid {attacker.uid}.*spool_dir"):
            spool.Spool(scratch / "spool", scratch / "jobs").make()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# --- 7. one output name the controller cannot store blocks every finish report of the host ----


def test_an_unstorable_output_name_blocks_every_later_report_of_the_host(
    tmp_path: Path, linux_users: LinuxUsers
) -> None:
    from tests.integration.cluster import Cluster

    attacker, victim = linux_users.user(), linux_users.user()
    cluster = Cluster(tmp_path / "cluster")
    try:
        cluster.start_controller()
        cluster.start_worker("w1", slots=2)
        # `stdout` is uploaded first as a file, then `stdout/x` needs it to be a directory:
        # the controller's FileStore fails (FileExistsError -> 500), the worker retries later.
        # Once a 500 retried first and for ever; now the clash is a 409 for that one file,
        # and every report goes through on its own schedule.
        poison = cluster.submit(
            user=attacker.name, command="mkdir stdout && echo x > stdout/x", outputs=["stdout/*"]
        )
        assert cluster.wait_state(poison, "DONE", "EXIT", timeout=20)["state"] == "DONE"
        other = cluster.submit(user=victim.name, command="echo hello")
        cluster.wait_state(other, "DONE", "EXIT", timeout=15)
    finally:
        cluster.stop()


# --- 8. a job that uses up the inodes of the spool's file system fences every job -------------


@needs_cgroups
async def test_a_job_that_uses_up_inodes_stops_the_fence_contact_of_the_host(
    linux_users: LinuxUsers,
) -> None:
    victim, attacker = linux_users.user(), linux_users.user()
    fs = searchable_dir("xce-review-fs-")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "nr_inodes=300,size=16m,mode=0711", "xce-review", str(fs)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        shutil.rmtree(fs, ignore_errors=True)
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr}")
    host = None
    try:
        host = LocalHost(fs, pids_limit=64)  # spool (state) and jobs_dir on one file system
        other = await host.start({"command": "sleep 2; echo fine"}, victim.name)
        fill = "i=0; while touch f$i 2>/dev/null; do i=$((i+1)); done"
        await host.run({"command": fill}, attacker.name)
        try:
            host.touch()  # the worker reached a controller: fence.record(...)
        except OSError as exc:
            raise AssertionError(f"the controller contact cannot be recorded: {exc}") from None
        result = await host.wait(other)  # its keeper cannot write result.json either
        readers.close_readers(other)
        assert result.exit_code == 0, result.reason
    finally:
        if host is not None:
            host.close()
        subprocess.run(["umount", "-l", str(fs)], check=False)
        shutil.rmtree(fs, ignore_errors=True)


# --- 9. a requeued attempt that ignores SIGTERM runs beside the next attempt ------------------


@needs_cgroups
def test_a_requeued_job_that_ignores_sigterm_runs_twice_at_once(
    tmp_path: Path, user: LinuxUser
) -> None:
    from tests.integration.cluster import Cluster

    marks = searchable_dir("xce-review-marks-")
    mark = marks / "ticks"
    mark.touch()
    os.chown(mark, user.uid, user.gid)
    cluster = Cluster(tmp_path / "cluster")  # kill_grace_s = 2
    try:
        cluster.start_controller()
        cluster.start_worker("w1", slots=2)
        job = cluster.submit(
            user=user.name,
            command=(
                "trap '' TERM; while :; do echo \"$XCE_ATTEMPT $(date +%s.%N)\" >> "
                + str(mark)
                + "; sleep 0.05; done"
            ),
        )
        cluster.wait_for(lambda: mark.read_text().startswith("0 "), 15, "attempt 0 to tick")
        cluster.control(job, "requeue")
        cluster.wait_for(lambda: "\n1 " in mark.read_text(), 15, "attempt 1 to tick")
        time.sleep(1.0)
        ticks = [line.split() for line in mark.read_text().splitlines() if line.count(" ") == 1]
        first_of_1 = min(float(t) for a, t in ticks if a == "1")
        overlap = [t for a, t in ticks if a == "0" and float(t) > first_of_1]
        assert not overlap, f"attempt 0 ticked {len(overlap)} times after attempt 1 started"
    finally:
        cluster.stop()  # kills what the worker's cgroups still hold
        shutil.rmtree(marks, ignore_errors=True)


# --- 10. with the default configuration a job has no memory and no task limit -----------------


def test_a_job_without_mem_on_a_default_worker_is_limited() -> None:
    from xce.config.settings import WorkerSettings

    limits = executor.limits_for(assignment(slots=1, memory_mb=0), WorkerSettings().pids_limit)
    assert limits.pids is not None and limits.memory_bytes is not None, limits


# --- 11. an output file name that is not UTF-8 makes the attempt unreportable ----------------


async def test_an_output_named_with_invalid_utf8_does_not_break_the_report(
    host: LocalHost, user: LinuxUser
) -> None:
    from xce.client import ApiError

    job = await host.start(
        {"command": "echo x > \"$(printf 'a\\377')\"", "outputs": ["a*"]}, user.name
    )
    assert (await host.wait(job)).exit_code == 0
    try:
        await staging.upload_outputs(Recorder(), "h1", job)  # type: ignore[arg-type]
    except (ApiError, OSError):
        pass  # what agent._report handles
    except Exception as exc:
        raise AssertionError(f"the finish report is lost: {exc!r}") from None
    finally:
        readers.close_readers(job)
