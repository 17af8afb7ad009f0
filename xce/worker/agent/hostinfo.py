"""What a worker says about its host: slots and memory, how it contains jobs, and the
cgroup directory that keeps two workers on one machine apart.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

import psutil

from xce.config.settings import WorkerSettings
from xce.worker.cgroups import CgroupBackend


def host_resources(settings: WorkerSettings) -> tuple[int, int]:
    slots = settings.slots or os.cpu_count() or 1
    memory = settings.memory_mb or psutil.virtual_memory().total // (1024 * 1024)
    return slots, memory


def cgroup_namespace(host: str, spool_dir: Path) -> str:
    """This worker's directory in each cgroup hierarchy: its name and a digest of its spool,
    so two workers on one machine (even of one name) never see each other's jobs."""
    digest = hashlib.sha256(str(spool_dir.resolve()).encode()).hexdigest()[:10]
    return f"xce-{re.sub(r'[^A-Za-z0-9._-]', '_', host)[:60]}-{digest}"


def containment(backend: CgroupBackend) -> dict[str, Any]:
    """What the registration says about how this host contains jobs (`xce host show`):
    the backend, which limits it enforces, how many cores it can give out."""
    info = backend.describe()
    out: dict[str, Any] = {"kind": backend.kind}
    enforces = info.get("enforces")
    if isinstance(enforces, dict):
        out.update({str(k)[:32]: bool(v) for k, v in list(enforces.items())[:16]})
    cores = info.get("cores")
    if isinstance(cores, list | tuple):
        out["cores"] = len(cores)
    return out
