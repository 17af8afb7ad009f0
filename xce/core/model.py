"""Immutable records of the cluster: jobs, arrays, queues and hosts.

Records never change in place; `ClusterState.apply` replaces a record with a new one. That is
what lets a checkpoint be a shallow copy of the state's maps (copy-on-write without fork()).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from xce.core.arrayspec import IndexSet
from xce.core.deps import DepTerm
from xce.core.fastinit import fast_init


class JobState(enum.StrEnum):
    """LSF's job states; the values are what the API and CLI show."""

    PEND = "PEND"
    PSUSP = "PSUSP"
    RUN = "RUN"
    USUSP = "USUSP"
    SSUSP = "SSUSP"
    DONE = "DONE"
    EXIT = "EXIT"

    @property
    def finished(self) -> bool:
        return self in (JobState.DONE, JobState.EXIT)

    @property
    def active(self) -> bool:
        """Holding a host's slots: running or suspended while running."""
        return self in (JobState.RUN, JobState.USUSP, JobState.SSUSP)

    @property
    def waiting(self) -> bool:
        return self in (JobState.PEND, JobState.PSUSP)


class HostAdmin(enum.StrEnum):
    """What an admin asked of a host; independent of whether it is reachable."""

    OPEN = "open"
    CLOSED = "closed"
    DRAINING = "draining"


class HostStatus(enum.StrEnum):
    """What users see: derived from admin state and reachability."""

    ONLINE = "online"
    OFFLINE = "offline"
    UNAVAILABLE = "unavailable"


class HostFailurePolicy(enum.StrEnum):
    """What happens to a queue's active jobs when their host becomes unavailable."""

    REQUEUE = "requeue"
    EXIT = "exit"


@dataclass(frozen=True, slots=True)
class Usage:
    """Resource usage of one run, as Slurm's sacct users expect it."""

    cpu_user_s: float = 0.0
    cpu_system_s: float = 0.0
    max_rss_bytes: int = 0
    wall_time_s: float = 0.0
    # The granted GPUs' mean utilisation (percent) and memory peak, sampled through NVML by
    # the worker (appended): 0 without GPUs or without NVML.
    gpu_util_pct: float = 0.0
    gpu_mem_peak_bytes: int = 0

    @property
    def cpu_time_s(self) -> float:
        return self.cpu_user_s + self.cpu_system_s


@fast_init
@dataclass(frozen=True, slots=True)
class HostSlots:
    """One host's share of a job's allocation: a multi-host job holds a tuple
    of these, the first host runs the script (bjobs' EXEC_HOST `2*n1:2*n2`)."""

    host: str
    slots: int
    # The devices granted on this host ("gpu:0", ...; appended): `--gpus N` is N per host,
    # so every host of the allocation holds its own; the first host's equal the job's
    # `devices`. Empty for a job without devices and in records older than this field.
    devices: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class HostUsage:
    """One host's part of a multi-host job's final usage: the kernel's figures
    for the job's cgroup there (the first host's own, the share's on the others)."""

    host: str
    cpu_user_s: float = 0.0
    cpu_system_s: float = 0.0
    max_rss_bytes: int = 0


@fast_init
@dataclass(frozen=True, slots=True)
class JobSpec:
    """What a user asked for at submit time; shared by every task of an array."""

    user: str
    queue: str
    name: str = ""
    command: str | None = None
    script: str | None = None
    slots: int = 1
    memory_mb: int = 0
    walltime_s: int | None = None
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    dependency: tuple[DepTerm, ...] = ()
    hold: bool = False
    submit_host: str = ""
    resources: str = ""  # an LSF -R string, validated at submit (xce.sched.expr)
    # The job's stdout/stderr copied to this file on the execution host when it ends (bsub
    # -o/-e, sbatch -o/-e; `%J` job id, `%I` array index...), relative to its working
    # directory; the job's own .xce/stdout stays for `xce job output` (appended last).
    stdout_file: str | None = None
    stderr_file: str | None = None
    # Generic resources per host (("gpu", "2"),) and cluster-wide licenses
    # (("matlab", "1"),), counts as text (xce/core/gres.py); appended last.
    gres: tuple[tuple[str, str], ...] = ()
    licenses: tuple[tuple[str, str], ...] = ()
    # The advance reservation the job runs in (`--reservation`, sbatch --reservation, bsub
    # -U): it starts only on that reservation's hosts while it is active
    # (xce/sched/passes/advance.py).
    reservation: str = ""
    # Not eligible before this time (sbatch --begin, bsub -b), epoch seconds; None: at once.
    # Appended last: older records and checkpoints have no such field.
    begin_time: float | None = None
    # Per-job priority (bsub -sp, sbatch --priority/--nice): None is `[scheduler.priority]
    # default_job_priority` at the time of ordering; a user may only give at most that.
    priority: int | None = None
    # Multi-host jobs (appended last). `exclusive`: whole hosts (bsub -x, sbatch
    # --exclusive). `mem_per_slot_mb`: --mem-per-cpu; each host then holds this times its
    # slots, while `memory_mb` stays per host (Slurm's --mem) and, for a per-slot request,
    # the whole job's memory, which is what a single-host placement needs.
    exclusive: bool = False
    mem_per_slot_mb: int = 0
    # Where the job was submitted from (sbatch/bsub run a job there): its working directory
    # unless `cwd` is given or it stages files in (xce/worker/attempt/spool.py). None from
    # an API client that did not say, and in records older than this field.
    submit_dir: str | None = None
    # The accounting group the job is charged to (sbatch --account, bsub -P/-G); "": the
    # user's own group. Appended last.
    account: str = ""


@fast_init
@dataclass(frozen=True, slots=True)
class JobRecord:
    """One job, or one materialised task of an array (then `array_id` is set)."""

    id: str
    number: int
    spec: JobSpec
    state: JobState
    submit_time: float
    array_index: int | None = None
    attempt: int = 0
    host: str | None = None
    start_time: float | None = None
    end_time: float | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    reason: str = ""
    usage: Usage | None = None
    kill_requested: bool = False
    outputs: tuple[str, ...] = ()
    # With kill_requested: the kill is a requeue, done when the worker reports the attempt's
    # end (appended last: older checkpoints' records have no such field).
    requeue_requested: bool = False
    submit_key: str = ""  # the submitter's Idempotency-Key, if any (ClusterState.submit_keys)
    # The devices the current (or last) attempt was granted, ("gpu:0", ...), from its
    # JobStarted: a replay or a failover keeps them (xce/core/gres.py).
    devices: tuple[str, ...] = ()
    # When this attempt became eligible to start (Slurm's EligibleTime): submit, or later the
    # release of a hold, the end of the last dependency it waited for, or its begin time
    # (then it may lie in the future); None while it is not (held, dependency waiting or
    # never satisfiable). Set by ClusterState.apply from those events; the wait of an
    # attempt counts from it. Appended last (older checkpoints lack it).
    eligible_time: float | None = None
    # Preemption (xce/sched/passes/preemption.py): the job whose start suspended or requeued this
    # one; while it is SSUSP with this set its slots are free for others (its memory is not).
    preempted_by: str = ""
    # When this job last started or resumed: the minimum run time before a preemption.
    resumed_time: float | None = None
    # Every host and its slots while active; empty for a single-host job, which
    # holds `spec.slots` on `host` (so old WAL records and checkpoints load unchanged).
    allocation: tuple[HostSlots, ...] = ()
    # Each host's usage of a finished multi-host job (appended); `usage` is
    # their sum. Empty for a single-host job and while the job runs.
    host_usage: tuple[HostUsage, ...] = ()
    # Outputs of the finished attempt that its worker could not return, each "NAME: why"
    # (appended); the reason names them too. Cleared when the job is requeued.
    output_problems: tuple[str, ...] = ()

    @property
    def hosts(self) -> tuple[HostSlots, ...]:
        """Every host of the allocation with its slots (one entry for a single-host job)."""
        if self.allocation:
            return self.allocation
        return (HostSlots(self.host, self.spec.slots, self.devices),) if self.host else ()

    @property
    def array_id(self) -> int | None:
        return self.number if self.array_index is not None else None

    @property
    def order_key(self) -> tuple[int, int]:
        """Submission order: requeued jobs keep their place, tasks follow their index."""
        return (self.number, self.array_index if self.array_index is not None else -1)


def task_id(array_id: int, index: int) -> str:
    """The id of an array task, LSF style: `17[5]`."""
    return f"{array_id}[{index}]"


@dataclass(frozen=True, slots=True)
class ArrayRecord:
    """A whole job array in one record: tasks are materialised only as they start.

    The counters let dependencies and listings read an array of a million tasks in O(1).
    """

    id: int
    spec: JobSpec
    indices: IndexSet
    pending: IndexSet
    submit_time: float
    max_concurrent: int | None = None
    held: bool = False
    active: int = 0
    done: int = 0
    exited: int = 0
    submit_key: str = ""  # the submitter's Idempotency-Key, if any
    # When the array's unstarted tasks became eligible (JobRecord.eligible_time); a task
    # takes it when it materialises.
    eligible_time: float | None = None

    @property
    def total(self) -> int:
        return len(self.indices)

    @property
    def finished(self) -> bool:
        return self.done + self.exited == self.total


@dataclass(frozen=True, slots=True)
class QueueRecord:
    """A queue: two independent switches like LSF (open = accept, active = dispatch)."""

    name: str
    priority: int = 0
    open: bool = True
    active: bool = True
    hosts: tuple[str, ...] = ()
    description: str = ""
    on_host_failure: HostFailurePolicy = HostFailurePolicy.REQUEUE
    # Scheduling (xce/sched/plugins): plugin names, running-job limits, fairshare shares
    # as (user or "@group", shares) pairs. Empty / None means FCFS first-fit, no limit.
    plugins: tuple[str, ...] = ()
    max_running: int | None = None
    max_running_per_user: int | None = None
    shares: tuple[tuple[str, str], ...] = ()
    # Per-job defaults and maximums applied at submit (like LSF's DEFAULT_/RUNLIMIT and
    # MEMLIMIT, Slurm's DefaultTime/MaxTime, DefMemPerNode/MaxMemPerNode); None: none.
    default_walltime_s: int | None = None
    max_walltime_s: int | None = None
    default_memory_mb: int | None = None
    max_memory_mb: int | None = None
    max_slots: int | None = None
    # Who may submit (LSF USERS, Slurm AllowAccounts): user names and @groups of
    # `[scheduler] groups`; empty: everyone.
    users: tuple[str, ...] = ()
    # Preemption (LSF PREEMPTION, Slurm PreemptMode): the queues whose running jobs this
    # queue's blocked jobs may take slots from, how ("suspend" or "requeue") and after how
    # long a victim may be preempted (again).
    preempt: tuple[str, ...] = ()
    preempt_mode: str = "suspend"
    preempt_min_run_s: int = 0
    # Other names a submission may use for this queue (a Slurm partition or QOS, an LSF
    # queue of the site being migrated from).
    aliases: tuple[str, ...] = ()
    # The scheduler variables its jobs get beside XCE_*: a comma list of families
    # ("slurm,lsf,pbs"; "" none); None: the controller's `job_env`.
    job_env: str | None = None
    # Where the submit directory does not exist on the execution host: "fail" (the job
    # ends naming it), "job_dir" (it runs in its own directory, with a warning); "": the
    # controller's `missing_submit_dir`.
    missing_submit_dir: str = ""


@fast_init  # (the simulator makes one per host; the live state one per host change)
@dataclass(frozen=True, slots=True)
class HostRecord:
    """A worker host; `admin` survives restarts so a closed host stays closed."""

    name: str
    slots: int
    memory_mb: int
    attributes: tuple[tuple[str, str], ...] = ()
    admin: HostAdmin = HostAdmin.OPEN
    admin_reason: str = ""
    reachable: bool = True
    registered_at: float = 0.0
    changed_at: float = 0.0
    # Counted devices by kind, (("gpu", "0,1"),) (xce/core/gres.py); appended last.
    gres: tuple[tuple[str, str], ...] = ()

    @property
    def status(self) -> HostStatus:
        if not self.reachable:
            return HostStatus.UNAVAILABLE
        if self.admin is not HostAdmin.OPEN:
            return HostStatus.OFFLINE
        return HostStatus.ONLINE

    def attribute(self, key: str) -> str | None:
        for k, v in self.attributes:
            if k == key:
                return v
        return None


@fast_init
@dataclass(frozen=True, slots=True)
class HostLoad:
    """Slots and memory held by active jobs on a host (derived, never logged)."""

    slots: int = 0
    memory_mb: int = 0
    jobs: frozenset[str] = field(default_factory=frozenset)
    # Devices held ("gpu:0") and licenses held by this host's active jobs.
    devices: frozenset[str] = field(default_factory=frozenset)
    licenses: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class ReservationRecord:
    """An advance reservation (Slurm `scontrol create reservation`, LSF `brsvadd`): `hosts`
    from `start` to `end` (epoch seconds, end excluded) for `users` (names and @groups).

    `slots` 0 reserves the whole of each host (slots and memory); N > 0 reserves N slots on
    each host. `maintenance` reserves for nobody: no job may target it, so the hosts run
    nothing that would still be running at `start`. Expiry needs no event: the scheduler
    compares its clock with `end` (xce/sched/passes/advance.py); an ended reservation is listed as
    such until it is deleted.
    """

    name: str
    hosts: tuple[str, ...]
    start: float
    end: float
    slots: int = 0
    users: tuple[str, ...] = ()
    maintenance: bool = False
    flags: tuple[str, ...] = ()
    description: str = ""
    created_by: str = ""
    created_at: float = 0.0

    def state_at(self, now: float) -> str:
        """`waiting` (not started), `active` or `ended`, as the CLI and API show it."""
        if now < self.start:
            return "waiting"
        return "active" if now < self.end else "ended"
