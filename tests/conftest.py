"""Every test: clients read no client file, setting or socket of the machine's own.

The CLI reads the user's `~/.config/xce/client.toml` (written by `xce up` or by hand) and then
`/etc/xce/client.toml` (`XCE_SITE_CONFIG`); either on the machine that runs the tests would
fill in controllers, a token or a CA file the tests did not choose, and so would `XCE_*`
client variables in the environment that started them. Set here, before any fixture starts a
process, the following holds for every command the tests run: an empty home of this run's
own, no inherited client variables, an empty `XCE_SITE_CONFIG` (no site file). Tests of
these files and variables set them themselves.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# What the user's environment could say to a client the tests start.
CLIENT_VARIABLES = (
    "XCE_CONTROLLERS",
    "XCE_TOKEN",
    "XCE_CA_FILE",
    "XCE_INSECURE",
    "XCE_AUTH",
    "XCE_MUNGE_SOCKET",
    "XCE_CLIENT_CONFIG",
    "XCE_TRANSFER_IDLE_TIMEOUT_S",
    "XDG_CONFIG_HOME",
)
for _name in CLIENT_VARIABLES:
    os.environ.pop(_name, None)
TEST_HOME = tempfile.mkdtemp(prefix="xce-tests-home-")
os.environ["HOME"] = TEST_HOME
atexit.register(shutil.rmtree, TEST_HOME, ignore_errors=True)
os.environ["XCE_SITE_CONFIG"] = ""
# The local socket clients use when they have no token, and `xce up` as root listens on:
# one of this run's own, never /run/xce/xce.sock of a cluster on the machine.
_SOCKET_DIR = f"/tmp/xce-tests-{os.getpid()}"
os.environ["XCE_SOCKET"] = f"{_SOCKET_DIR}/xce.sock"
atexit.register(shutil.rmtree, _SOCKET_DIR, ignore_errors=True)
# For a process a test starts with a bare environment of its own (the packaged binary "as a
# new user"): the same site file and socket settings, or `xce up` as root would listen on
# /run/xce/xce.sock and clients would read /etc/xce/client.toml.
ISOLATION = {name: os.environ[name] for name in ("XCE_SITE_CONFIG", "XCE_SOCKET")}
