"""JSON Schemas of request bodies (validated) and responses (documented)."""

from __future__ import annotations

from typing import Any

NAME = {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"}
REASON = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"reason": {"type": "string", "maxLength": 256}},
}
NULLABLE_INT = {"type": ["integer", "null"]}
NULLABLE_STR = {"type": ["string", "null"]}

SUBMIT: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "command": {"type": "string", "maxLength": 65536},
        "script": {"type": "string", "maxLength": 1048576},
        "name": {"type": "string", "maxLength": 128},
        "queue": NAME,
        "user": {"type": "string", "maxLength": 32},
        "slots": {"type": "integer", "minimum": 1, "maximum": 100000},
        "memory_mb": {"type": "integer", "minimum": 0, "maximum": 2**40},
        "walltime_s": {"type": "integer", "minimum": 1, "maximum": 10 * 365 * 86400},
        "env": {
            "type": "object",
            "maxProperties": 1024,
            "additionalProperties": {"type": "string", "maxLength": 65536},
        },
        "cwd": {"type": "string", "maxLength": 4096},
        "array": {"type": "string", "maxLength": 4096},
        "dependency": {"type": "string", "maxLength": 4096},
        "inputs": {
            "type": "object",
            "maxProperties": 10000,
            "additionalProperties": {"type": "string", "maxLength": 64},
        },
        "outputs": {
            "type": "array",
            "maxItems": 1000,
            "items": {"type": "string", "maxLength": 1024},
        },
        "hold": {"type": "boolean"},
        "submit_host": {"type": "string", "maxLength": 255},
        "resources": {"type": "string", "maxLength": 4096},
        "stdout": {"type": "string", "minLength": 1, "maxLength": 4096},
        "stderr": {"type": "string", "minLength": 1, "maxLength": 4096},
        "defer": {"type": "boolean"},
        "gres": {
            "type": "object",
            "maxProperties": 32,
            "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 1000000},
        },
        "licenses": {
            "type": "object",
            "maxProperties": 32,
            "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 1000000},
        },
        "reservation": NAME,
        # sbatch --begin / bsub -b: epoch seconds, or text (xce.core.begin, UTC)
        "begin": {"type": ["number", "string"], "maxLength": 64},
        "priority": {"type": "integer", "minimum": 0, "maximum": 1000000},
        "exclusive": {"type": "boolean"},
        "mem_per_slot_mb": {"type": "integer", "minimum": 0, "maximum": 2**40},
    },
}

# `PATCH /api/v1/jobs/{job_id}` (xce/controller/modify.py): null clears walltime or resources
JOB_MODIFY: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "minProperties": 1,
    "properties": {
        "priority": {"type": ["integer", "null"], "minimum": 0, "maximum": 1000000},
        "queue": NAME,
        "walltime_s": {"type": ["integer", "null"], "minimum": 1, "maximum": 10 * 365 * 86400},
        "slots": {"type": "integer", "minimum": 1, "maximum": 100000},
        "memory_mb": {"type": "integer", "minimum": 0, "maximum": 2**40},
        "resources": {"type": ["string", "null"], "maxLength": 4096},
        "dependency": {"type": ["string", "null"], "maxLength": 4096},
        "name": {"type": "string", "maxLength": 128},
        "hold": {"type": "boolean"},
        "defer": {"type": "boolean"},
    },
}

QUEUE_CREATE: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "properties": {
        "name": NAME,
        "priority": {"type": "integer", "minimum": -1000000, "maximum": 1000000},
        "open": {"type": "boolean"},
        "active": {"type": "boolean"},
        "hosts": {"type": "array", "maxItems": 100000, "items": NAME},
        "description": {"type": "string", "maxLength": 1024},
        "on_host_failure": {"type": "string", "enum": ["requeue", "exit"]},
        "plugins": {"type": "array", "maxItems": 32, "items": NAME},
        # bounded so a value past what the WAL's Int64 holds is a 400 naming the field,
        # not the encoder's `wire_error`
        "max_running": {"type": "integer", "minimum": 1, "maximum": 2**40},
        "max_running_per_user": {"type": "integer", "minimum": 1, "maximum": 2**40},
        "shares": {
            "type": "object",
            "maxProperties": 100000,
            "additionalProperties": {"type": "number", "exclusiveMinimum": 0},
        },
        **{
            key: {"type": "integer", "minimum": 1, "maximum": 2**40}
            for key in (
                "default_walltime_s",
                "max_walltime_s",
                "default_memory_mb",
                "max_memory_mb",
                "max_slots",
            )
        },
        "users": {
            "type": "array",
            "maxItems": 10000,
            "items": {"type": "string", "pattern": r"^@?[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$"},
        },
        "preempt": {"type": "array", "maxItems": 1000, "uniqueItems": True, "items": NAME},
        "preempt_mode": {"type": "string", "enum": ["suspend", "requeue"]},
        "preempt_min_run_s": {"type": "integer", "minimum": 0, "maximum": 10 * 365 * 86400},
    },
}

# `PATCH /api/v1/queues/{name}`: any settings but the name and the open/active switches
# (they have their own actions); null clears a limit or default.
QUEUE_MODIFY: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "minProperties": 1,
    "properties": {
        key: (
            {"type": [value["type"], "null"], **{k: v for k, v in value.items() if k != "type"}}
            if key.startswith(("max_", "default_"))
            else value
        )
        for key, value in QUEUE_CREATE["properties"].items()
        if key not in ("name", "open", "active")
    },
}

# Seconds are bounded (2**40 s: some 35,000 years) so that sums of a job's hosts and of
# fairshare stay finite: an inf in a job record made every job listing unanswerable.
USAGE_FIELDS: dict[str, Any] = {
    "cpu_user_s": {"type": "number", "minimum": 0, "maximum": 2**40},
    "cpu_system_s": {"type": "number", "minimum": 0, "maximum": 2**40},
    "max_rss_bytes": {"type": "integer", "minimum": 0, "maximum": 2**62},
    "wall_time_s": {"type": "number", "minimum": 0, "maximum": 2**40},
    # the granted GPUs' mean utilisation and memory peak, through NVML (issue 17)
    "gpu_util_pct": {"type": "number", "minimum": 0, "maximum": 100},
    "gpu_mem_peak_bytes": {"type": "integer", "minimum": 0, "maximum": 2**62},
}

REGISTER: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["host", "slots", "memory_mb"],
    "properties": {
        "host": NAME,
        "slots": {"type": "integer", "minimum": 1, "maximum": 100000},
        "memory_mb": {"type": "integer", "minimum": 1, "maximum": 2**40},
        "attributes": {
            "type": "object",
            "maxProperties": 256,
            "additionalProperties": {"type": "string", "maxLength": 256},
        },
        # Counted devices by kind: {"gpu": ["0", "1"]} (xce/core/gres.py checks the names).
        "gres": {
            "type": "object",
            "maxProperties": 32,
            "additionalProperties": {
                "type": "array",
                "maxItems": 1024,
                "items": {"type": "string", "maxLength": 128},
            },
        },
        # How the worker contains jobs, e.g. {"kind": "v2", "memory": true, "cores": 2}:
        # shown by `xce host show`, never interpreted, so only its size is checked.
        "containment": {
            "type": "object",
            "maxProperties": 32,
            "propertyNames": {"type": "string", "minLength": 1, "maxLength": 64},
            "additionalProperties": {
                "type": ["string", "number", "boolean", "null"],
                "maxLength": 256,
            },
        },
        # The worker's task service (issue 15: `xce launch`), HOST:PORT.
        # The port is 1-65535 in the pattern itself: a worker announcing h:99999 would be
        # stored and handed to `xce launch` clients, which fail far from the cause.
        "task_address": {
            "type": "string",
            "maxLength": 300,
            "pattern": "^[A-Za-z0-9._:\\[\\]-]+:(6553[0-5]|655[0-2][0-9]|"
            "65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|"
            "[1-9][0-9]{0,3})$",
        },
    },
}

# New bytes of a running job's stdout or stderr (xce/worker/tail.py): base64 of at most
# 64 KiB, at an absolute offset in the stream.
OUTPUT_CHUNK: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["offset", "data"],
    "properties": {
        "offset": {"type": "integer", "minimum": 0, "maximum": 2**62},
        "data": {"type": "string", "maxLength": 4 * (64 * 1024 // 3 + 1)},
    },
}

# One attempt of a job, as the worker names it in heartbeats (running jobs and shares).
ATTEMPT_KEY: dict[str, Any] = {
    "job_id": {"type": "string", "maxLength": 64},
    "attempt": {"type": "integer", "minimum": 0, "maximum": 2**31},
}

HEARTBEAT: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "running": {
            "type": "array",
            "maxItems": 100000,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["job_id", "attempt"],
                "properties": {
                    **ATTEMPT_KEY,
                    **USAGE_FIELDS,
                    "output": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {"stdout": OUTPUT_CHUNK, "stderr": OUTPUT_CHUNK},
                    },
                },
            },
        },
        "load": {"type": "object", "additionalProperties": {"type": "number"}},
        # the shares this host holds of multi-host jobs (issue 15; xce/controller/shareusage.py)
        "shares": {
            "type": "array",
            "maxItems": 100000,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["job_id", "attempt"],
                "properties": {
                    **ATTEMPT_KEY,
                    "cpu_user_s": USAGE_FIELDS["cpu_user_s"],
                    "cpu_system_s": USAGE_FIELDS["cpu_system_s"],
                    "max_rss_bytes": USAGE_FIELDS["max_rss_bytes"],
                    "oom_killed": {"type": "boolean"},
                },
            },
        },
    },
}

FINISHED: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["attempt", "exit_code"],
    "properties": {
        "attempt": ATTEMPT_KEY["attempt"],
        "exit_code": {"type": ["integer", "null"], "minimum": -(2**31), "maximum": 2**31},
        "exit_signal": {"type": ["integer", "null"], "minimum": 0, "maximum": 255},
        "reason": {"type": "string", "maxLength": 1024},
        "outputs": {
            "type": "array",
            "maxItems": 10000,
            "items": {"type": "string", "maxLength": 1024},
        },
        "host_failure": {"type": "boolean"},
        **USAGE_FIELDS,
    },
}

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

VOTE: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["epoch", "candidate", "last_epoch", "last_seq"],
    "properties": {
        "epoch": {"type": "integer", "minimum": 1},
        "candidate": {"type": "string", "maxLength": 2048},
        "last_epoch": {"type": "integer", "minimum": 0},
        "last_seq": {"type": "integer", "minimum": 0},
    },
}

SWITCHOVER: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"to": {"type": "string", "maxLength": 2048}},
}
