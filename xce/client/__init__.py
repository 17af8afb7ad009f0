"""The failover-aware async client used by the CLI, the TUI and workers."""

from xce.client.http import ApiError, XceClient

__all__ = ["ApiError", "XceClient"]
