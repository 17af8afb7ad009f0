"""Release and format versions in one table, and the skew rule between builds.

A release (`xce.__version__`) says which build is running; the format numbers say what a
build writes and reads. Every file or stream another build may read carries its format: a
WAL segment's header, a checkpoint's header, the replication hello and welcome, a worker's
registration. What carries none was written before formats were named and is format 1.

A build reads every format up to its own and refuses a newer one at the door, with one line
that names both (`NewerFormat`): never as damage, never by cutting records. The skew rule
(docs/upgrades.md) is what the release comparison enforces where two builds meet: a worker or
a standby may be one minor release older than its primary; a worker is never newer (workers
are upgraded last), a standby at most one minor newer (standbys are upgraded first).
"""

from __future__ import annotations

import re

from xce import __version__
from xce.core.errors import XceError

RELEASE = __version__
# 1: segments without a header (records from byte 0); 2: each segment starts with a header
# frame naming its format and the release that wrote it (xce/store/wal/segment.py).
WAL_FORMAT = 2
# 1: Cap'n Proto record lists; 2: plain tuples packed with marshal; 3: plain tuples packed
# as versioned msgpack (xce/wire/packing.py). All are read.
CHECKPOINT_FORMAT = 3
# 1: a hello without versions; 2: hello and welcome carry the release and the formats
# each side reads, and a primary refuses a standby that cannot read what it writes.
REPLICATION_PROTOCOL = 2
# 1: a registration without versions; 2: it carries the worker's release and protocol, and
# a controller refuses a worker of a newer protocol than its own.
WORKER_PROTOCOL = 2
# How many minor releases an older worker or standby may lag behind its primary.
SKEW_MINORS = 1

_RELEASE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")


class NewerFormat(XceError):
    """State or a peer written by a newer build: not damage, and never repaired here."""

    code = "newer_format"
    http_status = 409

    def __init__(self, what: str, found: int, reads: int, by: str = "") -> None:
        writer = f" (xce {by})" if by else ""
        super().__init__(
            f"{what} was written by a newer format {found}{writer} (this build, xce "
            f"{RELEASE}, reads ≤ {reads}): run a build that reads it, or upgrade this one"
        )
        self.found = found
        self.reads = reads


class VersionSkew(XceError):
    """A peer outside the skew rule or of a newer protocol: refused at the door. The peer
    keeps retrying (slowly): an upgrade on either side lets it in without a restart."""

    code = "version_skew"
    http_status = 409


def release_tuple(text: str) -> tuple[int, int, int] | None:
    """`0.2.0` as (0, 2, 0); None for text that is no release (a peer that sent none)."""
    m = _RELEASE.match(text.strip())
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def skew_problem(
    theirs: str, role: str, ours: str = RELEASE, newer_minors: int = SKEW_MINORS
) -> str | None:
    """Why a `role` ("worker", "standby") of release `theirs` may not join a primary of
    release `ours` under the skew rule; None when it may. `newer_minors`: how many minor
    releases newer it may be (a standby one: standbys are upgraded first; a worker none:
    workers last). Unknown releases pass: formats decide for them."""
    mine, other = release_tuple(ours), release_tuple(theirs)
    if mine is None or other is None:
        return None
    if other[0] != mine[0]:
        return (
            f"{role} xce {theirs} and primary xce {ours} differ in major release: "
            "upgrade one to the other's"
        )
    if other[1] < mine[1] - SKEW_MINORS:
        return (
            f"{role} xce {theirs} is more than {SKEW_MINORS} minor release older than the "
            f"primary's xce {ours}: upgrade the {role} first"
        )
    if other[1] > mine[1] + newer_minors:
        return (
            f"{role} xce {theirs} is newer than the primary's xce {ours} allows "
            f"(at most {newer_minors} minor release newer): upgrade the controllers first"
        )
    return None
