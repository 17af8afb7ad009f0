"""Process logging: plain text for people, or one JSON object a line for log shippers.

`XCE_LOG_FORMAT=json` switches every role to JSON lines. The API stores each request's id in
`REQUEST_ID` (a context variable, so it follows the request through awaits and into every log
line written on its behalf); both formats carry it, which ties a client's error message
("request id 3f2a...") to the server's log.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
from datetime import UTC, datetime

REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("xce_request_id", default="")


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = REQUEST_ID.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, request_id."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        request_id = getattr(record, "request_id", "")
        if request_id:
            entry["request_id"] = request_id
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def setup_logging(verbose: bool = False) -> None:
    """Configure the root logger once for a role process (format from XCE_LOG_FORMAT)."""
    handler = logging.StreamHandler()
    handler.addFilter(_RequestIdFilter())
    if os.environ.get("XCE_LOG_FORMAT", "text").lower() == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
