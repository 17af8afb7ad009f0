"""The `configfile` login backend: users, password hashes, groups and roles in a TOML file.

```toml
# users.toml (0600), edited by `xce user add|passwd|del` or the user admin API
[users.alice]
password = "scrypt$15$8$1$...$..."
groups = ["physics"]
roles = []            # direct roles, added to those the groups give ([auth.groups])
```
Every change is read-modify-write under an exclusive `flock` on `<file>.lock`, written to a temp
file, fsynced and renamed over the old one (then the folder is fsynced), so a crash or a
concurrent `xce user add` never leaves a torn or half-merged file. The backend re-reads the
file when its modification time or size changes, so edits need no restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import re
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any

from xce.auth.backends.base import BackendUnavailable, Principal
from xce.auth.files import atomic_write
from xce.auth.passwords import hash_password, verify_or_burn
from xce.config.check import Table, convert
from xce.core.errors import Conflict, InvalidRequest, NotFound
from xce.core.validation import required

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class UserEntry:
    name: str
    password: str = ""
    groups: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()

    def public(self) -> dict[str, Any]:
        """What the API and CLI may show: never the hash."""
        return {"user": self.name, "groups": list(self.groups), "roles": list(self.roles)}


def check_name(kind: str, name: str) -> str:
    if not NAME_RE.match(name):
        raise InvalidRequest(
            f"{kind} name {name!r} must be 1-64 letters, digits, '.', '_' or "
            "'-', starting with a letter or digit"
        )
    return name


@dataclass
class UsersFile:
    """The users file; `edit` is the only way to change it (locked, atomic)."""

    path: Path
    _cache: dict[str, UserEntry] = field(default_factory=dict)
    _stamp: tuple[int, int] | None = None

    def load(self) -> dict[str, UserEntry]:
        """All users, re-read when the file changed on disk."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._cache, self._stamp = {}, None
            return self._cache
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            self._cache, self._stamp = self._parse(self.path.read_text()), stamp
        return self._cache

    def _parse(self, text: str) -> dict[str, UserEntry]:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise BackendUnavailable(f"users file {self.path} is not valid TOML: {exc}") from None
        users = {}
        for name, entry in data.get("users", {}).items():
            if not isinstance(entry, dict):
                raise InvalidRequest(f"users file {self.path}: users.{name} must be a table")
            users[name] = UserEntry(
                name,
                str(entry.get("password", "")),
                tuple(entry.get("groups", ())),
                tuple(entry.get("roles", ())),
            )
        return users

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock = self.path.with_name(self.path.name + ".lock")
        with open(lock, "a") as f:
            lock.chmod(0o600)
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def edit(self, change: Callable[[dict[str, UserEntry]], None]) -> dict[str, UserEntry]:
        """Apply `change` to a fresh copy of the users under the lock and write it back."""
        with self._locked():
            self._stamp = None
            users = dict(self.load())
            change(users)
            atomic_write(self.path, render(users).encode())
            self._stamp = None
            return self.load()

    def add(
        self,
        name: str,
        password: str,
        groups: tuple[str, ...] = (),
        roles: tuple[str, ...] = (),
        log2_n: int = 15,
    ) -> UserEntry:
        check_name("user", name)
        for g in groups:
            check_name("group", g)
        encoded = hash_password(password, log2_n)

        def change(users: dict[str, UserEntry]) -> None:
            if name in users:
                raise Conflict(f"user {name} already exists (use passwd to change it)")
            users[name] = UserEntry(name, encoded, groups, roles)

        return self.edit(change)[name]

    def set_password(self, name: str, password: str, log2_n: int = 15) -> None:
        encoded = hash_password(password, log2_n)

        def change(users: dict[str, UserEntry]) -> None:
            if name not in users:
                raise NotFound(f"no user {name}")
            users[name] = replace(users[name], password=encoded)

        self.edit(change)

    def delete(self, name: str) -> None:
        def change(users: dict[str, UserEntry]) -> None:
            if users.pop(name, None) is None:
                raise NotFound(f"no user {name}")

        self.edit(change)


def render(users: dict[str, UserEntry]) -> str:
    """The file's TOML text (strings written as JSON strings, which TOML accepts)."""
    lines = ["# XCE users (configfile backend). Edit with `xce user ...`; 0600.", ""]
    for name in sorted(users):
        u = users[name]
        lines += [
            f"[users.{json.dumps(name)}]",
            f"password = {json.dumps(u.password)}",
            f"groups = {json.dumps(list(u.groups))}",
            f"roles = {json.dumps(list(u.roles))}",
            "",
        ]
    return "\n".join(lines)


class ConfigFileBackend:
    """PasswordBackend over a `UsersFile`; also tells RBAC a user's direct roles."""

    def __init__(self, path: Path, name: str = "configfile") -> None:
        self.name = name
        self.users = UsersFile(path)

    async def authenticate(self, username: str, password: str) -> Principal | None:
        entry = self.users.load().get(username)
        ok = await asyncio.to_thread(verify_or_burn, password, entry.password if entry else None)
        if not ok or entry is None:
            return None
        return Principal(entry.name, entry.groups, self.name)

    def roles_of(self, username: str) -> tuple[str, ...]:
        entry = self.users.load().get(username)
        return entry.roles if entry else ()

    def groups_of(self, username: str) -> tuple[str, ...]:
        entry = self.users.load().get(username)
        return entry.groups if entry else ()


class ConfigFileOptions(Table, frozen=True):
    """The keys of a `type = "configfile"` `[[auth.backend]]` table."""

    path: Annotated[str, required("is required (the users file)")]
    name: str = "configfile"


def from_config(section: dict[str, Any], base: Path, where: str) -> ConfigFileBackend:
    """`{type = "configfile", path = "users.toml"}`; the path is relative to the config."""
    o = convert(section, ConfigFileOptions, where)
    return ConfigFileBackend((base / Path(o.path).expanduser()).resolve(), o.name)
