"""The config file's tables, each key declared once: type, default, constraint, message.

`[controller]`, `[worker]` and `[cluster]` extend the keys their settings read as written
(xce/config/settings.py) with the keys spelled for people; `[auth]`, `[guard]`,
`[scheduler]` (with `[scheduler.priority]`) and `[[license]]` are declared beside their
settings.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Annotated, Literal

import msgspec

from xce.config.auth import AuthTable
from xce.config.check import PosInt, PosNumber, Table
from xce.config.gres import Gres, Licenses, licenses, worker_gres
from xce.config.guard import GuardTable
from xce.config.scheduler import SchedulerTable, plugins_problem
from xce.config.settings import (
    DEFAULT_PORT,
    Config,
    ControllerKeys,
    ControllerSettings,
    HaSettings,
    TlsSettings,
    WorkerKeys,
)
from xce.core.model import HostFailurePolicy, QueueRecord
from xce.core.queue_rules import alias_problem, check_settings
from xce.core.validation import Invalid, error

_C, _Q = ControllerSettings(), QueueRecord("")
Names = tuple[Annotated[str, msgspec.Meta(min_length=1)], ...]  # none of them empty


def host_port(key: str, text: str, lowest_port: int = 1) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:7000`; an empty host is 127.0.0.1); `Invalid` naming `key` when
    `text` is not one (where `lowest_port` is 0, port 0 means any free port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()) or not lowest_port <= int(port) < 65536:
        note = " (port 0: any free port)" if lowest_port == 0 else ""
        raise Invalid(f"{key} must be HOST:PORT{note}, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


class ClusterTable(HaSettings, frozen=True):
    """`[cluster]`: the ordered controller candidates and high availability (xce/ha)."""

    controllers: Annotated[
        tuple[Annotated[str, msgspec.Meta(pattern="^https?://")], ...],
        msgspec.Meta(min_length=1),
        error("must be a non-empty list of http(s):// URLs"),
    ] = Config().controllers


class ControllerTable(ControllerKeys, frozen=True):
    """`[controller]`; `listen`, `state_dir`, `replication_*` become derived settings."""

    listen: str = f"127.0.0.1:{DEFAULT_PORT}"
    state_dir: str | None = None
    replication_listen: str | None = None
    replication_token_file: str | None = None

    def __post_init__(self) -> None:
        host_port("listen", self.listen)
        if self.replication_listen is not None:
            host_port("replication_listen", self.replication_listen)


class WorkerTable(WorkerKeys, frozen=True):
    """`[worker]`; `task_listen`, `relay_listen`, the directories and `token_file` become
    derived settings."""

    name: str | None = None  # default: this host's name
    attributes: dict[str, Annotated[str | int | float, error("must be a string or number")]] = {}
    spool_dir: str | None = None
    jobs_dir: str | None = None
    token_file: str | None = None
    gres: Gres | None = None
    task_listen: str = "127.0.0.1:0"
    relay_listen: str = ""  # HOST:PORT: relay other workers' heartbeats there

    def __post_init__(self) -> None:
        host_port("task_listen", self.task_listen, 0)
        if self.relay_listen:
            host_port("relay_listen", self.relay_listen)
        if self.gres is not None:
            worker_gres(self.gres)


class TlsTable(Table, frozen=True):
    """`[tls]`: PEM files (relative to the config file) and who must show a certificate."""

    cert_file: str | None = None
    key_file: str | None = None
    ca_file: str | None = None
    require_client_cert: Annotated[
        bool | Literal["none", "workers", "all"],
        error('must be "none", "workers", "all" or a boolean', got=True),
    ] = "none"
    insecure: bool = TlsSettings().insecure

    @property
    def client_cert_mode(self) -> str:
        mode = self.require_client_cert
        return ("all" if mode else "none") if isinstance(mode, bool) else mode

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise Invalid("cert_file and tls.key_file must be given together")
        if self.client_cert_mode != "none" and (self.cert_file is None or self.ca_file is None):
            raise Invalid("require_client_cert needs tls.cert_file, tls.key_file and tls.ca_file")


class QueueTable(Table, frozen=True):
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
    aliases: Annotated[Names, error("must be a list of names")] = ()
    # None: the controller's job_env; [] none; ["slurm", "lsf", "pbs"]
    job_env: Annotated[tuple[str, ...], error("must be a list of slurm, lsf, pbs")] | None = None
    missing_submit_dir: str = ""

    def __post_init__(self) -> None:

        if not self.name.replace("-", "").replace("_", "").isalnum():
            raise Invalid(f"name {self.name!r} may hold only letters, digits, - and _")
        wrong = plugins_problem(self.plugins)  # the built-in plugins: a config names those
        if wrong:
            raise Invalid(f"plugins: {wrong}")
        problem = check_settings(self.record())
        if problem:
            raise Invalid(problem, whole=True)

    def record(self) -> QueueRecord:
        own = ("shares", "job_env")
        same = {f.name: getattr(self, f.name) for f in fields(QueueRecord) if f.name not in own}
        shares = tuple(sorted((who, str(value)) for who, value in self.shares.items()))
        job_env = None if self.job_env is None else ",".join(self.job_env)
        return QueueRecord(**same, shares=shares, job_env=job_env)


class FileTable(Table, frozen=True):
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
        problem = alias_problem(q.record() if isinstance(q, QueueTable) else q for q in queues)
        if problem:
            raise Invalid(problem)
        licenses(self.license)
        if self.controller.default_queue not in names:
            raise Invalid(
                f"controller.default_queue {self.controller.default_queue!r} is not a queue"
            )
