"""StrictModes: the controller refuses secrets and state that other users may read or change. Real
files, real modes and real owners (chown needs root)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster
from xce.auth import strict_modes
from xce.auth.bootstrap import token_service
from xce.config import file_safety
from xce.config.auth import AuthSettings
from xce.config.file_safety import OPERATOR_SECRET, PRIVATE, STATE_DIR, UnsafeFiles

NOBODY = 65534
CONFIGFILE = ({"type": "configfile", "path": "users.toml"},)


def _layout(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A state directory with a signing key (as the controller makes it), a users file and a
    TLS key, all private: (state dir, users file, TLS key)."""
    root = tmp_path / "cluster"
    root.mkdir(mode=0o755)
    state = root / "state"
    state.mkdir(mode=0o700)
    (state / "wal").mkdir(mode=0o700)
    token_service(AuthSettings(), state).issue("ann")  # creates auth/ and its key
    users = root / "users.toml"
    users.write_text("[users]\n")
    users.chmod(0o600)
    key = root / "node.key"
    key.write_text("-----BEGIN PRIVATE KEY-----\n")
    key.chmod(0o640)  # group-readable (an ssl-cert group) is allowed for operator secrets
    return state, users, key


def _paths(state: Path, users: Path, key: Path) -> list[tuple[Path, str]]:
    return strict_modes.controller_paths(state, users.parent, CONFIGFILE, key)


def test_a_private_layout_passes(tmp_path: Path) -> None:
    paths = _paths(*_layout(tmp_path))
    kinds = {p.name: k for p, k in paths}
    assert kinds["state"] == STATE_DIR and kinds["wal"] == STATE_DIR
    assert kinds["auth"] == PRIVATE and kinds["keys.json"] == PRIVATE
    assert kinds["users.toml"] == PRIVATE and kinds["node.key"] == OPERATOR_SECRET
    assert any(p.suffix == ".pem" and k == PRIVATE for p, k in paths)
    file_safety.check(paths)


@pytest.mark.parametrize(
    ("target", "mode", "words"),
    [
        ("signing key", 0o644, "chmod 600"),
        ("auth", 0o755, "chmod 700"),
        ("users.toml", 0o664, "chmod 600"),
        ("users.toml", 0o640, "chmod 600"),
        ("state", 0o775, "chmod 755"),
        ("wal", 0o777, "chmod 755"),
        ("node.key", 0o644, "chmod 640"),
        ("node.key", 0o660, "chmod 640"),
    ],
)
def test_open_modes_are_refused_naming_the_file_and_the_fix(
    tmp_path: Path, target: str, mode: int, words: str
) -> None:
    state, users, key = _layout(tmp_path)
    path = {
        "signing key": next((state / "auth").glob("*.pem")),
        "auth": state / "auth",
        "users.toml": users,
        "state": state,
        "wal": state / "wal",
        "node.key": key,
    }[target]
    path.chmod(mode)
    with pytest.raises(UnsafeFiles) as caught:
        file_safety.check(_paths(state, users, key))
    message = caught.value.message
    assert message.startswith(f"refusing to start: {path} is not private")
    assert f"mode {mode:04o}" in message and f"{words} {path}" in message, message


def test_a_folder_others_may_write_is_refused_unless_sticky(tmp_path: Path) -> None:
    state, users, key = _layout(tmp_path)
    users.parent.chmod(0o777)  # anyone could replace users.toml
    with pytest.raises(
        UnsafeFiles,
        match=r"which holds users.toml, is writable by group or "
        r"others .*chmod go-w",
    ):
        file_safety.check(_paths(state, users, key))
    users.parent.chmod(0o1777)  # sticky, like /tmp: others cannot replace our file
    file_safety.check(_paths(state, users, key))


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
@pytest.mark.parametrize("target", ["state", "users.toml", "signing key"])
def test_state_and_secrets_owned_by_another_user_are_refused(tmp_path: Path, target: str) -> None:
    state, users, key = _layout(tmp_path)
    path = {
        "state": state,
        "users.toml": users,
        "signing key": next((state / "auth").glob("*.pem")),
    }[target]
    os.chown(path, NOBODY, NOBODY)
    with pytest.raises(UnsafeFiles) as caught:
        file_safety.check(_paths(state, users, key))
    assert f"{path} belongs to " in caught.value.message
    assert f"uid {NOBODY}" in caught.value.message
    assert f"run chown root {path}" in caught.value.message


def test_missing_paths_are_left_to_the_controller_to_create(tmp_path: Path) -> None:
    paths = strict_modes.controller_paths(tmp_path / "new", tmp_path, CONFIGFILE, None)
    file_safety.check(paths)


def test_the_controller_refuses_to_start_with_a_readable_signing_key(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "cluster")
    cluster.start_controller()
    cluster.stop()
    key = next((tmp_path / "cluster" / "controller" / "auth").glob("*.pem"))
    key.chmod(0o644)
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "xce",
            "controller",
            "-c",
            str(tmp_path / "cluster" / "controller.toml"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and f"refusing to start: {key} is not private" in lines[0], lines
    key.chmod(0o600)
    cluster.start_controller()  # fixed as told: it starts
    cluster.stop()


def test_a_home_relative_backend_file_is_checked_where_the_backend_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`path = "~/users.toml"` is the file the configfile backend opens (the home's), so it
    is the one StrictModes checks, not `<config dir>/~/users.toml`."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    backends = ({"type": "configfile", "path": "~/users.toml"},)
    paths = strict_modes.controller_paths(tmp_path / "state", tmp_path / "etc", backends, None)
    assert (home / "users.toml", PRIVATE) in paths
