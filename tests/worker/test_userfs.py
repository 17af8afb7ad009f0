"""xce.worker.attempt.userfs as root against real unprivileged users: credentials and hostile trees.

Each attack test names the line of a naive implementation (the same work done as root with
plain paths) that it catches. Functions run as the user avoid lazy imports and text-mode
files: the user may not be able to read Python's own library (here it lives under /root).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from tests.worker.linux_users import LinuxUser, LinuxUsers, linux_users  # noqa: F401
from xce.worker.attempt import fscreds, userfs
from xce.worker.attempt.fscreds import (
    Credentials,
    CredentialsError,
    as_user,
    run_as_user,
    thread_credentials,
)
from xce.worker.attempt.userfs import (
    open_input_target,
    open_outputs,
    prepare_job_files,
    remove_tree,
)

T = TypeVar("T")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (real users)")


@dataclass
class Tree:
    """A 0711 root directory holding a job dir of the user and root-only things beside it."""

    root: str  # 0711, root
    job: str  # 0700, the user's
    secret: str  # root 0600: the user cannot read it
    public: str  # root 0644, outside the job tree: the user can read it
    rootdir: str  # root 0755 directory outside the tree
    mine: str  # the user's own directory outside the tree (creds alone do not protect it)
    user: LinuxUser
    creds: Credentials


def _write(path: str, data: bytes, mode: int) -> None:
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)


def _read(fd: int) -> bytes:
    return os.pread(fd, 1 << 20, 0)


def _listing(path: str) -> list[str]:
    return sorted(os.listdir(path))


@pytest.fixture
def tree(linux_users: LinuxUsers) -> Iterator[Tree]:
    user = linux_users.user()
    root = tempfile.mkdtemp(prefix="xce-userfs-", dir="/tmp")
    try:
        os.chmod(root, 0o711)
        job, rootdir, mine = (os.path.join(root, n) for n in ("job", "rootdir", "mine"))
        for d in (job, mine):
            os.mkdir(d, 0o700)
            os.chown(d, user.uid, user.gid)
        os.mkdir(rootdir, 0o755)
        secret, public = os.path.join(rootdir, "secret"), os.path.join(rootdir, "public")
        _write(secret, b"root only", 0o600)
        _write(public, b"public", 0o644)
        yield Tree(root, job, secret, public, rootdir, mine, user, Credentials.of(user.account))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _as(tree: Tree, fn: Callable[..., T], *args: Any) -> T:
    return run_as_user(tree.creds, fn, *args)


def _closing(found: tuple[list[tuple[str, int]], list[str]]) -> tuple[dict[str, bytes], list[str]]:
    """{name: content} of open_outputs' answer, closing its descriptors."""
    contents = {name: _read(fd) for name, fd in found[0]}
    userfs.close_outputs(found)
    return contents, found[1]


# --- credentials ---------------------------------------------------------------------------


def test_user_cannot_read_root_files_and_creates_its_own(tree: Tree) -> None:
    # naive: open("/etc/shadow") on a root thread simply succeeds
    for path in ("/etc/shadow", tree.secret):
        with pytest.raises(PermissionError):
            _as(tree, os.open, path, os.O_RDONLY)
    with pytest.raises(PermissionError):
        _as(tree, os.open, os.path.join(tree.rootdir, "new"), os.O_WRONLY | os.O_CREAT, 0o600)
    fd = _as(tree, os.open, os.path.join(tree.job, "made"), os.O_WRONLY | os.O_CREAT, 0o600)
    os.close(fd)
    st = os.stat(os.path.join(tree.job, "made"))
    assert (st.st_uid, st.st_gid) == (tree.user.uid, tree.user.gid)
    fsuid, fsgid, groups, cap_eff = _as(tree, thread_credentials)
    assert (fsuid, fsgid, groups) == (tree.user.uid, tree.user.gid, tree.creds.groups)
    assert cap_eff == 0  # no capability at all: not CAP_DAC_OVERRIDE, not CAP_SYS_RESOURCE


def test_supplementary_groups_apply(linux_users: LinuxUsers, tree: Tree) -> None:
    group = linux_users.group()
    member, outsider = linux_users.user(groups=[group]), linux_users.user()
    shared = os.path.join(tree.root, "group-file")
    _write(shared, b"for the group", 0o640)
    os.chown(shared, 0, group.gid)
    creds = Credentials.of(member.account)
    assert group.gid in creds.groups
    fd = run_as_user(creds, os.open, shared, os.O_RDONLY)
    assert _read(fd) == b"for the group"
    os.close(fd)
    with pytest.raises(PermissionError):
        run_as_user(Credentials.of(outsider.account), os.open, shared, os.O_RDONLY)


async def test_loop_thread_stays_root_and_users_do_not_mix(
    linux_users: LinuxUsers, tree: Tree
) -> None:
    other = Credentials.of(linux_users.user().account)
    both_inside = threading.Barrier(3, timeout=10)
    leave = threading.Event()

    def inside() -> tuple[int, int, tuple[int, ...], int]:
        both_inside.wait()  # the two users' threads overlap, and the loop looks meanwhile
        assert leave.wait(10)
        return thread_credentials()

    calls = asyncio.gather(as_user(tree.creds, inside), as_user(other, inside))
    await asyncio.get_running_loop().run_in_executor(None, both_inside.wait)
    fsuid, fsgid, _, cap_eff = thread_credentials()
    assert (fsuid, fsgid) == (0, 0) and cap_eff & 0b1111 == 0b1111  # still root, DAC caps on
    fd = os.open(tree.secret, os.O_RDONLY)  # the loop thread can still read root's files
    os.close(fd)
    leave.set()
    mine, theirs = await calls
    assert mine[:3] == (tree.user.uid, tree.user.gid, tree.creds.groups)
    assert theirs[:3] == (other.uid, other.gid, other.groups)
    assert thread_credentials()[:2] == (0, 0)


def test_launching_a_job_meanwhile_does_not_reset_the_thread(tree: Tree) -> None:
    """Popen(user=, extra_groups=) calls setgroups/setuid in the child; if it ever did so in
    this process (glibc broadcasts them to every thread), the re-check would raise."""
    started, leave = threading.Event(), threading.Event()

    def inside() -> tuple[int, int, tuple[int, ...], int]:
        started.set()
        assert leave.wait(10)
        return thread_credentials()

    box: list[object] = []
    t = threading.Thread(target=lambda: box.append(_as(tree, inside)))
    t.start()
    assert started.wait(10)
    subprocess.run(["true"], user=tree.user.uid, group=tree.user.gid, extra_groups=[], check=True)
    leave.set()
    t.join(10)
    assert box and box[0][:2] == (tree.user.uid, tree.user.gid)  # type: ignore[index]


_BROADCAST = """
import os, resource, sys, threading
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the abort must leave no core file
from xce.worker.attempt.fscreds import Credentials, run_as_user
creds = Credentials(int(sys.argv[1]), int(sys.argv[2]), (int(sys.argv[2]),), "u")
inside = threading.Event()
hold = lambda: inside.set() or threading.Event().wait(5)
threading.Thread(target=run_as_user, args=(creds, hold)).start()
inside.wait(5)
os.setgroups(os.getgroups())  # glibc runs it on every thread; the user's thread cannot
print("still alive", flush=True)
"""


def test_a_broadcast_setgroups_meanwhile_aborts_the_process(tree: Tree) -> None:
    """glibc's setgroups()/setuid() run on every thread of the process: the user's thread,
    which holds no capability, fails it and glibc aborts rather than leave threads with
    different credentials. The worker must switch users only in forked children."""
    argv = [sys.executable, "-c", _BROADCAST, str(tree.user.uid), str(tree.user.gid)]
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False, cwd=repo)
    assert done.returncode == -6 and "still alive" not in done.stdout, done.stderr


def test_switching_users_in_a_forked_child_meanwhile_is_fine(tree: Tree) -> None:
    # how the keeper starts a job: fork, then setgroups/setgid/setuid in the child only
    started, leave = threading.Event(), threading.Event()

    def inside() -> tuple[int, int, tuple[int, ...], int]:
        started.set()
        assert leave.wait(10)
        return thread_credentials()

    box: list[tuple[int, int, tuple[int, ...], int]] = []
    t = threading.Thread(target=lambda: box.append(_as(tree, inside)))
    t.start()
    assert started.wait(10)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.setgroups([])
        os.setgid(tree.user.gid)
        os.setuid(tree.user.uid)
        os._exit(0 if os.getuid() == tree.user.uid else 1)
    assert os.waitpid(pid, 0)[1] == 0
    leave.set()
    t.join(10)
    assert box and box[0][:2] == (tree.user.uid, tree.user.gid)


def test_unprotected_cases_run_unchanged_and_unknown_arch_refuses(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run_as_user(None, thread_credentials)[:2] == (0, 0)
    root = Credentials(0, 0, (0,), "root")
    assert run_as_user(root, thread_credentials)[:2] == (0, 0)
    monkeypatch.setattr(fscreds, "_SYSCALLS", {})
    called = []
    with pytest.raises(CredentialsError, match="refusing"):
        run_as_user(tree.creds, called.append, 1)
    assert called == []


async def test_cancelled_call_discards_its_result(tree: Tree) -> None:
    release, discarded = threading.Event(), asyncio.Event()
    seen: list[int] = []
    loop = asyncio.get_running_loop()

    def slow() -> int:
        assert release.wait(10)
        return 42

    def discard(value: int) -> None:
        seen.append(value)
        loop.call_soon(discarded.set)

    task = asyncio.ensure_future(as_user(tree.creds, slow, discard=discard))
    await asyncio.sleep(0.01)
    task.cancel()
    release.set()
    await asyncio.wait_for(discarded.wait(), 10)
    assert seen == [42]


# --- prepare_job_files ---------------------------------------------------------------------


def test_prepare_job_files(tree: Tree) -> None:
    files = _as(tree, prepare_job_files, tree.job, "#!/bin/sh\necho hi\n")
    try:
        meta = os.path.join(tree.job, ".xce")
        for path, mode in (
            (meta, 0o700),
            (f"{meta}/stdout", 0o600),
            (f"{meta}/stderr", 0o600),
            (f"{meta}/script", 0o700),
        ):
            st = os.lstat(path)
            assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (tree.user.uid, mode), path
        assert files.script == f"{meta}/script"
        with open(files.script, "rb") as f:
            assert f.read() == b"#!/bin/sh\necho hi\n"
        os.write(files.stdout, b"out")
        assert _read(files.stdout_reader) == b"out"
        for fd in (files.stdout, files.stderr, files.stdout_reader, files.stderr_reader):
            assert not os.get_inheritable(fd)
        assert os.fstat(files.stderr).st_ino == os.fstat(files.stderr_reader).st_ino
    finally:
        files.close()


@pytest.mark.parametrize("target", ["rootdir", "mine"])
def test_prepare_refuses_a_planted_meta_symlink(tree: Tree, target: str) -> None:
    # naive: os.makedirs(job/.xce, exist_ok=True); open(job/.xce/stdout, "w") as root writes
    # into whatever directory the link names
    outside = getattr(tree, target)
    before = _listing(outside)
    os.symlink(outside, os.path.join(tree.job, ".xce"))
    with pytest.raises(OSError):
        _as(tree, prepare_job_files, tree.job, "echo")
    assert _listing(outside) == before


def test_prepare_refuses_planted_stream_symlinks(tree: Tree) -> None:
    # naive: open(job/.xce/stdout, O_WRONLY|O_CREAT|O_TRUNC) as root truncates the link's
    # target, or creates a missing one anywhere
    meta = os.path.join(tree.job, ".xce")
    os.mkdir(meta, 0o700)
    os.chown(meta, tree.user.uid, tree.user.gid)
    os.symlink(tree.secret, os.path.join(meta, "stdout"))
    with pytest.raises(OSError):
        _as(tree, prepare_job_files, tree.job, None)
    os.unlink(os.path.join(meta, "stdout"))
    missing = os.path.join(tree.rootdir, "created-by-root")
    os.symlink(missing, os.path.join(meta, "stdout"))
    with pytest.raises(OSError):
        _as(tree, prepare_job_files, tree.job, None)
    os.unlink(os.path.join(meta, "stdout"))
    own = os.path.join(tree.mine, "own")  # the user's own file: only O_EXCL|O_NOFOLLOW help
    _write(own, b"own", 0o600)
    os.chown(own, tree.user.uid, tree.user.gid)
    os.symlink(own, os.path.join(meta, "stdout"))
    with pytest.raises(OSError):
        _as(tree, prepare_job_files, tree.job, None)
    for path, content in ((tree.secret, b"root only"), (own, b"own")):
        with open(path, "rb") as f:
            assert f.read() == content
    assert not os.path.lexists(missing)


# --- open_input_target ---------------------------------------------------------------------


def test_input_target_creates_user_owned_directories(tree: Tree) -> None:
    fd = _as(tree, open_input_target, tree.job, "data/in/x.csv")
    os.write(fd, b"1,2")
    os.close(fd)
    fd = _as(tree, open_input_target, tree.job, "data/in/x.csv")  # truncated
    os.close(fd)
    path = os.path.join(tree.job, "data/in/x.csv")
    assert os.path.getsize(path) == 0
    for p, mode in ((os.path.join(tree.job, "data"), 0o700), (path, 0o600)):
        st = os.stat(p)
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (tree.user.uid, mode)


@pytest.mark.parametrize("rel", ["../x", "ABSOLUTE", "a/../../x", "", "a//b", "./a", "a/"])
def test_input_target_refuses_escaping_paths(tree: Tree, rel: str) -> None:
    # naive: open(os.path.join(job, rel), "wb") as root writes any absolute path or ../x.
    # The absolute path is a file of the test's own: a regression must not truncate a file
    # of the machine (an earlier version of this test named /etc/passwd, and a naive run
    # emptied it).
    if rel == "ABSOLUTE":
        rel = os.path.join(tree.rootdir, "sentinel")
    with pytest.raises(ValueError, match="input path"):
        _as(tree, open_input_target, tree.job, rel)


@pytest.mark.parametrize("target", ["rootdir", "mine"])
def test_input_target_refuses_symlinked_directories(tree: Tree, target: str) -> None:
    # naive: os.makedirs(dirname(job/a/x)); open(job/a/x, "wb") as root follows a -> outside
    outside = getattr(tree, target)
    before = _listing(outside)
    os.symlink(outside, os.path.join(tree.job, "a"))
    with pytest.raises(OSError):
        _as(tree, open_input_target, tree.job, "a/x")
    with pytest.raises(OSError):
        _as(tree, open_input_target, tree.job, "a/sub/x")
    assert _listing(outside) == before


def test_input_target_refuses_fifos_and_links_without_hanging(tree: Tree) -> None:
    # naive: open(job/x, "wb") blocks forever on a FIFO nobody reads; follows a link
    os.mkfifo(os.path.join(tree.job, "fifo"))
    os.chown(os.path.join(tree.job, "fifo"), tree.user.uid, tree.user.gid)
    os.symlink(tree.public, os.path.join(tree.job, "link"))
    for rel in ("fifo", "link"):
        with pytest.raises(OSError):
            _as(tree, open_input_target, tree.job, rel)
    with open(tree.public, "rb") as f:
        assert f.read() == b"public"


# --- open_outputs --------------------------------------------------------------------------


def test_outputs_from_root_only_directories_give_nothing(tree: Tree) -> None:
    # naive: glob("/etc/shadow") + open as root uploads the shadow file / the state dir's token
    found, warnings = _closing(_as(tree, open_outputs, "/etc", ["shadow"], False))
    assert found == {} and warnings
    state = os.path.join(tree.root, "state")
    os.mkdir(state, 0o700)
    _write(os.path.join(state, "admin.token"), b"token", 0o600)
    found, warnings = _closing(_as(tree, open_outputs, state, ["*", "**"], False))
    assert found == {} and warnings


def test_outputs_skip_planted_file_symlinks(tree: Tree) -> None:
    # naive: for p in glob(pattern): open(p) as root follows each link to its target
    for name, target in (("a.out", "/etc/shadow"), ("b.out", tree.secret), ("c.out", tree.public)):
        os.symlink(target, os.path.join(tree.job, name))
    _write(os.path.join(tree.job, "d.out"), b"real", 0o644)
    found, _ = _closing(_as(tree, open_outputs, tree.job, ["*.out", "a.out", "b.out"], False))
    assert found == {"d.out": b"real"}


def test_outputs_skip_symlinked_directories(tree: Tree) -> None:
    # naive: glob("outdir/*") as root walks through outdir -> /etc and uploads passwd, shadow
    os.symlink("/etc", os.path.join(tree.job, "outdir"))
    os.symlink(tree.rootdir, os.path.join(tree.job, "mine"))
    found, _ = _closing(
        _as(
            tree,
            open_outputs,
            tree.job,
            ["outdir/passwd", "outdir/*", "mine/public", "**/passwd"],
            False,
        )
    )
    assert found == {}


def test_outputs_never_leave_the_tree_while_a_directory_is_swapped(tree: Tree) -> None:
    # naive: the existing check-then-open (resolve() inside the tree, then open(path)) as root
    # opens outdir/data after the job swapped outdir for a symlink: the outside file
    outdir = os.path.join(tree.job, "outdir")
    os.mkdir(outdir)
    _write(os.path.join(outdir, "data"), b"inside", 0o644)
    os.chown(outdir, tree.user.uid, tree.user.gid)
    outside = os.path.join(tree.mine, "data")  # readable by the user: only the walk protects
    _write(outside, b"outside", 0o644)
    os.chown(outside, tree.user.uid, tree.user.gid)
    bad = os.stat(outside)
    stop = threading.Event()

    def swap() -> int:
        hold, swaps = os.path.join(tree.job, "hold"), 0
        while not stop.is_set():
            os.rename(outdir, hold)
            os.symlink(tree.mine, outdir)
            os.unlink(outdir)
            os.rename(hold, outdir)
            swaps += 1
        return swaps

    swaps: list[int] = []
    swapper = threading.Thread(target=lambda: swaps.append(_as(tree, swap)))
    swapper.start()
    inside = 0
    try:
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            found, _ = _as(tree, open_outputs, tree.job, ["outdir/data", "**/data"], False)
            for name, fd in found:
                st = os.fstat(fd)
                assert (st.st_dev, st.st_ino) != (bad.st_dev, bad.st_ino), name
                inside += 1
            userfs.close_outputs((found, []))
    finally:
        stop.set()
        swapper.join(10)
    assert swaps and swaps[0] > 100 and inside > 0


def test_output_patterns(tree: Tree, monkeypatch: pytest.MonkeyPatch) -> None:
    j = tree.job
    for d in ("res", "res/deep", ".xce"):
        os.mkdir(os.path.join(j, d))
    for f in ("a.txt", "res/b.txt", "res/deep/c.txt", ".xce/stdout", ".hidden.txt"):
        _write(os.path.join(j, f), f.encode(), 0o644)
    os.mkfifo(os.path.join(j, "pipe.txt"))  # naive: open() of a FIFO blocks forever
    os.makedirs(os.path.join(j, "locked/in"))
    _write(os.path.join(j, "locked/in/x.txt"), b"x", 0o644)
    subprocess.run(["chown", "-R", f"{tree.user.uid}:{tree.user.gid}", j], check=True)
    os.chmod(os.path.join(j, "locked"), 0)  # the job's own unreadable directory: skipped
    found, warnings = _closing(
        _as(tree, open_outputs, j, ["*.txt", "a.txt", "**/*.txt", "/etc/passwd", "../x"], True)
    )
    assert sorted(found) == [".hidden.txt", "a.txt", "res/b.txt", "res/deep/c.txt"]
    assert len(warnings) == 2
    found, _ = _closing(_as(tree, open_outputs, j, ["res/**"], False))
    assert sorted(found) == ["res/b.txt", "res/deep/c.txt"]
    found, _ = _closing(_as(tree, open_outputs, j, [".xce/*"], False))
    assert sorted(found) == [".xce/stdout"]
    monkeypatch.setattr(userfs, "MAX_OUTPUTS", 2)
    found, warnings = _closing(_as(tree, open_outputs, j, ["**"], True))
    assert len(found) == 2 and "more than 2" in warnings[-1]


# --- remove_tree ---------------------------------------------------------------------------


def test_remove_tree_removes_links_not_their_targets(tree: Tree) -> None:
    # naive: shutil.rmtree-like os.walk(followlinks=True) + unlink as root empties rootdir
    j = tree.job
    os.makedirs(os.path.join(j, "a/b/c"))
    _write(os.path.join(j, "a/b/c/f"), b"x", 0o600)
    _write(os.path.join(tree.mine, "kept"), b"kept", 0o600)
    os.symlink(tree.rootdir, os.path.join(j, "a/to-root"))
    os.symlink(tree.mine, os.path.join(j, "to-mine"))
    os.mkfifo(os.path.join(j, "fifo"))
    subprocess.run(["chown", "-R", f"{tree.user.uid}:{tree.user.gid}", j], check=True)
    os.chmod(os.path.join(j, "a/b"), 0)  # the job locks its own directory
    before = (_listing(tree.rootdir), _listing(tree.mine))
    _as(tree, remove_tree, j)
    assert os.listdir(j) == []
    assert (_listing(tree.rootdir), _listing(tree.mine)) == before
    os.rmdir(j)  # the caller's part


def test_remove_tree_handles_very_deep_trees(tree: Tree, monkeypatch: pytest.MonkeyPatch) -> None:
    # a job's 'mkdir -p a/a/a/...' thousands deep must not cost a descriptor and a Python
    # frame per level: past MAX_DEPTH the rest is moved to the top and removed on a later pass
    monkeypatch.setattr(userfs, "MAX_DEPTH", 3)

    def deep() -> None:
        fd = os.open(tree.job, os.O_RDONLY)
        for _ in range(40):
            os.mkdir("d", dir_fd=fd)
            fd, parent = os.open("d", os.O_RDONLY, dir_fd=fd), fd
            os.close(parent)
        os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd))
        os.close(fd)

    _as(tree, deep)
    found, warnings = _closing(_as(tree, open_outputs, tree.job, ["**"], False))
    assert found == {} and warnings == ["outputs deeper than 3 directories skipped"]
    _as(tree, remove_tree, tree.job)
    assert os.listdir(tree.job) == []


def test_remove_tree_lists_huge_directories_a_batch_at_a_time(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a job's directory of hard links (no inodes, just names) must not become one list of
    # every name in the worker's memory: it is emptied a batch at a time, to the last entry
    monkeypatch.setattr(userfs, "REMOVE_BATCH", 7)
    seen: list[int] = []
    real = os.scandir

    def counting(fd):  # type: ignore[no-untyped-def]
        seen.append(len(os.listdir(fd)))
        return real(fd)

    def many() -> None:
        os.mkdir(os.path.join(tree.job, "sub"))
        _write(os.path.join(tree.job, "sub", "f0"), b"x", 0o600)
        for i in range(1, 50):
            os.link(os.path.join(tree.job, "sub", "f0"), os.path.join(tree.job, "sub", f"f{i}"))

    _as(tree, many)
    monkeypatch.setattr(userfs.os, "scandir", counting)
    _as(tree, remove_tree, tree.job)
    assert os.listdir(tree.job) == []
    assert len(seen) >= 50 // 7, "the directory was listed in one go"


def test_output_matching_stops_listing_at_the_cap(
    tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(userfs, "MAX_SCANNED", 10)

    def many() -> None:
        for i in range(40):
            _write(os.path.join(tree.job, f"o{i}.txt"), b"x", 0o600)

    _as(tree, many)
    found, warnings = _closing(_as(tree, open_outputs, tree.job, ["*.txt"], False))
    assert len(found) <= 11 and any("matching stopped" in w for w in warnings)
