"""The documented response bodies, declared as msgspec Structs like the request bodies
(xce/protocol/bodies.py): the OpenAPI document derives their JSON Schema, and schemathesis
checks real answers against it. The views that build them are in xce/api/views.py.
Optional keys default to UNSET, so the schema lists them without inventing a default;
unknown keys are allowed (views may show more than is documented)."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

JobStateName = Literal["PEND", "PSUSP", "RUN", "USUSP", "SSUSP", "DONE", "EXIT"]


class UsageView(Struct, kw_only=True):
    cpu_time_s: float | UnsetType = UNSET
    cpu_user_s: float | UnsetType = UNSET
    cpu_system_s: float | UnsetType = UNSET
    max_rss_bytes: int | UnsetType = UNSET
    wall_time_s: float | UnsetType = UNSET


class HostUsageView(Struct, kw_only=True):
    """A finished multi-host job's part of `usage` on one host."""

    host: str | UnsetType = UNSET
    cpu_time_s: float | UnsetType = UNSET
    cpu_user_s: float | UnsetType = UNSET
    cpu_system_s: float | UnsetType = UNSET
    max_rss_bytes: int | UnsetType = UNSET


class HistoryEntry(Struct, kw_only=True):
    """What happened to a job (xce/controller/history.py); `at` is null where a
    controller restart lost the time."""

    at: float | None
    event: str
    detail: str


class JobView(Struct, kw_only=True):
    """`GET /api/v1/jobs/{job_id}`: a job, task or array."""

    id: str
    kind: str
    user: str
    queue: str
    state: JobStateName
    name: str | UnsetType = UNSET
    host: str | UnsetType | None = UNSET
    exit_code: int | UnsetType | None = UNSET
    exit_signal: int | UnsetType | None = UNSET
    usage: UsageView | UnsetType = UNSET
    host_usage: list[HostUsageView] | UnsetType = UNSET  # a finished multi-host job only
    reason: str | UnsetType = UNSET
    # outputs of the finished attempt its worker could not return, each "NAME: why"
    output_problems: list[str] | UnsetType = UNSET
    # the scheduler's run-time prediction (xce/sched/predict.py), seconds, and the instant
    # (epoch seconds) a running job is expected to end; null where there is none
    predicted_run_s: float | UnsetType | None = UNSET
    expected_end: float | UnsetType | None = UNSET
    history: list[HistoryEntry] | UnsetType = UNSET  # oldest first


class TailView(Struct, kw_only=True):
    """`GET /api/v1/jobs/{job_id}/tail`: a slice of a job's stdout or stderr."""

    job_id: str
    stream: Literal["stdout", "stderr"]
    attempt: int
    state: str
    running: Annotated[
        bool,
        Meta(
            description="served from the live tail (the job is active); false: from the "
            "output file the worker returned"
        ),
    ]
    offset: Annotated[int, Meta(description="byte offset of the first byte of data")]
    next_offset: Annotated[int, Meta(description="ask from here next time")]
    end: Annotated[int, Meta(description="end of what the controller holds now")]
    data: Annotated[
        str,
        Meta(
            description="the bytes as UTF-8 text (invalid bytes replaced); never splits a character"
        ),
    ]
    truncated: Annotated[
        bool,
        Meta(
            description="bytes between the requested offset (0 when none was given) and "
            "offset are no longer held"
        ),
    ]
    not_returned: Annotated[
        str | None,
        Meta(
            description="why the finished job's stream was not returned by its worker "
            "(over a cap, unreadable), so data is empty; absent when it was"
        ),
    ] = None


class ClusterSample(Struct, kw_only=True):
    """One sample of the cluster history (xce/controller/cluster_history.py)."""

    t: Annotated[int, Meta(description="the sample's instant, epoch seconds (a step multiple)")]
    running: Annotated[int, Meta(description="jobs and tasks started and not ended at t")]
    pending: Annotated[int, Meta(description="jobs and tasks waiting at t")]
    slots_busy: Annotated[int, Meta(description="slots the running jobs hold at t")]
    slots_total: Annotated[int, Meta(description="slots of the reachable hosts at t")]
    gpus_busy: Annotated[int, Meta(description="GPUs the running jobs hold at t")]
    gpus_total: Annotated[int, Meta(description="GPUs of the reachable hosts at t")]
    submitted: Annotated[int, Meta(description="jobs and tasks submitted in (t - step, t]")]
    finished: Annotated[int, Meta(description="jobs and tasks ended DONE or EXIT in the step")]


class ClusterHistoryView(Struct, kw_only=True):
    """`GET /api/v1/cluster/history`: the sampled ring, oldest sample first."""

    step_s: Annotated[int, Meta(description="seconds between samples")]
    window_s: Annotated[int, Meta(description="what the ring covers, seconds")]
    queue: str | None
    rebuilt: Annotated[
        bool,
        Meta(description="false while this term still rebuilds the past from the records"),
    ]
    samples: list[ClusterSample]


class UsagePoint(Struct, kw_only=True):
    t: float
    cpu_s: Annotated[float, Meta(description="CPU seconds used so far (user + system)")]
    rss_bytes: Annotated[float, Meta(description="memory peak so far, bytes")]


class UsageSeriesView(Struct, kw_only=True):
    """`GET /api/v1/jobs/{job_id}/usage`: a job's CPU and memory over its current attempt."""

    job_id: str
    attempt: int
    state: str
    kept: Annotated[
        bool, Meta(description="false: this controller holds no series for the attempt")
    ]
    max_points: int
    points: list[UsagePoint]


class ErrorDetail(Struct, kw_only=True):
    code: str
    message: str


class ErrorBody(Struct, kw_only=True):
    """Every 4xx and 5xx answer (the error middleware in xce/api/app.py)."""

    error: ErrorDetail
