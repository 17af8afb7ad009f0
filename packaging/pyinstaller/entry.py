"""The frozen entry point of the single `xce` binary (PyInstaller onefile).

Every role and verb lives in one executable: `xce up` starts its controller and worker as
`[sys.executable, "controller", ...]`, i.e. this binary again. Two things make that work:

* `PYINSTALLER_RESET_ENVIRONMENT=1`: without it the bootloader of a spawned copy takes the
  spawner's private `_PYI_*` variables as its own. With it every role is an independent
  instance that unpacks its own copy, so it does not depend on the `xce up` that started it.
* The original `LD_LIBRARY_PATH`: the bootloader prepends its unpack directory and keeps the
  user's value in `LD_LIBRARY_PATH_ORIG` (unset if there was none). The reset above does not
  undo that, so a role started by `xce up` would take `xce up`'s unpack directory for "the
  original" and the worker would hand it to every job (xce/worker/attempt/executor.py gives jobs
  `LD_LIBRARY_PATH_ORIG`). So the true original is put back here, for this process's children,
  before anything runs; the running process itself is not affected (the dynamic loader read
  its value at start-up).
"""

from __future__ import annotations

import os
import sys


def _restore_environment() -> None:
    env = os.environ
    env["PYINSTALLER_RESET_ENVIRONMENT"] = "1"
    original = env.get("LD_LIBRARY_PATH_ORIG")
    if original is None:
        env.pop("LD_LIBRARY_PATH", None)
    else:
        env["LD_LIBRARY_PATH"] = original


def main() -> None:
    if getattr(sys, "frozen", False):
        _restore_environment()
    if sys.argv[1:2] == ["keeper"]:
        # The worker's keeper launcher (xce/worker/keeper/process.py): no CLI, nothing else
        # imported.
        from xce.worker.keeper.process import main as keeper_main

        keeper_main(sys.argv[2:])
        return
    from xce.cli.main import run

    run()


if __name__ == "__main__":
    main()
