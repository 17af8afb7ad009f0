"""Which actions the console offers: from `whoami` permissions, or a fallback that hides none.

With the RBAC API (`GET /api/v1/auth/whoami` -> permissions like `job:control:self`,
`host:admin`) an action is offered only when a permission grants it. A controller without that
endpoint (404) gives `Access.unknown()`: everything is offered and the server's 403 is shown
when it refuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# action name -> the permission class the route table guards it with
ACTION_PERMISSIONS = {
    "job.suspend": "job:control",
    "job.resume": "job:control",
    "job.requeue": "job:control",
    "job.kill": "job:control",
    "queue.open": "queue:admin",
    "queue.close": "queue:admin",
    "queue.activate": "queue:admin",
    "queue.deactivate": "queue:admin",
    "host.open": "host:admin",
    "host.close": "host:admin",
    "host.drain": "host:admin",
}


@dataclass(frozen=True)
class Access:
    user: str
    roles: tuple[str, ...]
    permissions: frozenset[str] | None  # None: the server did not say (no whoami)

    @classmethod
    def unknown(cls, user: str = "?") -> Access:
        return cls(user, (), None)

    @classmethod
    def from_whoami(cls, data: dict[str, Any]) -> Access:
        return cls(
            str(data.get("user", "?")),
            tuple(data.get("roles", ())),
            frozenset(data.get("permissions", ())),
        )

    def grants(self, permission: str) -> bool:
        if self.permissions is None:
            return True
        perms = self.permissions
        return (
            "*" in perms
            or permission in perms
            or any(p.startswith(permission + ":") for p in perms)
        )

    def allows(self, action: str) -> bool:
        return self.grants(ACTION_PERMISSIONS[action])

    @property
    def source(self) -> str:
        return "whoami" if self.permissions is not None else "server decides (no whoami)"
