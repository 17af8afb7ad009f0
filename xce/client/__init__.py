"""The failover-aware async client used by the CLI, the TUI and workers.

`XceClient` is imported on first use (it brings aiohttp); `ApiError` and the light one-shot
client (`xce.client.light`) do not need it.
"""

from typing import Any

from xce.client.errors import ApiError

__all__ = ["ApiError", "XceClient"]


def __getattr__(name: str) -> Any:
    if name == "XceClient":
        from xce.client.http import XceClient

        return XceClient
    raise AttributeError(name)
