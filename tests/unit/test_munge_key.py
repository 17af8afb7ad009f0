"""`xce init --munge-key`: a new MUNGE key is 1024 random bytes, 0400, the munge account's,
and an existing key is never replaced (every node must hold the same one)."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from xce.auth.munge import create_key


def test_a_new_key_is_private_random_and_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "etc-munge" / "munge.key"
    owner = create_key(str(path))
    data = path.read_bytes()
    assert len(data) == 1024 and len(set(data)) > 200
    assert path.stat().st_mode & 0o777 == 0o400
    assert path.parent.stat().st_mode & 0o777 == 0o700
    try:
        munge_account = pwd.getpwnam("munge")
    except KeyError:
        munge_account = None
    if os.geteuid() == 0 and munge_account is not None:
        assert owner == "munge" and path.stat().st_uid == munge_account.pw_uid
    else:
        assert path.stat().st_uid == os.geteuid()
    with pytest.raises(FileExistsError):
        create_key(str(path))
    assert path.read_bytes() == data
    other = tmp_path / "etc-munge" / "second.key"
    create_key(str(other))
    assert other.read_bytes() != data


def test_a_link_in_the_keys_place_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    (tmp_path / "munge.key").symlink_to(target)
    with pytest.raises(FileExistsError):
        create_key(str(tmp_path / "munge.key"))
    assert not target.exists()


def _init(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xce", "init", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_init_refuses_an_existing_key_before_making_anything(tmp_path: Path) -> None:
    key = tmp_path / "munge.key"
    key.write_bytes(b"the site's key")
    done = _init(str(tmp_path / "cluster"), "--munge-key", "--munge-key-file", str(key))
    assert done.returncode != 0
    assert "is never replaced" in done.stderr and done.stderr.count("\n") == 1
    assert not (tmp_path / "cluster").exists() and key.read_bytes() == b"the site's key"
    joining = _init(
        str(tmp_path / "node"),
        "--join",
        "https://ctl:6820",
        "--token",
        "t",
        "--munge-key",
        "--munge-key-file",
        str(tmp_path / "new.key"),
    )
    assert joining.returncode != 0 and "a joining node gets a copy" in joining.stderr
    assert not (tmp_path / "new.key").exists()
