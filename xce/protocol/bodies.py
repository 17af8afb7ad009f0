"""Request bodies of the API, each declared once as a msgspec Struct.

The Struct is what the handler decodes (`xce.api.http.read_body`), what the OpenAPI
document shows (`xce.api.openapi`), and, for the submit body, what the CLI sends and the
service turns into a `JobSpec`. msgspec was chosen over pydantic for its decoding speed
(the submit path is CPU bound): it decodes and checks bytes in one pass.
Bounds keep numbers inside what the WAL's Int64 and the job records hold, so an absurd
value is a 400 naming the field, not an encoder error later.
"""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import UNSET, Meta, Struct, UnsetType, field

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
Name = Annotated[str, Meta(pattern=NAME_PATTERN)]
Slots = Annotated[int, Meta(ge=1, le=100000)]
MemoryMb = Annotated[int, Meta(ge=0, le=2**40)]
Seconds = Annotated[int, Meta(ge=1, le=10 * 365 * 86400)]
Priority = Annotated[int, Meta(ge=0, le=1000000)]
Count = Annotated[int, Meta(ge=0, le=1000000)]


Text32 = Annotated[str, Meta(max_length=32)]
Text64 = Annotated[str, Meta(max_length=64)]
Text128 = Annotated[str, Meta(max_length=128)]
Text255 = Annotated[str, Meta(max_length=255)]
Text256 = Annotated[str, Meta(max_length=256)]
Text1K = Annotated[str, Meta(max_length=1024)]
Text2K = Annotated[str, Meta(max_length=2048)]
Text4K = Annotated[str, Meta(max_length=4096)]
Text64K = Annotated[str, Meta(max_length=65536)]
Text1M = Annotated[str, Meta(max_length=1048576)]
Path4K = Annotated[str, Meta(min_length=1, max_length=4096)]


class Body(Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True, frozen=True):
    """Every body: unknown keys refused (with the key named), defaults left out when the
    CLI encodes one."""


class SubmitBody(Body, frozen=True, kw_only=True):
    """`POST /api/v1/jobs`: one job or an array. The service checks what JSON Schema
    cannot say (exactly one of command or script, the small languages of `resources`,
    `array`, `dependency` and `begin`) in `ControllerService.submit`."""

    command: Text64K | None = None
    script: Text1M | None = None
    name: Text128 = ""
    queue: Name | None = None  # None: [controller] default_queue
    user: Text32 = ""  # "": the caller; another user needs job:control on all jobs
    slots: Slots = 1
    memory_mb: MemoryMb = 0
    walltime_s: Seconds | None = None
    env: Annotated[dict[str, Text64K], Meta(max_length=1024)] = field(default_factory=dict)
    cwd: Text4K | None = None
    array: Text4K | None = None
    dependency: Text4K | None = None
    # job path -> upload id
    inputs: Annotated[dict[str, Text64], Meta(max_length=10000)] = field(default_factory=dict)
    outputs: Annotated[tuple[Text1K, ...], Meta(max_length=1000)] = ()
    hold: bool = False
    # Ignored: the controller sets it from the connection (xce/api/jobs.py submit_host_of);
    # kept so that older clients, which sent their host name, are not refused.
    submit_host: Text255 = ""
    resources: Text4K = ""
    stdout_file: Path4K | None = field(default=None, name="stdout")
    stderr_file: Path4K | None = field(default=None, name="stderr")
    # Skip the check that some host could ever run the job (xce/sched/admission/feasibility.py),
    # for hosts that have not registered yet.
    defer: bool = False
    # Generic resources per host ({"gpu": 1}) and cluster-wide licenses ({"matlab": 1});
    # `rusage[gpu=1]` in `resources` asks the same (xce/controller/gres_rules.py).
    gres: Annotated[dict[str, Count], Meta(max_length=32)] = field(default_factory=dict)
    licenses: Annotated[dict[str, Count], Meta(max_length=32)] = field(default_factory=dict)
    reservation: Name = ""  # the advance reservation to run in
    # Not eligible before this time (sbatch --begin / bsub -b): epoch seconds, or text that
    # xce.core.begin reads in UTC; None: at once.
    begin: float | Text64 | None = None
    priority: Priority | None = None  # None: the default
    # Multi-host jobs: whole hosts; memory per slot (--mem-per-cpu) instead of
    # memory_mb per host (--mem).
    exclusive: bool = False
    mem_per_slot_mb: MemoryMb = 0
    # The directory the job was submitted from (absolute): its working directory on the
    # execution host unless `cwd` is given, as with sbatch and bsub.
    submit_dir: Path4K | None = None
    # The accounting group to charge (sbatch --account, bsub -P/-G): one of the user's
    # groups where the site declares groups.
    account: Name | None = None
    # A Slurm QOS name: picks the queue that lists it among its aliases when no queue is
    # named; otherwise ignored with a warning in the answer.
    qos: Name | None = None


def given(body: Struct) -> dict[str, Any]:
    """The fields a client sent in a body whose fields default to UNSET (a PATCH): null is
    sent (it clears), absent is not."""
    return {
        name: value
        for name in body.__struct_fields__
        if (value := getattr(body, name)) is not UNSET
    }


class Patch(Body, frozen=True, kw_only=True):
    """A PATCH body: every field optional, null clears where the type allows it, and at
    least one field."""

    def __post_init__(self) -> None:
        if not any(getattr(self, name) is not UNSET for name in self.__struct_fields__):
            # Here, not at the top: `xce job submit` imports this module to send a
            # SubmitBody and needs none of the decoder's error wording.
            from xce.protocol.decoding import refuse

            raise refuse(" needs at least 1 entry")


# The OpenAPI form of a Patch: JSON Schema states the "at least one field" rule itself.
AT_LEAST_ONE = Meta(extra_json_schema={"minProperties": 1})


class JobModify(Patch, frozen=True, kw_only=True):
    """`PATCH /api/v1/jobs/{job_id}` (xce/controller/modify.py): null clears walltime,
    resources, dependency or priority."""

    priority: Priority | UnsetType | None = UNSET
    queue: Name | UnsetType = UNSET
    walltime_s: Seconds | UnsetType | None = UNSET
    slots: Slots | UnsetType = UNSET
    memory_mb: MemoryMb | UnsetType = UNSET
    resources: Text4K | UnsetType | None = UNSET
    dependency: Text4K | UnsetType | None = UNSET
    name: Text128 | UnsetType = UNSET
    hold: bool | UnsetType = UNSET
    defer: bool | UnsetType = UNSET
