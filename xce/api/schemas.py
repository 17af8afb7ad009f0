"""JSON Schemas of documented responses. Request bodies are msgspec Structs
(xce/api/bodies.py, admin_bodies.py, auth_bodies.py, protocol.py)."""

from __future__ import annotations

NULLABLE_INT = {"type": ["integer", "null"]}
NULLABLE_STR = {"type": ["string", "null"]}

USAGE_VIEW = {
    "type": "object",
    "properties": {
        "cpu_time_s": {"type": "number"},
        "cpu_user_s": {"type": "number"},
        "cpu_system_s": {"type": "number"},
        "max_rss_bytes": {"type": "integer"},
        "wall_time_s": {"type": "number"},
    },
}

JOB_VIEW = {
    "type": "object",
    "required": ["id", "kind", "state", "user", "queue"],
    "properties": {
        "id": {"type": "string"},
        "kind": {"type": "string"},
        "name": {"type": "string"},
        "user": {"type": "string"},
        "queue": {"type": "string"},
        "state": {
            "type": "string",
            "enum": ["PEND", "PSUSP", "RUN", "USUSP", "SSUSP", "DONE", "EXIT"],
        },
        "host": NULLABLE_STR,
        "exit_code": NULLABLE_INT,
        "exit_signal": NULLABLE_INT,
        "usage": USAGE_VIEW,
        # a finished multi-host job only: each host's part of `usage` (issue 15)
        "host_usage": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "host": {"type": "string"},
                    "cpu_time_s": {"type": "number"},
                    "cpu_user_s": {"type": "number"},
                    "cpu_system_s": {"type": "number"},
                    "max_rss_bytes": {"type": "integer"},
                },
            },
        },
        # What happened to the job, oldest first (xce/controller/history.py); `at` is null
        # where a controller restart lost the time.
        "history": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["at", "event", "detail"],
                "properties": {
                    "at": {"type": ["number", "null"]},
                    "event": {"type": "string"},
                    "detail": {"type": "string"},
                },
            },
        },
    },
}

TAIL_VIEW = {
    "type": "object",
    "required": [
        "job_id",
        "stream",
        "attempt",
        "state",
        "running",
        "offset",
        "next_offset",
        "end",
        "data",
        "truncated",
    ],
    "properties": {
        "job_id": {"type": "string"},
        "stream": {"type": "string", "enum": ["stdout", "stderr"]},
        "attempt": {"type": "integer"},
        "state": {"type": "string"},
        "running": {
            "type": "boolean",
            "description": "served from the live tail (the job "
            "is active); false: from the output file the worker returned",
        },
        "offset": {"type": "integer", "description": "byte offset of the first byte of data"},
        "next_offset": {"type": "integer", "description": "ask from here next time"},
        "end": {"type": "integer", "description": "end of what the controller holds now"},
        "data": {
            "type": "string",
            "description": "the bytes as UTF-8 text (invalid bytes "
            "replaced); never splits a character",
        },
        "truncated": {
            "type": "boolean",
            "description": "bytes between the requested "
            "offset (0 when none was given) and offset are no longer held",
        },
    },
}

ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
        }
    },
}
