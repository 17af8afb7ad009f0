"""Every secret and state path of a controller, with its kind, for the StrictModes check
(xce/config/file_safety.py) the controller runs before it reads or writes anything."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from xce.auth.keys import key_dir
from xce.config.file_safety import OPERATOR_SECRET, PRIVATE, STATE_DIR


def controller_paths(
    state_dir: Path, auth_base: Path, backends: Iterable[dict[str, object]], tls_key: Path | None
) -> list[tuple[Path, str]]:
    """Every secret and state path of a controller, with its kind: the state directory and
    the folders and files directly in it, the signing keys (`<state>/auth/`), the users
    files of `configfile` backends, the backends' secret files and the TLS key. (The WAL
    segments and job files below the state folders are created private by XCE; their
    folders are what others would need to change them.)"""
    paths: list[tuple[Path, str]] = [(state_dir, STATE_DIR)]
    keys = key_dir(state_dir)
    if state_dir.is_dir():
        for child in sorted(state_dir.iterdir()):
            if child != keys:
                paths.append((child, STATE_DIR))
    paths.append((keys, PRIVATE))
    if keys.is_dir():
        paths.extend((child, PRIVATE) for child in sorted(keys.iterdir()))
    for backend in backends:
        for name, value in backend.items():
            if not isinstance(value, str):
                continue
            path = auth_base / Path(value).expanduser()  # where the backend reads it
            if name == "path" and backend.get("type") == "configfile":
                paths.append((path, PRIVATE))
            elif name.endswith("_file") and name != "ca_file":
                paths.append((path, OPERATOR_SECRET))
    if tls_key is not None:
        paths.append((tls_key, OPERATOR_SECRET))
    return paths
