"""The parts of multi-host jobs this host holds but does not run.

A multi-host job's script runs on its first host; every other host of its allocation keeps
one cgroup for the job's share there (named `<attempt>.share`, with the share's slots as
CPUs and its memory as the limit), so that tasks started on this host for the job (a later
`xce launch`) are contained, counted and ended with it. The controller lists the shares in
each host's assignments (`shares`), level-triggered like the jobs: a listed share is
created, `stop` freezes it, `run` thaws it, `kill` kills what is in it, and a share no
longer listed is killed and removed. A worker that restarts kills share cgroups no attempt
claims (executor.recover) and makes them again on the next poll.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from xce.protocol.worker import Share
from xce.worker.attempt.running import attempt_name
from xce.worker.cgroups.base import CgroupBackend, CgroupError, JobCgroup, Limits
from xce.worker.cgroups.devices import deny_entries
from xce.worker.devices import gpus

log = logging.getLogger(__name__)
MIB = 1024 * 1024
Key = tuple[str, int]


def share_name(job_id: str, attempt: int) -> str:
    return f"{attempt_name(job_id, attempt)}.share"


@dataclass
class HeldShare:
    cgroup: JobCgroup
    action: str


class ShareHolder:
    """The share cgroups of this host, by (job id, attempt). Blocking: call in a thread."""

    def __init__(
        self, backend: CgroupBackend, pids_limit: int, devices: gpus.HostDevices | None = None
    ) -> None:
        self.backend = backend
        self.pids_limit = pids_limit
        # This host's GPUs: a share is denied those its job was not granted here, as the
        # job's own cgroup is on its first host (xce/worker/attempt/executor.py).
        self.devices = devices or gpus.HostDevices()
        self.held: dict[Key, HeldShare] = {}

    def reconcile(self, shares: list[Share], keep: Collection[Key] = ()) -> None:
        """Hold exactly the `shares` the controller lists; those in `keep` (listed, but in an
        entry this worker cannot read) stay as they are."""
        desired = {(s.job_id, s.attempt): s for s in shares}
        for key, share in desired.items():
            held = self.held.get(key)
            if held is None:
                held = self._create(key, share)
                if held is None:
                    continue
            if held.action != share.action:
                self._act(key, held, share.action)
        for key in [k for k in self.held if k not in desired and k not in keep]:
            self.release(key)

    def readings(self) -> list[dict[str, Any]]:
        """Each held share's figures for the controller: CPU and
        memory high-water mark from the kernel's accounting of the cgroup, and whether the
        OOM killer has killed anything in it, read here as root (never from a file the job
        can write). Blocking: call in a thread."""
        out = []
        for key, held in list(self.held.items()):
            try:
                usage = held.cgroup.usage()
                oom = held.cgroup.oom_killed()
            except (OSError, ValueError) as exc:
                log.debug("job %s attempt %s: cannot read its share: %s", *key, exc)
                continue
            out.append(
                {
                    "job_id": key[0],
                    "attempt": key[1],
                    "cpu_user_s": round(usage.cpu_user_s, 6),
                    "cpu_system_s": round(usage.cpu_system_s, 6),
                    "max_rss_bytes": usage.memory_peak_bytes,
                    "oom_killed": oom,
                }
            )
        return out

    def release(self, key: Key) -> None:
        held = self.held.pop(key)
        log.info("job %s attempt %s: share released", *key)
        with contextlib.suppress(OSError):
            held.cgroup.kill()
        with contextlib.suppress(OSError):
            held.cgroup.remove()

    def release_all(self) -> None:
        for key in list(self.held):
            self.release(key)

    def _create(self, key: Key, share: Share) -> HeldShare | None:
        memory = share.memory_mb
        limits = Limits(
            memory_bytes=memory * MIB if memory else None,
            cpus=share.slots or 1,
            pids=self.pids_limit or None,
        )
        try:
            if self.backend.kind in ("v1", "v2") and self.devices.gpus:
                limits = dataclasses.replace(
                    limits,
                    devices_deny=deny_entries(gpus.denied_nodes(share.devices, self.devices)),
                )
            cgroup = self.backend.create(share_name(*key), limits)
        except (OSError, ValueError, RuntimeError, CgroupError) as exc:
            log.warning(
                "job %s attempt %s: cannot make its share's cgroup: %s", key[0], key[1], exc
            )
            return None
        log.info("job %s attempt %s: holding %s slot(s) here", key[0], key[1], share.slots)
        held = self.held[key] = HeldShare(cgroup, "run")
        return held

    def _act(self, key: Key, held: HeldShare, action: str) -> None:
        with contextlib.suppress(OSError):
            if action == "stop":
                held.cgroup.freeze()
            elif action == "run":
                held.cgroup.thaw()
            elif action == "kill":
                held.cgroup.kill()
        held.action = action
