"""The data files `xce init` renders: the commented config and the systemd unit templates.

They are package data beside this module (xce.toml.in, units/*.service), so that one copy
serves `xce init`, flake.nix's NixOS module and the packaged binary (PyInstaller bundles them
at the same package-relative paths, so this lookup works frozen and from a checkout alike).
"""

from __future__ import annotations

import string
from importlib import resources
from pathlib import Path

UNITS = ("xce-controller.service", "xce-standby.service", "xce-worker.service")


def _data_file(*parts: str) -> str:
    return resources.files("xce.setup").joinpath(*parts).read_text(encoding="utf-8")


def render_config(**values: str) -> str:
    """The commented cluster config with `values` filled in; a missing value is a KeyError."""
    return string.Template(_data_file("xce.toml.in")).substitute(values)


def render_unit(name: str, xce: str | Path, config: Path, state: Path) -> str:
    """A systemd unit with its @xce@, @config@ and @state@ placeholders filled in."""
    if name not in UNITS:
        raise KeyError(f"no unit template {name} (have: {', '.join(UNITS)})")
    text = _data_file("units", name)
    for key, value in (("@xce@", xce), ("@config@", config), ("@state@", state)):
        text = text.replace(key, str(value))
    return text
