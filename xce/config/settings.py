"""What the rest of the code reads from the config file: one frozen settings Struct per role.

The keys a role reads as written are declared once, with type, constraint and default, in its
`...Keys` table; both the file's table (xce/config/tables.py) and the settings extend it: the
table with the keys spelled for people (`listen`, paths relative to the file, token files), the
settings with what `xce.config.loader.parse_config` derives from those.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import msgspec

from xce.config.auth import AuthSettings
from xce.config.check import PosFloat, PosInt, Table
from xce.config.guard import GuardSettings
from xce.config.ports import DEFAULT_PORT
from xce.config.scheduler import SchedulerSettings
from xce.core.model import QueueRecord
from xce.core.validation import error, hint

_JOB_USER = r"^[a-z_][a-z0-9_.-]{0,31}$"
_KEEP_ALL = "must be 0 (keep everything) or more"
_NO_LIMIT = "must be 0 (no limit) or a positive integer"
_KEEP_NONE = "must be 0 (no reserve) or more"
_DEVICE_PATH = 'must contain {} (the device id), e.g. "/dev/nvidia{}"'


class ControllerKeys(Table, frozen=True):
    """The `[controller]` keys the controller reads as written."""

    heartbeat_interval_s: PosFloat = 5.0
    missed_heartbeats: PosInt = 3
    # A silent host is unavailable after heartbeat_interval_s * missed_heartbeats; its jobs
    # are requeued (or ended) only fence_timeout_s later, by which time its worker has
    # killed them itself (it is told this value): a job never runs on two hosts at once.
    fence_timeout_s: PosFloat = 30.0
    # The heartbeats a second the controller plans for: a cluster with more hosts than
    # heartbeat_interval_s x this tells its workers a longer interval (hosts / this), never
    # past fence_timeout_s / (missed_heartbeats + 1): with the defaults 10,000 hosts are told
    # 7.5 s, about 1,330 heartbeats a second instead of 2,000 (a longer fence_timeout_s lets
    # it go to 10 s, 1,000 a second). The deadline follows the interval the workers were told.
    max_heartbeats_per_s: PosFloat = 1000.0
    schedule_interval_s: PosFloat = 1.0
    # One file (upload or returned output) at most; 0: no cap per file (HPC data is as large
    # as it is: the quotas below and min_free_disk_mb bound what the disk takes).
    max_upload_mb: Annotated[int, hint(_NO_LIMIT, ge=0)] = 0
    # Staged uploads not yet attached to a job: at most this much per user, and deleted
    # when no job has used them within upload_ttl_s, so uploads cannot fill the disk.
    upload_quota_mb: PosInt = 10240
    upload_ttl_s: PosFloat = 86400.0
    # What one job attempt may return in all (stdout, stderr and outputs; each file is also
    # capped at max_upload_mb if set): a job's sparse 15 TB file must not fill the disk.
    max_job_outputs_mb: PosInt = 10240
    # A file is refused (413, from its Content-Length before it is read) when storing it
    # would leave less than this free on the controller's disk: the WAL must keep room.
    min_free_disk_mb: Annotated[int, hint(_KEEP_NONE, ge=0)] = 1024
    # File bodies in or out at once (uploads, downloads, workers' input fetches and output
    # returns); one more waits up to transfer_wait_s, then gets 503 busy with Retry-After.
    # Nothing else waits for these: heartbeats, finish reports and listings go on.
    max_concurrent_transfers: PosInt = 16
    transfer_wait_s: PosFloat = 10.0
    # Which accounts jobs may run as (checked at submit where the name resolves on the
    # controller host; workers check again on theirs): root only with allow_root_jobs,
    # other uids below min_job_uid only when listed in job_users.
    allow_root_jobs: bool = False
    min_job_uid: Annotated[int, hint("must be 0 or more", ge=0)] = 1000
    job_users: Annotated[
        tuple[Annotated[str, msgspec.Meta(pattern=_JOB_USER)], ...],
        error("must be a list of user names", got=True),
    ] = ()
    max_body_kb: PosInt = 1024
    max_array_size: PosInt = 1_000_000
    default_queue: str = "normal"
    # A Unix socket the controller also listens on (mode 0666, in a directory only its own
    # user may write): local callers without a token are who the kernel says they are
    # (SO_PEERCRED, xce/api/peer.py). "": none.
    local_socket: str = ""
    # The scheduler variables every job gets beside XCE_* (a queue's job_env overrides it)
    # and what a job does when its submit directory is missing on the execution host.
    job_env: tuple[Literal["slurm", "lsf", "pbs"], ...] = ("slurm", "lsf", "pbs")
    missing_submit_dir: Literal["fail", "job_dir"] = "fail"
    wal_fsync: Literal["always", "interval"] = "always"
    wal_fsync_interval_s: PosFloat = 1.0
    wal_segment_mb: PosInt = 64
    checkpoint_every: PosInt = 100_000
    checkpoint_interval_s: PosFloat = 300.0
    finished_retention_s: PosFloat = 3600.0
    # Accounting (xce/accounting): one record per ended attempt in state_dir/accounting,
    # kept for this many whole months before the current one (0: keep everything).
    accounting: bool = True
    accounting_retention_months: Annotated[int, hint(_KEEP_ALL, ge=0)] = 0
    # The cluster history (xce/controller/cluster_history.py): one sample per this many
    # seconds, 24 h of them in a fixed ring (`GET /api/v1/cluster/history`, the console).
    history_step_s: Annotated[int, hint("must be whole seconds from 1 to 3600", ge=1, le=3600)] = 60
    # HA: this candidate's own URL in cluster.controllers (default: the one whose host and
    # port match `listen`) and the standby service token it presents to a primary.
    url: str = ""
    replication_token: str = ""


class ControllerSettings(ControllerKeys, frozen=True):
    """`[controller]` as the controller reads it, with `[[queue]]`, `[scheduler]` and
    `[[license]]`."""

    listen_host: str = "127.0.0.1"
    listen_port: int = DEFAULT_PORT
    state_dir: Path = msgspec.field(default_factory=lambda: Path("~/.local/share/xce").expanduser())
    # HA: the replication listener (default: listen port + 1).
    replication_host: str = ""
    replication_port: int = 0
    queues: tuple[QueueRecord, ...] = (QueueRecord("normal", priority=30),)
    scheduler: SchedulerSettings = msgspec.field(default_factory=SchedulerSettings)
    # Cluster-wide consumables (`[[license]] name = "matlab" count = 10`), counted against
    # the active jobs' `--license` requests by the scheduler.
    licenses: tuple[tuple[str, int], ...] = ()


class WorkerKeys(Table, frozen=True):
    """The `[worker]` keys the worker reads as written."""

    slots: PosInt = 0
    memory_mb: PosInt = 0
    allow_root_jobs: bool = False
    kill_grace_s: PosFloat = 10.0
    heartbeat_interval_s: PosFloat = 5.0
    usage_interval_s: PosFloat = 2.0
    token: str = ""
    # Jobs never run as an account below this uid (system accounts), root only with
    # allow_root_jobs: like Slurm's and LSF's guards, checked on the host that runs the job.
    min_job_uid: Annotated[int, hint("must be a uid (an integer >= 0)", ge=0)] = 1000
    # Containment (xce/worker/cgroups): "auto" (v2, else v1, else none), "v2", "v1", "none";
    # the parent cgroup of this worker's jobs (default: the worker's own cgroup); a per-job
    # limit on tasks, threads included (0: none; a fork bomb stops there).
    cgroup: Literal["auto", "v2", "v1", "none"] = "auto"
    cgroup_parent: str = ""
    pids_limit: Annotated[int, hint(_NO_LIMIT, ge=0)] = 8192
    # Each job attempt gets a /tmp of its own (a tmpfs in the job's mount namespace, no
    # larger than its memory limit and charged to it, like Slurm's job_container/tmpfs); off
    # by default as in Slurm, since jobs then no longer share /tmp with anything on the host.
    # A job whose working or job directory is under /tmp keeps the host's. /dev/shm is
    # always the job's own. Root workers only.
    private_tmp: bool = False
    # Each GPU's device node ({} is the id), which the devices cgroup denies to jobs not
    # granted it.
    gpu_device_path: Annotated[str, hint(_DEVICE_PATH, pattern=re.escape("{}"))] = "/dev/nvidia{}"
    # A job input being fetched or an output being returned fails after this long without
    # a byte moving (and is tried again, resumed); no clock covers a whole transfer.
    transfer_idle_timeout_s: PosFloat = 60.0
    # The heartbeat relay this worker sends its heartbeats through, a worker with
    # `relay_listen` (the tree fan-out of a large cluster: xce/worker/agent/relay.py), as a
    # URL like "https://rack1-w01:7880"; empty: straight to the controller. A heartbeat with
    # job output, and every heartbeat while the relay fails, goes straight there anyway.
    heartbeat_relay: Annotated[
        str, hint("must be an http(s):// URL or empty", pattern="^(https?://.+)?$")
    ] = ""


class WorkerSettings(WorkerKeys, frozen=True):
    """`[worker]` as the worker reads it."""

    name: str = msgspec.field(default_factory=socket.gethostname)
    attributes: tuple[tuple[str, str], ...] = ()
    spool_dir: Path = msgspec.field(
        default_factory=lambda: Path("~/.local/share/xce/worker").expanduser()
    )
    # Where the jobs' working directories go (each 0700, owned by the job's user). Every
    # parent must be searchable by the job users (the state and spool dirs are 0700):
    # default <spool_dir>/jobs for a worker that is not root, /var/spool/xce/<name> for root.
    jobs_dir: Path | None = None
    # Counted devices by kind (`[worker.gres] gpu = ["0", "1"]`); None: no [worker.gres]
    # table, GPUs are detected through NVML where a driver is present (xce/worker/devices/gpus.py).
    gres: dict[str, tuple[str, ...]] | None = None
    # The task service (xce/worker/tasks/service.py: `xce launch` starts a job's tasks here): the
    # address it listens on; port 0 = any free port. Reported at registration.
    task_host: str = "127.0.0.1"
    task_port: int = 0
    # Where this worker relays other workers' heartbeats (`relay_listen`; port 0: it
    # relays none): xce/worker/agent/relay.py.
    relay_host: str = "127.0.0.1"
    relay_port: int = 0

    def job_root(self) -> Path:
        if self.jobs_dir is not None:
            return self.jobs_dir
        if os.geteuid() == 0:
            return Path("/var/spool/xce") / self.name
        return self.spool_dir / "jobs"


@dataclass(frozen=True)
class TlsSettings:
    """`[tls]`: the PEM files of this node. A controller or standby serves with `cert_file` +
    `key_file`; every role verifies its peers (https:// controllers, replication) against
    `ca_file`. Empty means plain TCP (only sensible on loopback)."""

    cert_file: Path | None = None
    key_file: Path | None = None
    ca_file: Path | None = None
    # "none", "workers" (worker routes need a client certificate from ca_file) or "all"
    # (the handshake itself needs one); see xce/api/mtls.py.
    require_client_cert: str = "none"
    # Development only: allow plain http:// to (or a listener on) a non-loopback address.
    insecure: bool = False


class HaSettings(Table, frozen=True):
    """`[cluster]` keys for high availability (xce/ha): how the candidates replicate and
    when a standby takes over."""

    replication: Literal["async", "sync"] = "async"  # sync: a commit waits for a standby's ack
    failover_timeout_s: PosFloat = 3.0  # primary silence before a standby takes over
    heartbeat_interval_s: PosFloat = 0.5  # primary -> standby heartbeats, and peer probes
    sync_timeout_s: PosFloat = 2.0  # sync mode: wait this long for an ack, then degrade
    reclaim: bool = False  # a better-ranked candidate that returns takes the role back
    # async: acknowledge a change only while a standby trails by at most this many records
    # and holds every record older than this many ms (else wait for it, up to
    # sync_timeout_s, then lift the bound with an alert); 0 turns a limit off
    async_max_lag_records: Annotated[int, hint("must be 0 (no limit) or more", ge=0)] = 256
    async_max_lag_ms: Annotated[float, hint("must be 0 (no limit) or more", ge=0)] = 500.0

    @property
    def lease_s(self) -> float:
        """A primary stops writing this long after it last reached a majority: well before
        a standby's failover timeout runs out."""
        return self.failover_timeout_s * 0.5


@dataclass(frozen=True)
class Config:
    controllers: tuple[str, ...] = (f"http://127.0.0.1:{DEFAULT_PORT}",)
    controller: ControllerSettings = field(default_factory=ControllerSettings)
    worker: WorkerSettings = field(default_factory=WorkerSettings)
    path: Path | None = None
    tls: TlsSettings = field(default_factory=TlsSettings)
    guard: GuardSettings = field(default_factory=GuardSettings)
    auth: AuthSettings = field(default_factory=AuthSettings)
    ha: HaSettings = field(default_factory=HaSettings)
