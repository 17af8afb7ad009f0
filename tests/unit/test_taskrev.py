"""Hostile-review findings on the task service: each test plays one attack
on the worker side of `xce launch` and fails without its fix."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from xce.worker.tasks.installer import install_launcher
from xce.worker.tasks.request import Hello, TaskRefused, parse_hello, parse_request


def test_a_deeply_nested_request_is_refused_not_a_crash() -> None:
    """`[[[[...` within the 512 KiB request limit made json raise RecursionError, which no
    handler caught: the connection died unanswered and the worker logged a traceback per
    request (a cheap log flood). It must be an ordinary refusal."""
    hello = Hello("7", 1, "w1", "0" * 64)
    for line in (b"[" * 200_000, b'{"a":' * 100_000):
        with pytest.raises(TaskRefused, match="JSON"):
            parse_request(line, hello)
        with pytest.raises(TaskRefused, match="JSON"):
            parse_hello(line[:2000])


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to play a non-root owner")
def test_a_planted_launcher_dir_is_replaced_not_written_through(tmp_path: Path) -> None:
    """Every job gets `<jobs root>/.xce-bin` first on PATH. If that name already exists as a
    symlink to, or a directory owned by, someone else (a jobs root that was once writable,
    a restore from backup), the worker used to chmod it and write `xce` into it: whoever owns
    it could then swap the `xce` every job of every user runs. It must be root's own."""
    jobs = tmp_path / "jobs"
    jobs.mkdir(mode=0o711)
    evil = tmp_path / "evil"
    evil.mkdir()
    os.chown(evil, 65534, 65534)
    os.symlink(evil, jobs / ".xce-bin")
    got = install_launcher(jobs / ".xce-bin")
    assert got == str(jobs / ".xce-bin")
    st = os.lstat(got)
    assert not (jobs / ".xce-bin").is_symlink() and st.st_uid == 0, st
    assert list(evil.iterdir()) == []  # nothing written through the link
    assert (jobs / ".xce-bin" / "xce").stat().st_uid == 0

    # a real directory, but owned by another user (or writable by others)
    os.remove(jobs / ".xce-bin" / "xce")
    os.rmdir(jobs / ".xce-bin")
    (jobs / ".xce-bin").mkdir()
    os.chown(jobs / ".xce-bin", 65534, 65534)
    (jobs / ".xce-bin" / "planted").write_text("x")
    got = install_launcher(jobs / ".xce-bin")
    st = os.lstat(got)
    assert st.st_uid == 0 and st.st_mode & 0o022 == 0, st
    assert not (Path(got) / "planted").exists()
