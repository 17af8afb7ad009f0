"""`ApiError`, shared by the async client and the light one-shot client (no aiohttp here)."""

from __future__ import annotations

from urllib.parse import quote


class ApiError(Exception):
    """A JSON error from the controller, or no controller reachable (status 0)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def job_path(job_id: str) -> str:
    """Job ids like `17[5]` are quoted so brackets survive the URL."""
    return quote(job_id, safe="")
