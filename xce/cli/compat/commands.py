"""`xce compat ...`: install, uninstall, list and run the familiar commands.

The commands themselves never go through here: a symlink named `squeue` starts the tool
straight from the entry point (xce/cli/main.py), and so does `xce compat run TOOL`; this
group is for managing them (and for `--help`).
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import typer

from xce.cli.common import fail

app = typer.Typer(no_args_is_help=True)


def _target() -> Path:
    from xce.cli.compat.install import InstallError, xce_executable

    try:
        return xce_executable(
            sys.argv[0], bool(getattr(sys, "frozen", False)), sys.executable, os.environ
        )
    except InstallError as exc:
        fail(str(exc))


def _directory(prefix: Path | None, target: Path) -> Path:
    from xce.cli.compat.install import default_directory

    return prefix / "bin" if prefix is not None else default_directory(target, Path.home())


@app.command()
def install(
    prefix: Path = typer.Option(
        None, "--prefix", help="install into PREFIX/bin (default: beside xce, or ~/.local/bin)"
    ),
    force: bool = typer.Option(
        False, "--force", help="replace files and links that are not links to xce"
    ),
) -> None:
    """Make sbatch, squeue, scancel, sacct, sinfo, scontrol, bsub, bjobs, bkill, bqueues,
    bhosts, qsub, qstat and qdel: links to this xce that take the familiar options and print
    the familiar formats (see xce compat list)."""
    from xce.cli.compat.install import InstallError, path_warnings
    from xce.cli.compat.install import install as make

    target = _target()
    directory = _directory(prefix, target)
    try:
        lines = make(directory, target, force)
    except InstallError as exc:
        fail(str(exc))
    for line in lines:
        typer.echo(line)
    for warning in path_warnings(directory, os.environ.get("PATH", "")):
        typer.echo(f"xce: warning: {warning}", err=True)


@app.command()
def uninstall(
    prefix: Path = typer.Option(None, "--prefix", help="remove from PREFIX/bin"),
) -> None:
    """Remove the familiar commands' links (only links that point to an xce)."""
    from xce.cli.compat.install import InstallError
    from xce.cli.compat.install import uninstall as remove

    target = _target()
    try:
        lines = remove(_directory(prefix, target), target)
    except InstallError as exc:
        fail(str(exc))
    for line in lines or ["nothing to remove"]:
        typer.echo(line)


@app.command("list")
def list_() -> None:
    """What each familiar command covers (docs/migration.md, "Familiar commands", has the
    options that are not covered)."""
    from xce.cli.common import print_table
    from xce.cli.compat import TOOLS

    rows = []
    for tool, (module, family) in TOOLS.items():
        doc = getattr(importlib.import_module(module), tool).__doc__ or ""
        rows.append([tool, family, " ".join(doc.split("\n\n")[0].replace("`", "").split())])
    print_table(["COMMAND", "AS", "COVERS"], rows)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(
    tool: str = typer.Argument(..., help="sbatch, squeue, bjobs, qstat, ..."),
    args: list[str] = typer.Argument(None, help="the tool's own options and arguments"),
) -> None:
    """Run a familiar command without installing it: xce compat run squeue -u alice."""
    from xce.cli.compat.base import main

    code = main(tool, list(args or []))
    if code:
        raise typer.Exit(code)
