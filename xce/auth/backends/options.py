"""Reading one `[[auth.backend]]` table: typed keys, files relative to the config, clear errors.

Every external backend validates its own keys through `SectionReader`, so a typo or a wrong
type surfaces at start as one `ConfigError` naming the key (`auth.backend[1].url`), the same
way `xce.config` reports the rest of the file (its `_check_keys` / `_typed` do the checking).
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

from xce.config import ConfigError, _check_keys, _typed


class SectionReader:
    """Typed access to one backend table; every getter raises `ConfigError` naming the key."""

    def __init__(self, section: dict[str, Any], base: Path, where: str, allowed: set[str]) -> None:
        _check_keys(where, section, allowed | {"name"})
        self.section = section
        self.base = base
        self.where = where

    def key(self, name: str) -> str:
        """The full name of a key for messages: `auth.backend[1].url`."""
        return f"{self.where}.{name}"

    def fail(self, name: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.key(name)} {problem}")

    def string(self, name: str, default: str | None = None) -> str:
        """A string key; without a default the key is required and may not be empty."""
        if name not in self.section:
            if default is None:
                raise self.fail(name, "is required")
            return default
        value = _typed(self.where, name, self.section[name], str)
        if default is None and not value.strip():
            raise self.fail(name, "may not be empty")
        return value

    def boolean(self, name: str, default: bool) -> bool:
        return bool(_typed(self.where, name, self.section.get(name, default), bool))

    def seconds(self, name: str, default: float, allow_zero: bool = False) -> float:
        """A duration in seconds: positive, or also zero where `allow_zero`."""
        value = _typed(self.where, name, self.section.get(name, default), (int, float))
        if value < 0 or (value == 0 and not allow_zero):
            raise self.fail(name, f"must be {'>= 0' if allow_zero else 'positive'}, got {value!r}")
        return float(value)

    def strings(self, name: str, default: tuple[str, ...]) -> tuple[str, ...]:
        value = self.section.get(name, list(default))
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.fail(name, f"must be a list of non-empty strings, got {value!r}")
        return tuple(value)

    def path(self, name: str, required: bool = False) -> Path | None:
        """A file path relative to the config file's folder; it must exist and be readable."""
        if name not in self.section:
            if required:
                raise self.fail(name, "is required")
            return None
        raw = _typed(self.where, name, self.section[name], str)
        path = (self.base / Path(raw).expanduser()).resolve()
        try:
            with path.open("rb"):
                pass
        except OSError as exc:
            raise self.fail(name, f"{path}: {exc.strerror}") from None
        return path

    def ca_file(self, name: str = "ca_file") -> Path | None:
        """A PEM file of CA certificates to verify a server with, checked to load now so a
        wrong file is a config error at start, not a failed login later."""
        path = self.path(name)
        if path is not None:
            try:
                ssl.create_default_context(cafile=str(path))
            except (ssl.SSLError, ValueError) as exc:
                raise self.fail(name, f"{path} holds no usable PEM certificate: {exc}") from None
        return path

    def secret_file(self, name: str, required: bool = False) -> str | None:
        """The first line of a file holding a secret (kept out of the config itself)."""
        path = self.path(name, required)
        if path is None:
            return None
        text = path.read_text(encoding="utf-8").splitlines()
        if not text or not text[0]:
            raise self.fail(name, f"{path} is empty")
        return text[0]
