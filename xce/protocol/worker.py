"""The worker protocol's messages (register, heartbeat, finish report), each declared once
as a msgspec Struct: the API decodes them (xce/api/workers.py), the OpenAPI document shows
them, and the controller takes the running-job reports as they are (`RunReport`)."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta, Struct, field

from xce.core.versions import RELEASE, WORKER_PROTOCOL, skew_problem
from xce.protocol.bodies import Body, Name, Slots, Text1K, Text64, Text128, Text256

# Seconds are bounded (2**40 s: some 35,000 years) so that sums of a job's hosts and of
# fairshare stay finite: an inf in a job record made every job listing unanswerable.
CpuSeconds = Annotated[float, Meta(ge=0, le=2**40)]
Bytes = Annotated[int, Meta(ge=0, le=2**62)]
Attempt = Annotated[int, Meta(ge=0, le=2**31)]
# The worker's task service (`xce launch`), HOST:PORT. The port is 1-65535 in
# the pattern itself: a worker announcing h:99999 would be stored and handed to
# `xce launch` clients, which fail far from the cause.
TaskAddress = Annotated[
    str,
    Meta(
        max_length=300,
        pattern="^[A-Za-z0-9._:\\[\\]-]+:(6553[0-5]|655[0-2][0-9]|"
        "65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})$",
    ),
]
# A number a worker reports that the host record keeps and shows: finite (JSON has no
# infinity, and `1e400` reads as one), or no listing of hosts could be answered.
Reading = Annotated[float, Meta(ge=-(2**40), le=2**40)]  # exact near the bounds, unlike 2**53
# How the worker contains jobs, e.g. {"kind": "v2", "memory": true, "cores": 2}: shown by
# `xce host show`, never interpreted, so only its size is checked.
Containment = Annotated[
    dict[
        Annotated[str, Meta(min_length=1, max_length=64)],
        Text256 | int | Reading | bool | None,
    ],
    Meta(max_length=32),
]


class Register(Body, frozen=True, kw_only=True):
    """`POST /api/v1/workers/register`: a worker and what it offers."""

    host: Name
    slots: Slots
    memory_mb: Annotated[int, Meta(ge=1, le=2**40)]
    attributes: Annotated[dict[str, Text256], Meta(max_length=256)] = field(default_factory=dict)
    # Counted devices by kind: {"gpu": ["0", "1"]} (xce/core/gres.py checks the names).
    gres: Annotated[
        dict[str, Annotated[tuple[Text128, ...], Meta(max_length=1024)]], Meta(max_length=32)
    ] = field(default_factory=dict)
    containment: Containment = field(default_factory=dict)
    task_address: TaskAddress | None = None  # None: no task service
    # The worker's build and protocol (xce/core/versions.py); absent from a worker before
    # versions were sent (protocol 1). A controller checks them before anything else.
    release: Text64 = ""
    protocol: Annotated[int, Meta(ge=1, le=2**31)] = 1


def registration_refusal(protocol: object, release: object) -> str | None:
    """Why a controller of this build refuses a worker registering with `protocol` and
    `release` (read from the body before it is decoded: a newer worker's body may hold
    fields this build does not know); None when it may register."""
    theirs = protocol if isinstance(protocol, int) and protocol >= 1 else 1
    shown = release if isinstance(release, str) and release else "before 0.2.0"
    if theirs > WORKER_PROTOCOL:
        return (
            f"worker xce {shown} speaks worker protocol {theirs}; this controller (xce "
            f"{RELEASE}) knows ≤ {WORKER_PROTOCOL}: upgrade the controllers first (a worker "
            "may be one minor release older than its controller, never newer)"
        )
    if isinstance(release, str) and release:
        return skew_problem(release, "worker", newer_minors=0)
    return None


class Usage(Body, frozen=True, kw_only=True):
    """What a job attempt used, as the worker measured it."""

    cpu_user_s: CpuSeconds = 0.0
    cpu_system_s: CpuSeconds = 0.0
    max_rss_bytes: Bytes = 0
    wall_time_s: CpuSeconds = 0.0
    # the granted GPUs' mean utilisation and memory peak, through NVML
    gpu_util_pct: Annotated[float, Meta(ge=0, le=100)] = 0.0
    gpu_mem_peak_bytes: Bytes = 0


class RunReport(Usage, frozen=True, kw_only=True):
    """One job attempt a worker says it is running, with its latest usage."""

    job_id: Text64
    attempt: Attempt


class OutputChunk(Body, frozen=True, kw_only=True):
    """New bytes of a running job's stdout or stderr (xce/worker/agent/tail.py): base64 of at
    most 64 KiB, at an absolute offset in the stream."""

    offset: Bytes
    data: Annotated[str, Meta(max_length=4 * (64 * 1024 // 3 + 1))]


class Output(Body, frozen=True, kw_only=True):
    stdout: OutputChunk | None = None
    stderr: OutputChunk | None = None


class RunningJob(RunReport, frozen=True, kw_only=True):
    """A heartbeat's report of one running attempt; `output` goes to the live tails."""

    output: Output | None = None


class ShareItem(Body, frozen=True, kw_only=True):
    """A share this host holds of a multi-host job (xce/controller/shareusage.py)."""

    job_id: Text64
    attempt: Attempt
    cpu_user_s: CpuSeconds = 0.0
    cpu_system_s: CpuSeconds = 0.0
    max_rss_bytes: Bytes = 0
    oom_killed: bool = False


class Heartbeat(Body, frozen=True, kw_only=True):
    """`POST /api/v1/workers/{host}/heartbeat`."""

    running: Annotated[tuple[RunningJob, ...], Meta(max_length=100000)] = ()
    load: dict[str, Reading] = field(default_factory=dict)
    shares: Annotated[tuple[ShareItem, ...], Meta(max_length=100000)] = ()


# The most heartbeats one relayed batch carries (a relay sends more as several batches),
# and the most text one relayed heartbeat holds (a heartbeat with job output goes straight
# to the controller).
RELAY_BATCH_MAX = 1000
RELAY_HEARTBEAT_MAX = 64 * 1024
Mac = Annotated[str, Meta(pattern="^[0-9a-f]{64}$")]


class RelayHeartbeat(Body, frozen=True, kw_only=True):
    """What a worker sends its relay: its heartbeat's JSON text, numbered and signed with
    the relay key of its registration (xce/protocol/relay_keys.py)."""

    seq: Annotated[int, Meta(ge=1, le=2**62)]
    heartbeat: Annotated[str, Meta(max_length=RELAY_HEARTBEAT_MAX)]
    mac: Mac


class RelayedHeartbeat(RelayHeartbeat, frozen=True, kw_only=True):
    """One host's heartbeat as a relay forwards it."""

    host: Name


class RelayedHeartbeats(Body, frozen=True, kw_only=True):
    """`POST /api/v1/workers/heartbeats`: a relay's batch (xce/worker/agent/relay.py)."""

    heartbeats: Annotated[
        tuple[RelayedHeartbeat, ...], Meta(min_length=1, max_length=RELAY_BATCH_MAX)
    ]


class Finished(Usage, frozen=True, kw_only=True):
    """`POST /api/v1/workers/{host}/jobs/{job_id}/finished`: how an attempt ended."""

    attempt: Attempt
    exit_code: Annotated[int, Meta(ge=-(2**31), le=2**31)] | None
    exit_signal: Annotated[int, Meta(ge=0, le=255)] | None = None
    reason: Text1K = ""
    outputs: Annotated[tuple[Text1K, ...], Meta(max_length=10000)] = ()
    # The worker's keeper killed the attempt: the worker had lost every controller for
    # longer than the fence timeout (xce/worker/keeper/fence.py).
    host_failure: bool = False
    # Outputs that could not be returned, each "NAME: why" (refused as too large, a name
    # clash, unreadable): recorded on the job and shown in its reason, so an attempt whose
    # files are missing is never a silent DONE. Bounded like `outputs`' names.
    output_problems: Annotated[tuple[Text1K, ...], Meta(max_length=1000)] = ()


# --- what the controller sends a worker (its answer to a poll; xce/controller/workers.py) ---
#
# Declared to match the dicts the controller builds today key for key and in the same order,
# so that encoding one gives the same JSON (tests/unit/test_worker_messages.py checks it).
# Unknown keys are ignored (a newer controller may send more) and nothing is bounded here:
# the worker checks what it uses itself (xce/worker/attempt/accounts.py, spool.py, ...).
# The worker decodes an answer once, as it arrives (xce/worker/agent/reconcile.py). Keys it
# has always done without (an older controller's, an older worker's spec.json) have defaults:
# only the job, its attempt, its action and its user must be there.


class LaunchInfo(Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What every host of an attempt needs for `xce launch`."""

    credential: str  # the attempt's launch credential (xce/controller/launchcred.py)
    tasks: dict[str, str]  # each host of the attempt: its task service, HOST:PORT or ""
    cwd: str  # the submitted cwd, "" for none
    bin: str = ""  # set by the worker itself: the directory of its own `xce`; never sent


class ArrayExtent(Struct, frozen=True, kw_only=True):
    """How many tasks an array has and its lowest and highest index."""

    count: int
    min: int
    max: int


class Assignment(Struct, frozen=True, kw_only=True):
    """One job attempt this host runs (or signals): an entry of the answer's `jobs`."""

    job_id: str
    attempt: int
    action: str  # "run", "stop" or "kill"
    number: int = 0
    array_index: int | None = None
    user: str
    name: str = ""
    queue: str = ""
    command: str | None = None
    script: str | None = None
    slots: int = 1
    memory_mb: int = 0
    walltime_s: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    stdout_file: str | None = None
    stderr_file: str | None = None
    start_time: float | None = None
    devices: list[str] = field(default_factory=list)  # granted ("gpu:0"): bind exactly these
    hosts: list[tuple[str, int]] = field(default_factory=list)  # every host, first = this one
    submit_dir: str | None = None  # the working directory when `cwd` is not given
    submit_host: str = ""
    # The scheduler variable families the job gets ("slurm", "lsf", "pbs"); none from an
    # older controller. What to do where the submit directory is missing here.
    job_env: list[str] = field(default_factory=list)
    missing_submit_dir: str = "fail"
    array: ArrayExtent | None = None  # a task of an array: the array's extent
    launch: LaunchInfo | None = None  # None from a controller older than `xce launch`


class Share(Struct, frozen=True, kw_only=True):
    """A part of a multi-host job whose first host is another (an entry of `shares`): a
    cgroup held here for its tasks (xce/worker/tasks/shares.py)."""

    job_id: str
    attempt: int
    action: str
    user: str
    slots: int = 0
    memory_mb: int = 0
    devices: list[str] = field(default_factory=list)  # this host's own grant
    launch: LaunchInfo | None = None
