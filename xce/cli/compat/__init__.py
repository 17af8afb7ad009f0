"""Familiar commands (`sbatch`, `squeue`, `bsub`, `bjobs`, `qsub`, ...) on top of XCE.

Why: sites move users and their scripts over one at a time; scripts that call `squeue -u
$USER -h -o %i` or parse `Submitted batch job N` keep working if those names exist and
answer in the format the real tools use. `xce compat install` makes symlinks with those
names to the `xce` executable; the entry point (xce/cli/main.py) looks at the name it was
started as and runs the tool here, before anything else is imported: these commands start
like `xce job list`, not like the Typer tree. `xce compat run TOOL ARGS...` does the same
without symlinks.

This module is imported on every start of `xce` (to read the name), so it holds only the
table of names: the tools live in `slurm.py`, `slurm_info.py`, `scontrol.py`, `lsf.py` and
`pbs.py`, shared parts in `base.py`, `formats.py` and `submit.py`, the installer in
`install.py`, the `xce compat` commands in `commands.py`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# tool -> (module, family); the module has a function named like the tool.
TOOLS: dict[str, tuple[str, str]] = {
    "sbatch": ("xce.cli.compat.slurm", "Slurm"),
    "squeue": ("xce.cli.compat.slurm", "Slurm"),
    "scancel": ("xce.cli.compat.slurm", "Slurm"),
    "sacct": ("xce.cli.compat.slurm_info", "Slurm"),
    "sinfo": ("xce.cli.compat.slurm_info", "Slurm"),
    "scontrol": ("xce.cli.compat.scontrol", "Slurm"),
    "bsub": ("xce.cli.compat.lsf", "LSF"),
    "bjobs": ("xce.cli.compat.lsf", "LSF"),
    "bkill": ("xce.cli.compat.lsf", "LSF"),
    "bqueues": ("xce.cli.compat.lsf", "LSF"),
    "bhosts": ("xce.cli.compat.lsf", "LSF"),
    "qsub": ("xce.cli.compat.pbs", "PBS"),
    "qstat": ("xce.cli.compat.pbs", "PBS"),
    "qdel": ("xce.cli.compat.pbs", "PBS"),
}


def invoked_as(argv0: str, environ: Mapping[str, str], executable: str) -> str | None:
    """The tool this process was started as (the name of the symlink), or None for `xce`.

    Inside the AppImage the process's own name is the bundled binary's; the AppImage
    runtime passes the name it was started as in `ARGV0`. That variable is inherited by
    whatever the tool starts (and a job would carry it in its environment), so it counts
    only while this process really runs from that AppImage's mount (`APPDIR`)."""
    name = os.path.basename(argv0)
    if name in TOOLS:
        return name
    appdir, outer = environ.get("APPDIR"), environ.get("ARGV0")
    if appdir and outer and os.path.realpath(executable).startswith(appdir.rstrip("/") + "/"):
        outer_name = os.path.basename(outer)
        if outer_name in TOOLS:
            return outer_name
    return None
