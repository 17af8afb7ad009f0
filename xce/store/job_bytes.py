"""What the files of each user's jobs hold on the controller, per job and part.

A job's inputs (its uploads, moved under `jobs/<number>/inputs` at submit) and the outputs
its workers return (`jobs/<number>/outputs/<task>`) stay on the controller's disk until the
job's record is purged or its inputs are deleted unused (xce/controller/job_files.py). They
are the owner's bytes for all that time, whatever state the job is in, so the quota
(`FileStore.usage`) counts them beside the uploads no job has used yet: otherwise a user
could hold any amount by attaching uploads to held jobs.

Kept in memory and changed as files arrive and leave; each primary term rebuilds it from the
disk and the recovered records (`FileStore.adopt`), so a restart gives the same figures.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

INPUTS = "inputs"  # the part of a job that holds its inputs; others are output directories


@dataclass
class Held:
    """Bytes and files one owner (or one part of a job) holds."""

    bytes: int = 0
    files: int = 0


class JobBytes:
    """Bytes and files of job directories: per job number and part, and per owner."""

    def __init__(self) -> None:
        self._parts: dict[int, dict[str, Held]] = {}
        self._owner: dict[int, str] = {}
        self._by_owner: dict[str, Held] = {}

    def add(self, number: int, owner: str, part: str, size: int, files: int) -> None:
        """`size` more bytes and `files` more files in `part` of job `number` (either may be
        negative: a file replaced by a smaller one)."""
        self._owner.setdefault(number, owner)
        held = self._parts.setdefault(number, {}).setdefault(part, Held())
        held.bytes += size
        held.files += files
        total = self._by_owner.setdefault(self._owner[number], Held())
        total.bytes += size
        total.files += files

    def set(self, number: int, owner: str, part: str, size: int, files: int) -> None:
        """`part` of job `number` now holds exactly this (its directory was replaced)."""
        self.drop(number, part)
        self.add(number, owner, part, size, files)

    def drop(self, number: int, part: str | None = None) -> Held:
        """Forget `part` of job `number` (None: the whole job); returns what it held."""
        parts = self._parts.get(number)
        if parts is None:
            return Held()
        gone = Held()
        for name in [part] if part is not None else list(parts):
            held = parts.pop(name, None)
            if held is not None:
                gone.bytes += held.bytes
                gone.files += held.files
        owner = self._owner[number]
        total = self._by_owner[owner]
        total.bytes -= gone.bytes
        total.files -= gone.files
        if not total.bytes and not total.files:
            del self._by_owner[owner]
        if not parts:
            del self._parts[number]
            del self._owner[number]
        return gone

    def of(self, owner: str) -> Held:
        """What the files of `owner`'s jobs hold (a copy)."""
        held = self._by_owner.get(owner)
        return Held(held.bytes, held.files) if held is not None else Held()

    def owners(self) -> dict[str, Held]:
        """Every owner with job files and what they hold (copies)."""
        return {owner: Held(h.bytes, h.files) for owner, h in self._by_owner.items()}

    def clear(self) -> None:
        self._parts.clear()
        self._owner.clear()
        self._by_owner.clear()


def tree_held(path: Path) -> Held:
    """The regular files under `path` and their bytes, never following a link (the store's
    own tree, 0700: no job writes there). Partial files of transfers count: they are on
    the disk too."""
    held = Held()
    stack = [str(path)]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        held.bytes += entry.stat(follow_symlinks=False).st_size
                        held.files += 1
                except OSError:
                    continue
    return held
