"""`UidCache`: the controller host's uid of a user name, remembered for a few seconds.

Every submit checks whom the job may run as (`check_job_user`), and `pwd.getpwnam` reads
/etc/passwd (or asks NSS: sssd, LDAP) on every call: with files, a full scan for a name that
is not there, about a tenth of a submit request's CPU. Submitters repeat their names, so a
short memory of the answer removes that cost while an edited account is seen within
`ttl_s`; the worker applies the same rule again on its own host when the job launches.
"""

from __future__ import annotations

import time
from collections.abc import Callable

UID_TTL_S = 10.0
MAX_NAMES = 4096  # then the memory starts over: a bound, whatever names requests carry


class UidCache:
    """`uid(name)`: `lookup(name)` (None for an unknown name), answers kept `ttl_s`."""

    def __init__(
        self,
        lookup: Callable[[str], int | None],
        ttl_s: float = UID_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lookup = lookup
        self.ttl_s = ttl_s
        self.clock = clock
        self._known: dict[str, tuple[float, int | None]] = {}

    def uid(self, name: str) -> int | None:
        now = self.clock()
        known = self._known.get(name)
        if known is not None and now < known[0]:
            return known[1]
        uid = self.lookup(name)
        if len(self._known) >= MAX_NAMES:
            self._known.clear()
        self._known[name] = (now + self.ttl_s, uid)
        return uid

    def clear(self) -> None:
        self._known.clear()
