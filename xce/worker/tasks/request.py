"""A request to the task service (xce/worker/tasks/service.py): one JSON line from job code,
checked field by field before anything runs (TaskRefused names the first bad field).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from xce.worker.tasks.wire import MAX_REQUEST, VERSION

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\[\]-]{0,127}")
MAX_ARGS = 4096
MAX_ENV = 1024


class TaskRefused(Exception):
    """A request the service will not run; the message goes back to the caller."""


class NotHere(TaskRefused):
    """No such attempt on this host (yet: a share arrives with the host's next poll)."""


@dataclass(frozen=True)
class TaskRequest:
    job_id: str
    attempt: int
    credential: str
    host: str
    argv: tuple[str, ...]
    env: dict[str, str]
    task_id: int
    local_task_id: int


def _int(body: dict[str, Any], key: str, top: int) -> int:
    value = body.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
        raise TaskRefused(f"{key} must be an integer from 0 to {top}")
    return value


def _text(value: Any, what: str, limit: int) -> str:
    if not isinstance(value, str) or "\0" in value or len(value) > limit:
        raise TaskRefused(f"{what} must be a string of at most {limit} characters, no NUL")
    return value


def parse_request(line: bytes) -> TaskRequest:
    """The request, checked field by field (TaskRefused names the first bad one)."""
    try:
        body = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):
        # RecursionError: `[[[[...` nested deeper than the parser's stack, well within the
        # size limit; uncaught it killed the connection unanswered with a logged traceback.
        raise TaskRefused("the request is not one JSON line") from None
    allowed = {
        "v",
        "job_id",
        "attempt",
        "credential",
        "host",
        "argv",
        "env",
        "task_id",
        "local_task_id",
    }
    if not isinstance(body, dict) or not allowed >= set(body) or body.get("v") != VERSION:
        raise TaskRefused(
            f"the request must be an object of version {VERSION} with the keys "
            + ", ".join(sorted(allowed))
        )
    job_id = _text(body.get("job_id"), "job_id", 128)
    if not _JOB_ID.fullmatch(job_id):
        raise TaskRefused("job_id is not a job id")
    argv = body.get("argv")
    if not isinstance(argv, list) or not 1 <= len(argv) <= MAX_ARGS:
        raise TaskRefused(f"argv must be a list of 1 to {MAX_ARGS} strings")
    args = tuple(_text(a, "each argument", MAX_REQUEST) for a in argv)
    if not args[0]:
        raise TaskRefused("argv[0] is empty")
    env = body.get("env") or {}
    if not isinstance(env, dict) or len(env) > MAX_ENV:
        raise TaskRefused(f"env must be an object of at most {MAX_ENV} variables")
    for name, value in env.items():
        if not _ENV_NAME.fullmatch(name):
            raise TaskRefused(f"bad variable name {name[:40]!r}")
        _text(value, f"variable {name}", MAX_REQUEST)
    return TaskRequest(
        job_id,
        _int(body, "attempt", 1 << 31),
        _text(body.get("credential"), "credential", 128),
        _text(body.get("host"), "host", 256),
        args,
        dict(env),
        _int(body, "task_id", 1 << 20),
        _int(body, "local_task_id", 1 << 20),
    )
