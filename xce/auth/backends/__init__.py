"""Login backends, chosen in the config (`[[auth.backend]]`, tried in order).

Each backend is one module here (`configfile`, `ldap`, `pam`, `oauth2`, `munge`) that
declares its own keys as a typed `Table` and has a `from_config(section: dict, base: Path,
where: str) -> backend` function (a `ConfigError` names the bad key, e.g.
`auth.backend[1].url`). Adding a backend is adding one module and its name to
`BACKEND_TYPES`.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from xce.auth.backends.base import (
    AuthDenied,
    BackendUnavailable,
    DeviceAuthorization,
    OidcBackend,
    PasswordBackend,
    Principal,
)
from xce.config.auth import BACKEND_TYPES

__all__ = [
    "BACKEND_TYPES",
    "AuthDenied",
    "BackendUnavailable",
    "DeviceAuthorization",
    "OidcBackend",
    "PasswordBackend",
    "Principal",
    "build_backend",
]


def build_backend(section: dict[str, Any], base: Path, where: str) -> Any:
    """Build one configured backend; `where` names the section in errors (auth.backend[0])."""
    from xce.core.errors import ConfigError

    kind = section.get("type")
    if kind not in BACKEND_TYPES:
        raise ConfigError(f"{where}.type must be one of {', '.join(BACKEND_TYPES)}, got {kind!r}")
    module = importlib.import_module(f"xce.auth.backends.{kind}")
    rest = {k: v for k, v in section.items() if k != "type"}
    return module.from_config(rest, base, where)
