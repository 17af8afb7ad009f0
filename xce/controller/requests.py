"""Typed requests the service layer accepts, built by the API from validated JSON."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SubmitRequest:
    user: str
    command: str | None = None
    script: str | None = None
    name: str = ""
    queue: str | None = None
    slots: int = 1
    memory_mb: int = 0
    walltime_s: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    array: str | None = None
    dependency: str | None = None
    inputs: dict[str, str] = field(default_factory=dict)
    outputs: tuple[str, ...] = ()
    hold: bool = False
    submit_host: str = ""
    resources: str = ""
    stdout_file: str | None = None
    stderr_file: str | None = None
    reservation: str = ""  # the advance reservation to run in (sbatch --reservation)
    # Skip the submit-time check that some host could ever run the job (xce/sched/
    # feasibility.py), for hosts that have not registered yet.
    defer: bool = False
    # Generic resources per host ({"gpu": 1}) and cluster-wide licenses ({"matlab": 1});
    # `rusage[gpu=1]` in `resources` asks the same (xce/controller/gres_rules.py).
    gres: dict[str, int] = field(default_factory=dict)
    licenses: dict[str, int] = field(default_factory=dict)
    # Not eligible before this time (sbatch --begin): epoch seconds, or text that
    # xce.core.begin reads in UTC; None: at once.
    begin: float | str | None = None
    # Multi-host jobs (issue 15): whole hosts; memory per slot (--mem-per-cpu) instead of
    # memory_mb per host (--mem).
    exclusive: bool = False
    mem_per_slot_mb: int = 0
    # Whose uploads `inputs` may name: the submitter's own; None: anyone's (admins, and
    # callers inside the controller).
    uploads_of: str | None = None
    # Whose jobs `dependency` may name, as a predicate on the owner (the submitter may view
    # them); None: anyone's. A dependency reveals how its target ended.
    may_view_owner: Callable[[str], bool] | None = field(default=None, compare=False)
    # `--priority N` (None: the default); `privileged` (operators, admins) may give more
    # than `[scheduler.priority] default_job_priority`.
    priority: int | None = None
    privileged: bool = False


@dataclass(frozen=True)
class WorkerInfo:
    host: str
    slots: int
    memory_mb: int
    attributes: tuple[tuple[str, str], ...] = ()
    # How the worker contains jobs (cgroup kind, controllers, cores), as it reports it;
    # shown, never interpreted. Empty: an older worker that does not say.
    containment: tuple[tuple[str, str | int | float | bool | None], ...] = ()
    gres: tuple[tuple[str, str], ...] = ()  # devices by kind (xce/core/gres.py)
    # Where the worker's task service listens (HOST:PORT, issue 15); "" if it has none.
    task_address: str = ""


@dataclass(frozen=True)
class RunReport:
    """One job a worker says it is running, with its latest usage."""

    job_id: str
    attempt: int
    cpu_user_s: float = 0.0
    cpu_system_s: float = 0.0
    max_rss_bytes: int = 0
    wall_time_s: float = 0.0
    gpu_util_pct: float = 0.0  # NVML's figures of the granted GPUs (xce/worker/gpuusage.py)
    gpu_mem_peak_bytes: int = 0


@dataclass(frozen=True)
class FinishReport:
    job_id: str
    attempt: int
    exit_code: int | None
    exit_signal: int | None = None
    reason: str = ""
    cpu_user_s: float = 0.0
    cpu_system_s: float = 0.0
    max_rss_bytes: int = 0
    wall_time_s: float = 0.0
    outputs: tuple[str, ...] = ()
    # The worker's keeper killed the attempt: the worker had lost every controller for
    # longer than the fence timeout (xce/worker/fence.py).
    host_failure: bool = False
    gpu_util_pct: float = 0.0  # NVML's figures of the granted GPUs (xce/worker/gpuusage.py)
    gpu_mem_peak_bytes: int = 0
