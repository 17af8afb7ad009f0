"""Hostile GPU jobs against the worker's real launch path (keeper, cgroups, a real user).

A job on a GPU host, granted one of two "GPUs" (char devices the test makes, copies of
/dev/zero and /dev/full), tries to reach the other one: through the variables it was given
(or submitted), by moving itself out of its cgroup, from inside a user namespace of its
own, through a child that left its session. The kernel must refuse every open of the other
node, under cgroup v1 (devices.deny) and v2 (the eBPF device program), and the job's
devices cgroup must be gone when it ends.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.worker.assignments import assignment
from tests.worker.linux_users import LinuxUser, LinuxUsers, linux_users  # noqa: F401
from tests.worker.local_host import LocalHost, searchable_dir
from xce.worker.attempt import accounts, executor, running, spool
from xce.worker.cgroups.detect import read_mounts
from xce.worker.devices import gpus

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the worker's defences need root")

NODES = {"0": (1, 5), "1": (1, 7)}  # /dev/zero and /dev/full: reading them is harmless


def _modes() -> list[str]:
    kinds = {m.fstype for m in read_mounts()}
    out = []
    if "cgroup" in kinds and os.access("/sys/fs/cgroup/devices", os.W_OK):
        out.append("v1")
    if "cgroup2" in kinds:
        out.append("v2")
    return out


@pytest.fixture
def nodes() -> Iterator[Path]:
    where = searchable_dir("xce-gpu-nodes-")
    os.chmod(where, 0o755)
    for device, (major, minor) in NODES.items():
        path = where / f"nvidia{device}"
        os.mknod(path, 0o666 | 0o020000, os.makedev(major, minor))
        os.chmod(path, 0o666)
    yield where
    shutil.rmtree(where, ignore_errors=True)


ATTACK = r"""
echo "cuda=$CUDA_VISIBLE_DEVICES xce=$XCE_GPUS"
probe() {
  if head -c 1 {nodes}/nvidia1 >/dev/null 2>&1; then echo "open 1 $1"
  else echo "denied 1 $1"; fi
}
probe plain
unset CUDA_VISIBLE_DEVICES ROCR_VISIBLE_DEVICES; probe unset
for procs in /sys/fs/cgroup/devices/cgroup.procs /sys/fs/cgroup/unified/cgroup.procs \
             /sys/fs/cgroup/cgroup.procs; do
  [ -e $procs ] && (echo $$ > $procs) 2>/dev/null && echo "moved via $procs"
done
probe moved
if command -v unshare >/dev/null && unshare -Ur true 2>/dev/null; then
  unshare -Ur sh -c '
    for p in /sys/fs/cgroup/devices/cgroup.procs /sys/fs/cgroup/unified/cgroup.procs; do
      [ -e $p ] && (echo $$ > $p) 2>/dev/null && echo "userns moved via $p"
    done
    if head -c 1 {nodes}/nvidia1 >/dev/null 2>&1; then echo "open 1 userns"
    else echo "denied 1 userns"; fi'
fi
setsid sh -c 'if head -c 1 {nodes}/nvidia1 >/dev/null 2>&1; then echo "open 1 setsid"
  else echo "denied 1 setsid"; fi'
if head -c 1 {nodes}/nvidia0 >/dev/null 2>&1; then echo "open 0 own"
else echo "denied 0 own"; fi
"""


@pytest.mark.parametrize("mode", _modes())
async def test_a_job_cannot_reach_the_gpu_it_was_not_granted(
    mode: str, root: Path, nodes: Path, linux_users: LinuxUsers
) -> None:
    user: LinuxUser = linux_users.user()
    host = LocalHost(root, mode=mode, pids_limit=64)
    devices = gpus.HostDevices({"gpu": ("0", "1")}, gpu_device_path=f"{nodes}/nvidia{{}}")
    try:
        a = assignment(
            **{
                "job_id": "g1",
                "attempt": 0,
                "user": user.name,
                "outputs": [],
                "inputs": [],
                "slots": 1,
                "devices": ["gpu:0"],
                # submitted variables naming both GPUs: the worker's own win
                "env": {"CUDA_VISIBLE_DEVICES": "0,1", "XCE_GPUS": "0,1"},
                "command": ATTACK.replace("{nodes}", str(nodes)),
            }
        )
        account = accounts.account_for(user.name, allow_root=False)
        job = await spool.prepare(host.spool, a, account)
        job.result = asyncio.get_running_loop().create_future()
        await executor.launch(job, host.context(account, pids_limit=64, devices=devices))
        cgroup = job.cgroup
        assert cgroup is not None
        result = await host.wait(job)
        text = (job.job_dir / ".xce" / "stdout").read_text()
        assert result.exit_code == 0, (result, text)
        assert "cuda=0 xce=0" in text, text
        assert "open 1" not in text and "moved via" not in text, text
        assert "denied 1 plain" in text and "denied 1 setsid" in text, text
        assert "open 0 own" in text, text
        await asyncio.to_thread(cgroup.remove)  # what the worker does at the job's end
        described = cgroup.describe()
        paths = described.get("paths") or {"v2": described.get("path")}
        assert isinstance(paths, dict) and (mode == "v2" or "devices" in paths), described
        left = [p for p in paths.values() if p and os.path.isdir(str(p))]
        assert left == [], left
    finally:
        host.close()


async def test_a_planted_link_in_a_writable_node_directory_cannot_unfence_a_gpu(
    root: Path, linux_users: LinuxUsers
) -> None:
    """gpu_device_path in a directory users may write (sticky, like /tmp), one GPU's node
    not made there yet: a user plants `nvidia1 -> /dev/null`. The worker read the node's
    numbers through the link, denied /dev/null, and left the real GPU (here /dev/full,
    standing for /dev/nvidia1) open to the job. A path a user can change is refused."""
    modes = _modes()
    if not modes:
        pytest.skip("no cgroup that can fence devices")
    user: LinuxUser = linux_users.user()
    where = searchable_dir("xce-gpu-open-")
    os.chmod(where, 0o1777)  # the misconfiguration: a node directory anyone may write
    os.mknod(where / "nvidia0", 0o666 | 0o020000, os.makedev(*NODES["0"]))
    os.symlink("/dev/null", where / "nvidia1")  # planted by the user
    os.lchown(where / "nvidia1", user.uid, user.gid)
    host = LocalHost(root, mode=modes[0], pids_limit=64)
    devices = gpus.HostDevices({"gpu": ("0", "1")}, gpu_device_path=f"{where}/nvidia{{}}")
    try:
        a = assignment(
            **{
                "job_id": "g2",
                "attempt": 0,
                "user": user.name,
                "outputs": [],
                "inputs": [],
                "slots": 1,
                "devices": ["gpu:0"],
                "command": "if head -c 1 /dev/full >/dev/null 2>&1; then echo 'open 1'; "
                "else echo 'denied 1'; fi",
            }
        )
        account = accounts.account_for(user.name, allow_root=False)
        job = await spool.prepare(host.spool, a, account)
        job.result = asyncio.get_running_loop().create_future()
        try:
            await executor.launch(job, host.context(account, pids_limit=64, devices=devices))
        except running.LaunchError as exc:
            assert "not trusted" in str(exc) and "nvidia1" in str(exc), exc
            return
        await host.wait(job)
        text = (job.job_dir / ".xce" / "stdout").read_text()
        assert "open 1" not in text, text
    finally:
        host.close()
        shutil.rmtree(where, ignore_errors=True)
