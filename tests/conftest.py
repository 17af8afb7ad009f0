"""Every test: clients read no site-wide client file, and no system controller socket.

The CLI reads `/etc/xce/client.toml` after the user's own settings (`XCE_SITE_CONFIG`); one on
the machine that runs the tests would fill in controllers or a CA the tests did not choose.
An empty `XCE_SITE_CONFIG` means no site file; set here, before any fixture starts a process,
it holds for every command the tests run. Tests of the site file set it themselves.
"""

from __future__ import annotations

import atexit
import os
import shutil

os.environ["XCE_SITE_CONFIG"] = ""
# The local socket clients use when they have no token, and `xce up` as root listens on:
# one of this run's own, never /run/xce/xce.sock of a cluster on the machine.
_SOCKET_DIR = f"/tmp/xce-tests-{os.getpid()}"
os.environ["XCE_SOCKET"] = f"{_SOCKET_DIR}/xce.sock"
atexit.register(shutil.rmtree, _SOCKET_DIR, ignore_errors=True)
