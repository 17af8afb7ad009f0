"""What job code sends the task service (xce/worker/tasks/service.py): a hello (who asks,
with the proof of the credential) and, once that is accepted, the request (what to run),
each checked field by field before anything runs (TaskRefused names the first bad field).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from xce.worker.tasks.wire import MAX_REQUEST, NONCE_BYTES, VERSION

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\[\]-]{0,127}")
_PROOF = re.compile(r"[0-9a-f]{64}")
MAX_ARGS = 4096
MAX_ENV = 1024


class TaskRefused(Exception):
    """A request the service will not run; the message goes back to the caller."""


@dataclass(frozen=True)
class Hello:
    """Who asks: the attempt, the host it thinks it talks to, its own nonce and the proof
    (hex) that it holds the attempt's credential, over both ends' nonces
    (xce/worker/tasks/wire.py `proof`)."""

    job_id: str
    attempt: int
    host: str
    proof: str
    nonce: bytes = b""


@dataclass(frozen=True)
class TaskRequest:
    job_id: str
    attempt: int
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


def _object(data: bytes, allowed: set[str], what: str) -> dict[str, Any]:
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        # RecursionError: `[[[[...` nested deeper than the parser's stack, well within the
        # size limit; uncaught it killed the connection unanswered with a logged traceback.
        raise TaskRefused(f"the {what} is not one JSON object") from None
    if not isinstance(body, dict) or not allowed >= set(body):
        raise TaskRefused(
            f"the {what} must be an object with the keys " + ", ".join(sorted(allowed))
        )
    return body


def parse_hello(data: bytes) -> Hello:
    """The hello, checked field by field: nothing here says whether the attempt exists."""
    body = _object(data, {"v", "job_id", "attempt", "host", "nonce", "proof"}, "hello")
    if body.get("v") != VERSION:
        raise TaskRefused(f"the hello must be of version {VERSION} (an `xce launch` of this build)")
    job_id = _text(body.get("job_id"), "job_id", 128)
    if not _JOB_ID.fullmatch(job_id):
        raise TaskRefused("job_id is not a job id")
    proof = _text(body.get("proof"), "proof", 64)
    if not _PROOF.fullmatch(proof):
        raise TaskRefused("proof must be 64 hexadecimal digits")
    nonce = _text(body.get("nonce"), "nonce", 2 * NONCE_BYTES)
    if not re.fullmatch(f"[0-9a-f]{{{2 * NONCE_BYTES}}}", nonce):
        raise TaskRefused(f"nonce must be {2 * NONCE_BYTES} hexadecimal digits")
    return Hello(
        job_id,
        _int(body, "attempt", 1 << 31),
        _text(body.get("host"), "host", 256),
        proof,
        bytes.fromhex(nonce),
    )


def parse_request(data: bytes, hello: Hello) -> TaskRequest:
    """The request of an accepted hello, checked field by field (TaskRefused names the
    first bad one)."""
    body = _object(data, {"argv", "env", "task_id", "local_task_id"}, "request")
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
        hello.job_id,
        hello.attempt,
        hello.host,
        args,
        dict(env),
        _int(body, "task_id", 1 << 20),
        _int(body, "local_task_id", 1 << 20),
    )
