"""The fence: a job never runs on a host that has lost its controller for too long.

The rule that makes two live attempts of one job impossible (docs/ARCHITECTURE.md, "A job
never runs twice"):

* the worker writes the moment it last reached a controller (the *send* time of its last
  successful registration or heartbeat, so it is never later than the controller's own record
  of that contact) to `<spool>/state/contact`, a root-owned file no job can write;
* every job attempt is watched by its keeper (xce/worker/keeper/process.py), which kills the whole
  cgroup once that moment is more than `fence_timeout_s` old: the worker is dead, frozen or
  cut off, and the controller is about to give the job to another host;
* the controller requeues the jobs of a silent host only after its heartbeat deadline *plus*
  `fence_timeout_s` (it sends its value to the worker when the worker registers).

Times are `CLOCK_BOOTTIME` seconds: shared by every process on the host, never set back,
and still counting while the machine is suspended. Standard library only: the keeper
imports this.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

DEFAULT_FENCE_TIMEOUT_S = 30.0
CONTACT_FILE = "contact"


def now() -> float:
    """Seconds on the host-wide clock that fencing uses."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


@dataclass(frozen=True)
class Contact:
    """When the worker last reached a controller, and the fence that controller set."""

    at: float
    fence_timeout_s: float

    def silent_for(self, when: float | None = None) -> float:
        return (now() if when is None else when) - self.at

    def expired(self, when: float | None = None) -> bool:
        return self.silent_for(when) > self.fence_timeout_s


RECORD_BYTES = 256


def record(state_dir: str, contact: Contact) -> None:
    """Write the contact in place: one pwrite of a fixed-size record into a file made (and
    given its blocks) once, so recording needs no new inode or block. A job that fills the
    file system with files cannot stop the worker from recording its contact and so make
    every keeper of the host kill its job. A reader that catches a torn record cannot parse
    it and keeps the last one it read."""
    path = os.path.join(state_dir, CONTACT_FILE)
    body = json.dumps({"at": contact.at, "fence_timeout_s": contact.fence_timeout_s}).encode()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        if os.fstat(fd).st_size < RECORD_BYTES:
            os.posix_fallocate(fd, 0, RECORD_BYTES)
        os.pwrite(fd, body.ljust(RECORD_BYTES), 0)
    finally:
        os.close(fd)


def read(state_dir: str) -> Contact | None:
    """The last recorded contact, or None if there is none (or it cannot be read)."""
    try:
        fd = os.open(
            os.path.join(state_dir, CONTACT_FILE), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
        )
    except OSError:
        return None
    try:
        raw = json.loads(os.read(fd, 4096))
        return Contact(float(raw["at"]), float(raw["fence_timeout_s"]))
    except (ValueError, KeyError, TypeError, OSError):
        return None
    finally:
        os.close(fd)
