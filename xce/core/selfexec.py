"""The command line that runs one of XCE's own modules in a child process.

`python -m xce` puts the working directory first on `sys.path`, so a folder named `xce`
wherever the user happens to stand (a checkout of this project, a job's directory, a project
of the same name) is imported instead of the installed package, and the child fails before
any of our code runs. `-P` (Python 3.11, the project's minimum) leaves the working directory
out; the package is then found only where it is installed: site-packages, an editable
install, or PYTHONPATH. The packaged binary runs itself (callers check `sys.frozen`).
"""

from __future__ import annotations

import sys


def python_module(module: str) -> list[str]:
    """`[python, "-P", "-m", module]` for this interpreter: arguments follow."""
    return [sys.executable, "-P", "-m", module]
