"""GPU check on a machine with an NVIDIA driver: `python bench/gpu_check.py`.

1. Lists the GPUs NVML sees (index, model, memory, UUID) and what a worker would register
   (xce/worker/devices/gpus.py: ids, `gpu_model`, `gpu_memory_mb`).
2. Starts a real controller and one worker on loopback *without* `[worker.gres]` (so the GPUs
   come from NVML), submits a 1-GPU job with `select[gpu_model=="<model>"]`, and checks in the
   job's own output that it sees exactly its granted device: `CUDA_VISIBLE_DEVICES`,
   `ROCR_VISIBLE_DEVICES` and `XCE_GPUS` name it, and (cgroup v1) only its /dev/nvidiaN opens.

Without a driver it prints "skipped: ..." and exits 0. `--visible` is what the job runs.
Exit status 1 when a check fails.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def visible() -> None:
    """Inside the job: what it was given and which GPU nodes it can open."""
    opened = []
    for node in sorted(glob.glob("/dev/nvidia[0-9]*")):
        try:
            with open(node, "rb"):
                opened.append(re.sub(r"\D", "", os.path.basename(node)))
        except OSError:
            pass
    print(
        f"visible={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')} "
        f"rocr={os.environ.get('ROCR_VISIBLE_DEVICES', '<unset>')} "
        f"xce={os.environ.get('XCE_GPUS', '<unset>')} openable={','.join(opened)}"
    )


def main() -> int:
    from xce.worker.devices import gpus

    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # ImportError or any NVMLError
        print(f"skipped: NVML not available ({exc})")
        return 0
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h).total // 2**20
            name = pynvml.nvmlDeviceGetName(h)
            print(f"gpu {i}: {name} {mem} MiB {pynvml.nvmlDeviceGetUUID(h)}")
    finally:
        pynvml.nvmlShutdown()
    host = gpus.host_devices(None)
    print(f"worker registers: gpu={list(host.gpus)} attributes={host.attributes}")
    if not host.gpus:
        print("skipped: no GPU")
        return 0

    from tests.integration.cluster import Cluster

    with tempfile.TemporaryDirectory(prefix="xce-gpu-check-") as tmp:
        os.chmod(tmp, 0o755)
        cluster = Cluster(Path(tmp) / "cluster")
        cluster.start_controller()
        try:
            cluster.start_worker("gpu1", slots=2)
            hosts = cluster.get("/api/v1/hosts")["hosts"]
            print("host view:", json.dumps(hosts[0]["gres"]), hosts[0]["attributes"])
            model = host.attributes["gpu_model"]
            started = time.monotonic()
            job = cluster.submit(
                command=f"{sys.executable} {ROOT / 'bench/gpu_check.py'} --visible",
                gres={"gpu": 1},
                resources=f'select[gpu_model=="{model}"]',
            )
            done = cluster.wait_state(job, "DONE", "EXIT", timeout=120)
            if done["state"] != "DONE":
                print(f"FAIL: job {job} {done['state']}: {done.get('reason')}")
                return 1
            out = cluster.download(job, "stdout").decode().strip()
            mine = done["devices"][0].split(":")[1] if done["devices"] else "?"
            print(
                f"job {job}: {done['state']} devices={done['devices']} in "
                f"{time.monotonic() - started:.1f} s; its output: {out}"
            )
            want = f"visible={mine} rocr={mine} xce={mine}"
            ok = done["state"] == "DONE" and want in out
            kind = (cluster.get("/api/v1/hosts/gpu1").get("containment") or {}).get("kind")
            nodes = re.search(r"openable=(\S*)", out)
            if ok and kind == "v1" and nodes is not None and nodes.group(1):
                ok = nodes.group(1) == mine  # only its own node: the others are denied
            print(
                f"containment {kind}: "
                + (
                    "other GPU nodes denied by the devices cgroup"
                    if kind == "v1"
                    else "variables only"
                )
            )
            print("PASS" if ok else f"FAIL: expected {want!r} and openable={mine}")
            return 0 if ok else 1
        finally:
            cluster.stop()


if __name__ == "__main__":
    if "--visible" in sys.argv:
        visible()
        sys.exit(0)
    sys.exit(main())
