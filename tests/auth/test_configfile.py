"""The configfile backend: hashes, locked atomic edits, reloads, constant-shape failures."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from xce.auth.backends import build_backend
from xce.auth.backends.base import BackendUnavailable, PasswordBackend, Principal
from xce.auth.backends.configfile import ConfigFileBackend, UsersFile
from xce.auth.passwords import hash_password, verify_password
from xce.core.errors import ConfigError, Conflict, InvalidRequest, NotFound


def test_hash_format_and_verify() -> None:
    encoded = hash_password("correct horse")
    scheme, log2_n, r, p, _salt, _digest = encoded.split("$")
    assert (scheme, log2_n, r, p) == ("scrypt", "15", "8", "1")
    assert verify_password("correct horse", encoded)
    assert not verify_password("correct horse ", encoded)
    assert hash_password("correct horse") != encoded  # salted
    for broken in ("", "scrypt$15$8$1$xx", "md5$1$2$3$4$5", "scrypt$99$8$1$AA==$AA=="):
        assert not verify_password("x", broken)
    with pytest.raises(ValueError):
        hash_password("x", 20)


async def test_add_authenticate_passwd_delete(tmp_path: Path) -> None:
    users = UsersFile(tmp_path / "users.toml")
    users.add("alice", "alice-password", ("physics", "hpc"), ("operator",))
    path = tmp_path / "users.toml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "alice-password" not in path.read_text() and "scrypt$" in path.read_text()
    backend = ConfigFileBackend(path)
    assert isinstance(backend, PasswordBackend)
    assert await backend.authenticate("alice", "alice-password") == Principal(
        "alice", ("physics", "hpc"), "configfile"
    )
    assert await backend.authenticate("alice", "wrong") is None
    assert await backend.authenticate("nobody", "alice-password") is None
    assert backend.roles_of("alice") == ("operator",) and backend.groups_of("bob") == ()
    with pytest.raises(Conflict):
        users.add("alice", "again-again")
    # Another writer (another process, here another object) changes the file: picked up.
    UsersFile(path).set_password("alice", "new-password")
    assert await backend.authenticate("alice", "alice-password") is None
    assert await backend.authenticate("alice", "new-password") is not None
    users.delete("alice")
    assert await backend.authenticate("alice", "new-password") is None
    with pytest.raises(NotFound):
        users.delete("alice")
    with pytest.raises(NotFound):
        users.set_password("ghost", "whatever-1")


@pytest.mark.parametrize("name", ["", "../x", "a b", "-lead", "x" * 65, 'q"uote'])
def test_bad_names(tmp_path: Path, name: str) -> None:
    with pytest.raises(InvalidRequest):
        UsersFile(tmp_path / "u.toml").add(name, "password-1")
    with pytest.raises(InvalidRequest):
        UsersFile(tmp_path / "u.toml").add("ok", "password-1", groups=(name,))


def test_a_failed_write_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    users = UsersFile(tmp_path / "users.toml")
    users.add("alice", "alice-password")
    before = (tmp_path / "users.toml").read_bytes()

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        users.add("bob", "bob-password")
    assert (tmp_path / "users.toml").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["users.toml", "users.toml.lock"]


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    """Four processes add users at once: the lock serialises read-modify-write."""
    path = tmp_path / "users.toml"
    code = (
        "import sys; from xce.auth.backends.configfile import UsersFile; "
        "UsersFile(__import__('pathlib').Path(sys.argv[1])).add(sys.argv[2], 'pw-12345678')"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(path), f"user{i}"]) for i in range(4)
    ]
    assert [p.wait(60) for p in procs] == [0, 0, 0, 0]
    assert sorted(UsersFile(path).load()) == ["user0", "user1", "user2", "user3"]


async def test_a_broken_file_is_unavailable_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "users.toml").write_text("[users.alice\n")
    with pytest.raises(BackendUnavailable):
        await ConfigFileBackend(tmp_path / "users.toml").authenticate("alice", "x")


def test_from_config(tmp_path: Path) -> None:
    backend = build_backend({"type": "configfile", "path": "u.toml"}, tmp_path, "auth.backend[0]")
    assert backend.users.path == tmp_path / "u.toml"
    with pytest.raises(ConfigError, match=r"auth\.backend\[2\]\.path is required"):
        build_backend({"type": "configfile"}, tmp_path, "auth.backend[2]")
    with pytest.raises(ConfigError, match=r"unknown key auth\.backend\[0\]\.file"):
        build_backend({"type": "configfile", "file": "x"}, tmp_path, "auth.backend[0]")
