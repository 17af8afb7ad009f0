"""`xce admin selfcheck` (hidden): load every run-time data file the way XCE itself does.

Meant for the packaged binary, where a file PyInstaller left out only shows up when a
command that needs it runs (possibly on a node in the middle of the night). Each check goes
through the same code path the real feature uses, so "ok" means the feature can load it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import typer


def _bundle_root() -> Path:
    """Where the packages' data files live: the unpack dir frozen, the checkout otherwise."""
    frozen_root = getattr(sys, "_MEIPASS", None)
    if frozen_root:
        return Path(frozen_root)
    import xce

    return Path(xce.__file__).resolve().parents[1]


def _wire_schema() -> str:
    from xce.wire.codec import SCHEMA_PATH, schema

    schema()
    return str(SCHEMA_PATH.name)


def _capnp_builtin_schemas() -> str:
    import capnp

    base = Path(capnp.__file__).parent
    names = sorted(p.name for p in base.rglob("*.capnp"))
    if "c++.capnp" not in names:
        raise FileNotFoundError(f"pycapnp's c++.capnp is missing under {base}")
    capnp.load(str(next(base.rglob("c++.capnp"))), imports=[str(base.parent)])
    return f"{len(names)} files"


def _openapi() -> str:
    from xce.api.openapi import document

    return f"{len(document()['paths'])} paths"


def _config_template() -> str:
    import tempfile
    import tomllib

    from xce.config.loader import parse_config
    from xce.setup.templates import render_config

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "worker.token").write_text("t\n")
        (Path(tmp) / "worker.token").chmod(0o600)  # a token others can read is refused
        text = render_config(
            created="now",
            cluster_dir=tmp,
            controllers='"http://h:1"',
            listen="127.0.0.1:1",
            node_cert="controller",
            allow_root_jobs="false",
        )
        parse_config(tomllib.loads(text), Path(tmp) / "xce.toml")
    return "xce.toml.in renders and validates"


def _units() -> str:
    from xce.setup.templates import UNITS, render_unit

    for name in UNITS:
        if "@" in render_unit(name, Path("/x"), Path("/c"), Path("/s")):
            raise ValueError(f"{name} has an unfilled placeholder")
    return ", ".join(UNITS)


def _textual() -> str:
    from importlib.metadata import version

    from textual.app import App
    from textual.css.stylesheet import Stylesheet
    from textual.widgets import DataTable, Footer, Header  # noqa: F401  (lazy in textual)

    # The theme's design variables ($surface, $accent, ...), as a running app has them.
    variables = App().get_css_variables()
    sheets = sorted((_bundle_root() / "tui").rglob("*.tcss"))
    for path in sheets:
        stylesheet = Stylesheet(variables=variables)
        stylesheet.read(path)
        stylesheet.parse()
    return f"textual {version('textual')}, {len(sheets)} stylesheets parsed"


CHECKS: dict[str, Callable[[], str]] = {
    "Cap'n Proto wire schema": _wire_schema,
    "pycapnp bundled schemas": _capnp_builtin_schemas,
    "OpenAPI document": _openapi,
    "config template": _config_template,
    "systemd units": _units,
    "Textual + stylesheets": _textual,
}


def selfcheck() -> None:
    """Load every bundled data file; exit 1 naming each one that fails."""
    failed = 0
    for name, check in CHECKS.items():
        try:
            detail = check()
        except Exception as exc:  # report every failure, whatever it is, then exit 1
            failed += 1
            typer.echo(f"FAIL  {name}: {type(exc).__name__}: {exc}")
        else:
            typer.echo(f"ok    {name}: {detail}")
    if failed:
        raise typer.Exit(1)
