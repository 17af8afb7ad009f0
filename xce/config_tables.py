"""The config file's tables, each declared once: key, type, default, constraint, message.

The defaults are those of the settings the tables become (xce/config_settings.py);
`[auth]`, `[guard]`, `[scheduler]` and `[[license]]` are declared beside their settings.
"""

from __future__ import annotations

import re
from dataclasses import fields
from typing import Annotated, Literal

import msgspec

from xce.auth.guard_config import GuardTable
from xce.auth.settings import AuthTable
from xce.config_check import Invalid, PosFloat, PosInt, PosNumber, Table, error, hint
from xce.config_settings import (
    Config,
    ControllerSettings,
    HaSettings,
    TlsSettings,
    WorkerSettings,
)
from xce.core.model import HostFailurePolicy, QueueRecord
from xce.gres_config import Gres, Licenses, licenses, worker_gres
from xce.sched.settings import SchedulerTable

_C, _W, _T, _H, _Q = (
    ControllerSettings(),
    WorkerSettings(name=""),
    TlsSettings(),
    HaSettings(),
    QueueRecord(""),
)
_JOB_USER = r"^[a-z_][a-z0-9_.-]{0,31}$"
_KEEP_ALL = "must be 0 (keep everything) or more"
_NO_LIMIT = "must be 0 (no limit) or a positive integer"
_DEVICE_PATH = 'must contain {} (the device id), e.g. "/dev/nvidia{}"'
Names = tuple[Annotated[str, msgspec.Meta(min_length=1)], ...]  # none of them empty


def host_port(text: str, lowest_port: int = 1) -> tuple[str, int] | None:
    """`HOST:PORT` (`[::1]:7000`; an empty host is 127.0.0.1) or None when it is not one."""
    host, sep, port = text.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()) or not lowest_port <= int(port) < 65536:
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def _check_listen(key: str, text: str | None, lowest_port: int = 1, note: str = "") -> None:
    if text is not None and host_port(text, lowest_port) is None:
        raise Invalid(f"{key} must be HOST:PORT{note}, got {text!r}")


class ClusterTable(Table):
    """`[cluster]`: the ordered controller candidates and high availability (xce/ha)."""

    controllers: Annotated[
        tuple[Annotated[str, msgspec.Meta(pattern="^https?://")], ...],
        msgspec.Meta(min_length=1),
        error("must be a non-empty list of http(s):// URLs"),
    ] = Config().controllers
    replication: Literal["async", "sync"] = "async"
    failover_timeout_s: PosFloat = _H.failover_timeout_s
    heartbeat_interval_s: PosFloat = _H.heartbeat_interval_s
    sync_timeout_s: PosFloat = _H.sync_timeout_s
    reclaim: bool = _H.reclaim


class ControllerTable(Table):
    """`[controller]`; `listen`, `state_dir`, `replication_*` become derived settings."""

    listen: str = f"{_C.listen_host}:{_C.listen_port}"
    state_dir: str | None = None
    heartbeat_interval_s: PosFloat = _C.heartbeat_interval_s
    missed_heartbeats: PosInt = _C.missed_heartbeats
    fence_timeout_s: PosFloat = _C.fence_timeout_s
    schedule_interval_s: PosFloat = _C.schedule_interval_s
    max_upload_mb: PosInt = _C.max_upload_mb
    upload_quota_mb: PosInt = _C.upload_quota_mb
    upload_ttl_s: PosFloat = _C.upload_ttl_s
    max_job_outputs_mb: PosInt = _C.max_job_outputs_mb
    allow_root_jobs: bool = _C.allow_root_jobs
    min_job_uid: Annotated[int, hint("must be 0 or more", ge=0)] = _C.min_job_uid
    job_users: Annotated[
        tuple[Annotated[str, msgspec.Meta(pattern=_JOB_USER)], ...],
        error("must be a list of user names"),
    ] = ()
    max_body_kb: PosInt = _C.max_body_kb
    max_array_size: PosInt = _C.max_array_size
    default_queue: str = _C.default_queue
    wal_fsync: Literal["always", "interval"] = "always"
    wal_fsync_interval_s: PosFloat = _C.wal_fsync_interval_s
    wal_segment_mb: PosInt = _C.wal_segment_mb
    checkpoint_every: PosInt = _C.checkpoint_every
    checkpoint_interval_s: PosFloat = _C.checkpoint_interval_s
    finished_retention_s: PosFloat = _C.finished_retention_s
    accounting: bool = _C.accounting
    accounting_retention_months: Annotated[int, hint(_KEEP_ALL, ge=0)] = (
        _C.accounting_retention_months
    )
    url: str = _C.url
    replication_listen: str | None = None
    replication_token: str = _C.replication_token
    replication_token_file: str | None = None

    def __post_init__(self) -> None:
        _check_listen("listen", self.listen)
        _check_listen("replication_listen", self.replication_listen)


class WorkerTable(Table):
    """`[worker]`; `task_listen`, the directories and `token_file` become derived settings."""

    name: str | None = None  # default: this host's name
    slots: PosInt = _W.slots
    memory_mb: PosInt = _W.memory_mb
    attributes: dict[str, Annotated[str | int | float, error("must be a string or number")]] = {}
    spool_dir: str | None = None
    jobs_dir: str | None = None
    allow_root_jobs: bool = _W.allow_root_jobs
    kill_grace_s: PosFloat = _W.kill_grace_s
    heartbeat_interval_s: PosFloat = _W.heartbeat_interval_s
    usage_interval_s: PosFloat = _W.usage_interval_s
    token: str = _W.token
    token_file: str | None = None
    min_job_uid: Annotated[int, hint("must be a uid (an integer >= 0)", ge=0)] = _W.min_job_uid
    cgroup: Literal["auto", "v2", "v1", "none"] = "auto"
    cgroup_parent: str = _W.cgroup_parent
    pids_limit: Annotated[int, hint(_NO_LIMIT, ge=0)] = _W.pids_limit
    private_tmp: bool = _W.private_tmp
    gres: Gres | None = None
    gpu_device_path: Annotated[str, hint(_DEVICE_PATH, pattern=re.escape("{}"))] = (
        _W.gpu_device_path
    )
    task_listen: str = f"{_W.task_host}:{_W.task_port}"

    def __post_init__(self) -> None:
        _check_listen("task_listen", self.task_listen, 0, " (port 0: any free port)")
        if self.gres is not None:
            worker_gres(self.gres)


class TlsTable(Table):
    """`[tls]`: PEM files (relative to the config file) and who must show a certificate."""

    cert_file: str | None = None
    key_file: str | None = None
    ca_file: str | None = None
    require_client_cert: Annotated[
        bool | Literal["none", "workers", "all"],
        error('must be "none", "workers", "all" or a boolean'),
    ] = "none"
    insecure: bool = _T.insecure

    @property
    def client_cert_mode(self) -> str:
        mode = self.require_client_cert
        return ("all" if mode else "none") if isinstance(mode, bool) else mode

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise Invalid("cert_file and tls.key_file must be given together")
        if self.client_cert_mode != "none" and (self.cert_file is None or self.ca_file is None):
            raise Invalid("require_client_cert needs tls.cert_file, tls.key_file and tls.ca_file")


class QueueTable(Table):
    """One `[[queue]]`: becomes a `QueueRecord` field for field (shares as strings)."""

    name: str
    priority: int = _Q.priority
    open: bool = _Q.open
    active: bool = _Q.active
    hosts: Annotated[tuple[str, ...], error("must be a list of host names")] = ()
    description: str = _Q.description
    on_host_failure: Annotated[HostFailurePolicy, error("must be requeue or exit")] = (
        _Q.on_host_failure
    )
    plugins: Annotated[tuple[str, ...], error("must be a list of plugin names")] = ()
    max_running: PosInt | None = None
    max_running_per_user: PosInt | None = None
    shares: dict[str, PosNumber] = {}
    default_walltime_s: PosInt | None = None
    max_walltime_s: PosInt | None = None
    default_memory_mb: PosInt | None = None
    max_memory_mb: PosInt | None = None
    max_slots: PosInt | None = None
    users: Annotated[Names, error("must be a list of user names and @groups")] = ()
    preempt: Annotated[Names, error("must be a list of queue names")] = ()
    preempt_mode: str = _Q.preempt_mode
    preempt_min_run_s: int = _Q.preempt_min_run_s

    def __post_init__(self) -> None:
        from xce.controller.queue_rules import check_settings
        from xce.sched.plugins import policy_for

        if not self.name.replace("-", "").replace("_", "").isalnum():
            raise Invalid(f"name {self.name!r} may hold only letters, digits, - and _")
        try:
            policy_for(self.plugins)
        except ValueError as exc:
            raise Invalid(f"plugins: {exc}") from None
        problem = check_settings(self.record())
        if problem:
            raise Invalid(problem, whole=True)

    def record(self) -> QueueRecord:
        same = {f.name: getattr(self, f.name) for f in fields(QueueRecord) if f.name != "shares"}
        shares = tuple(sorted((who, str(value)) for who, value in self.shares.items()))
        return QueueRecord(**same, shares=shares)


class FileTable(Table):
    """The whole file; rules across tables are checked here."""

    cluster: ClusterTable = msgspec.field(default_factory=ClusterTable)
    controller: ControllerTable = msgspec.field(default_factory=ControllerTable)
    auth: AuthTable = msgspec.field(default_factory=AuthTable)
    queue: list[QueueTable] | None = None  # None: the one default queue
    worker: WorkerTable = msgspec.field(default_factory=WorkerTable)
    tls: TlsTable = msgspec.field(default_factory=TlsTable)
    guard: GuardTable = msgspec.field(default_factory=GuardTable)
    scheduler: SchedulerTable = msgspec.field(default_factory=SchedulerTable)
    license: Licenses = []

    def __post_init__(self) -> None:
        queues = self.queue if self.queue is not None else _C.queues
        names = [q.name for q in queues]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup:
            raise Invalid(f"queue {dup!r} is defined twice")
        for i, queue in enumerate(self.queue or ()):
            unknown = [n for n in queue.preempt if n not in names]
            if unknown:
                raise Invalid(f"queue[{i}].preempt: queue {unknown[0]!r} is not defined")
        licenses(self.license)
        if self.controller.default_queue not in names:
            raise Invalid(
                f"controller.default_queue {self.controller.default_queue!r} is not a queue"
            )
