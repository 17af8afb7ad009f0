"""What the login backends' option tables share: key types, and the files they name.

Each backend declares its `[[auth.backend]]` keys once as a `Table` (xce/config/check.py
words every error as for the rest of the file, `auth.backend[1].url ...`); the files a table
names are checked here, relative to the config file, so a wrong path or a broken CA file is a
`ConfigError` at start, not a failed login later.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Annotated

import msgspec

from xce.core.errors import ConfigError
from xce.core.validation import error, hint, required

Text = Annotated[str, hint("may not be empty", pattern=r"\S"), required()]  # a required key
Strings = Annotated[
    tuple[Annotated[str, msgspec.Meta(min_length=1)], ...],
    error("must be a list of non-empty strings", got=True),
]
ZeroOrMore = Annotated[float, hint("must be >= 0", ge=0)]


def readable(where: str, key: str, base: Path, raw: str | None) -> Path | None:
    """`raw` relative to the config file's folder; it must exist and be readable now."""
    if raw is None:
        return None
    path = (base / Path(raw).expanduser()).resolve()
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        raise ConfigError(f"{where}.{key} {path}: {exc.strerror}") from None
    return path


def ca_file(where: str, base: Path, raw: str | None) -> Path | None:
    """A PEM file of CA certificates to verify a server with, loaded once now."""
    path = readable(where, "ca_file", base, raw)
    if path is not None:
        try:
            ssl.create_default_context(cafile=str(path))
        except (ssl.SSLError, ValueError) as exc:
            raise ConfigError(
                f"{where}.ca_file {path} holds no usable PEM certificate: {exc}"
            ) from None
    return path


def secret(where: str, key: str, base: Path, raw: str | None) -> str:
    """The first line of a file holding a secret (kept out of the config itself); ""
    without one."""
    path = readable(where, key, base, raw)
    if path is None:
        return ""
    text = path.read_text(encoding="utf-8").splitlines()
    if not text or not text[0]:
        raise ConfigError(f"{where}.{key} {path} is empty")
    return text[0]
