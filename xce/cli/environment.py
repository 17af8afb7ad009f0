"""The submitter's environment, captured at submit for the job (`--export`, like sbatch).

Default `ALL`, as sbatch and bsub do: a job sees the variables of the shell that submitted
it (modules, conda, PATH...). Not captured, because the execution host owns them:

- `XCE_*`: the worker sets the job's own (`XCE_JOB_ID`...), and `XCE_TOKEN` is a credential
  that must never travel with a job (the controller also refuses `XCE_*` names);
- `HOME`, `USER`, `LOGNAME`, `SHELL`: the job's user on the execution host (the worker sets
  them from the user's account, after the submitted ones);
- shell bookkeeping that means nothing elsewhere: `PWD`, `OLDPWD`, `SHLVL`, `_`;
- names that are not valid variable names (`BASH_FUNC_x%%` exported functions);
- what the packaged `xce`'s own bootloader (PyInstaller) set for itself: `_PYI_*`,
  `_MEIPASS2`, `LD_LIBRARY_PATH_ORIG`; its `LD_LIBRARY_PATH`, pointing into an unpack
  directory, is replaced by the one the shell had (`LD_LIBRARY_PATH_ORIG`), or dropped.

`PATH` is passed as submitted (the worker's default applies only when it is not). The size
is limited (`MAX_VARIABLES`, `MAX_BYTES`) so that a huge environment is a clear error at
submit rather than a refused request body.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping

OWNED = frozenset({"HOME", "USER", "LOGNAME", "SHELL"})
SKIPPED = frozenset({"PWD", "OLDPWD", "SHLVL", "_", "_MEIPASS2", "LD_LIBRARY_PATH_ORIG"})
MAX_VARIABLES = 1000
MAX_BYTES = 256 * 1024
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class EnvironmentTooLarge(ValueError):
    pass


def exportable(name: str) -> bool:
    return (
        bool(_NAME.match(name))
        and not name.startswith(("XCE_", "_PYI_"))
        and name not in OWNED
        and name not in SKIPPED
    )


def _submitters_view(environ: Mapping[str, str]) -> Mapping[str, str]:
    """The environment as the submitter's shell had it, before a frozen `xce` started: the
    bootloader saved the shell's LD_LIBRARY_PATH in LD_LIBRARY_PATH_ORIG (when it had one)
    and put its unpack directory (sys._MEIPASS) in front."""
    unpacked = getattr(sys, "_MEIPASS", None)
    if "LD_LIBRARY_PATH_ORIG" not in environ and not unpacked:
        return environ
    view = dict(environ)
    if "LD_LIBRARY_PATH_ORIG" in environ:
        view["LD_LIBRARY_PATH"] = environ["LD_LIBRARY_PATH_ORIG"]
    elif "LD_LIBRARY_PATH" in view:
        kept = [p for p in view["LD_LIBRARY_PATH"].split(":") if p != unpacked]
        if kept:
            view["LD_LIBRARY_PATH"] = ":".join(kept)
        else:
            del view["LD_LIBRARY_PATH"]
    return view


def export_environment(spec: str | None, environ: Mapping[str, str]) -> dict[str, str]:
    """`ALL` (default), `NONE`, or `[ALL,]VAR[,VAR=VALUE...]` (sbatch's `--export`)."""
    spec = (spec or "ALL").strip()
    environ = _submitters_view(environ)
    out: dict[str, str] = {}
    items = [item.strip() for item in spec.split(",") if item.strip()]
    upper = [item.upper() for item in items]
    if "NONE" in upper and len(items) > 1:
        raise ValueError("--export NONE cannot be combined with other names")
    if "ALL" in upper or not items:
        out.update({k: v for k, v in environ.items() if exportable(k)})
    for item in items:
        if item.upper() in ("ALL", "NONE"):
            continue
        name, eq, value = item.partition("=")
        if not _NAME.match(name):
            raise ValueError(f"--export: {name!r} is not a variable name")
        if name.startswith("XCE_") or name in OWNED:
            raise ValueError(f"--export: {name} is set by the execution host, not exported")
        if eq:
            out[name] = value
        elif name in environ:
            out[name] = environ[name]
    check_size(out)
    return out


def check_size(env: Mapping[str, str]) -> None:
    size = sum(len(k.encode()) + len(v.encode()) + 2 for k, v in env.items())
    if len(env) <= MAX_VARIABLES and size <= MAX_BYTES:
        return
    largest = sorted(env, key=lambda k: len(env[k]), reverse=True)[:3]
    names = ", ".join(f"{k} ({len(env[k].encode()) // 1024} KiB)" for k in largest)
    raise EnvironmentTooLarge(
        f"the environment to export has {len(env)} variables, {size // 1024} KiB (limit "
        f"{MAX_VARIABLES} and {MAX_BYTES // 1024} KiB; largest: {names}): use --export NONE "
        "or --export VAR,VAR=VALUE,..."
    )
