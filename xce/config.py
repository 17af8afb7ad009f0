"""The one TOML config file, validated at start with messages that name the bad key.

A single file serves every role: `[cluster]` (the ordered controller candidate list),
`[controller]`, `[auth]`, `[[queue]]` and `[worker]`. Unknown keys are errors, not silently
ignored, because a typo in a cluster config is a outage waiting to happen.
"""

from __future__ import annotations

import os
import re
import socket
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from xce.auth.guard import GuardSettings
from xce.auth.settings import AuthSettings, parse_auth
from xce.core.errors import InvalidRequest
from xce.core.model import HostFailurePolicy, QueueRecord
from xce.sched.settings import SchedulerSettings, parse_scheduler

DEFAULT_PORT = 6820


class ConfigError(InvalidRequest):
    """A config file is unreadable or has a bad key; the message names file and key."""

    code = "config_error"


@dataclass(frozen=True)
class ControllerSettings:
    listen_host: str = "127.0.0.1"
    listen_port: int = DEFAULT_PORT
    state_dir: Path = field(default_factory=lambda: Path("~/.local/share/xce").expanduser())
    heartbeat_interval_s: float = 5.0
    missed_heartbeats: int = 3
    # A silent host is unavailable after heartbeat_interval_s * missed_heartbeats; its jobs
    # are requeued (or ended) only fence_timeout_s later, by which time its worker has
    # killed them itself (it is told this value): a job never runs on two hosts at once.
    fence_timeout_s: float = 30.0
    schedule_interval_s: float = 1.0
    max_upload_mb: int = 1024
    # Staged uploads not yet attached to a job: at most this much per user, and deleted
    # when no job has used them within upload_ttl_s, so uploads cannot fill the disk.
    upload_quota_mb: int = 10240
    upload_ttl_s: float = 86400.0
    # What one job attempt may return in all (stdout, stderr and outputs; each file is also
    # capped at max_upload_mb): a job's sparse 15 TB file must not fill the controller's disk.
    max_job_outputs_mb: int = 10240
    # Which accounts jobs may run as (checked at submit where the name resolves on the
    # controller host; workers check again on theirs): root only with allow_root_jobs,
    # other uids below min_job_uid only when listed in job_users.
    allow_root_jobs: bool = False
    min_job_uid: int = 1000
    job_users: tuple[str, ...] = ()
    max_body_kb: int = 1024
    max_array_size: int = 1_000_000
    queues: tuple[QueueRecord, ...] = (QueueRecord("normal", priority=30),)
    default_queue: str = "normal"
    wal_fsync: str = "always"
    wal_fsync_interval_s: float = 1.0
    wal_segment_mb: int = 64
    checkpoint_every: int = 100_000
    checkpoint_interval_s: float = 300.0
    finished_retention_s: float = 3600.0
    # Accounting (xce/accounting): one record per ended attempt in state_dir/accounting,
    # kept for this many whole months before the current one (0: keep everything).
    accounting: bool = True
    accounting_retention_months: int = 0
    # HA: this candidate's own URL in cluster.controllers (default: the one whose host and
    # port match `listen`), its replication listener (default: listen port + 1) and the
    # standby service token it presents to a primary.
    url: str = ""
    replication_host: str = ""
    replication_port: int = 0
    replication_token: str = ""
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    # Cluster-wide consumables (`[[license]] name = "matlab" count = 10`), counted against
    # the active jobs' `--license` requests by the scheduler.
    licenses: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class WorkerSettings:
    name: str = field(default_factory=socket.gethostname)
    slots: int = 0
    memory_mb: int = 0
    attributes: tuple[tuple[str, str], ...] = ()
    spool_dir: Path = field(default_factory=lambda: Path("~/.local/share/xce/worker").expanduser())
    allow_root_jobs: bool = False
    kill_grace_s: float = 10.0
    heartbeat_interval_s: float = 5.0
    usage_interval_s: float = 2.0
    token: str = ""
    # Where the jobs' working directories go (each 0700, owned by the job's user). Every
    # parent must be searchable by the job users (the state and spool dirs are 0700):
    # default <spool_dir>/jobs for a worker that is not root, /var/spool/xce/<name> for root.
    jobs_dir: Path | None = None
    # Jobs never run as an account below this uid (system accounts), root only with
    # allow_root_jobs: like Slurm's and LSF's guards, checked on the host that runs the job.
    min_job_uid: int = 1000
    # Containment (xce/worker/cgroups): "auto" (v2, else v1, else none), "v2", "v1", "none";
    # the parent cgroup of this worker's jobs (default: the worker's own cgroup); a per-job
    # limit on tasks, threads included (0: none; a fork bomb stops there).
    cgroup: str = "auto"
    cgroup_parent: str = ""
    pids_limit: int = 8192
    # Each job attempt gets a /tmp of its own (a tmpfs in the job's mount namespace, no
    # larger than its memory limit and charged to it, like Slurm's job_container/tmpfs); off
    # by default as in Slurm, since jobs then no longer share /tmp with anything on the host.
    # A job whose working or job directory is under /tmp keeps the host's. /dev/shm is
    # always the job's own. Root workers only.
    private_tmp: bool = False
    # Counted devices by kind (`[worker.gres] gpu = ["0", "1"]`); None: no [worker.gres]
    # table, GPUs are detected through NVML where a driver is present (xce/worker/gpus.py).
    # gpu_device_path names each GPU's device node ({} is the id), which the devices cgroup
    # denies to jobs not granted it.
    gres: dict[str, tuple[str, ...]] | None = None
    gpu_device_path: str = "/dev/nvidia{}"
    # The task service (xce/worker/tasks.py: `xce launch` starts a job's tasks here): the
    # address it listens on; port 0 = any free port. Reported at registration.
    task_host: str = "127.0.0.1"
    task_port: int = 0

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


@dataclass(frozen=True)
class HaSettings:
    """`[cluster]` keys for high availability (xce/ha): how the candidates replicate and
    when a standby takes over."""

    replication: str = "async"  # or "sync": a commit waits for a standby's durable ack
    failover_timeout_s: float = 3.0  # primary silence before a standby takes over
    heartbeat_interval_s: float = 0.5  # primary -> standby heartbeats, and peer probes
    sync_timeout_s: float = 2.0  # sync mode: wait this long for an ack, then degrade
    reclaim: bool = False  # a better-ranked candidate that returns takes the role back

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


def _check_keys(section: str, data: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigError(
            f"unknown key {section}.{unknown[0]} (allowed: {', '.join(sorted(allowed))})"
        )


def _typed(section: str, key: str, value: Any, kind: type | tuple[type, ...]) -> Any:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    name = " or ".join(k.__name__ for k in kinds)
    if isinstance(value, bool) and bool not in kinds:
        raise ConfigError(f"{section}.{key} must be a {name}, not a boolean")
    if not isinstance(value, kind):
        raise ConfigError(f"{section}.{key} must be a {name}, got {value!r}")
    return value


def _positive(section: str, key: str, value: Any) -> Any:
    _typed(section, key, value, (int, float))
    if value <= 0:
        raise ConfigError(f"{section}.{key} must be positive, got {value!r}")
    return value


def _listen(section: str, text: Any) -> tuple[str, int]:
    _typed(section, "listen", text, str)
    host, sep, port = text.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise ConfigError(f"{section}.listen must be HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def _attributes(section: str, data: Any) -> tuple[tuple[str, str], ...]:
    _typed(section, "attributes", data, dict)
    out = []
    for k, v in sorted(data.items()):
        if not isinstance(v, (str, int, float)) or isinstance(v, bool):
            raise ConfigError(f"{section}.attributes.{k} must be a string or number")
        out.append((k, str(v)))
    return tuple(out)


def _queue(i: int, data: Any) -> QueueRecord:
    section = f"queue[{i}]"
    _typed("queue", str(i), data, dict)
    _check_keys(section, data, {f.name for f in fields(QueueRecord)})
    name = _typed(section, "name", data.get("name"), str)
    if not name.replace("-", "").replace("_", "").isalnum():
        raise ConfigError(f"{section}.name {name!r} may hold only letters, digits, - and _")
    try:
        policy = HostFailurePolicy(data.get("on_host_failure", "requeue"))
    except ValueError:
        raise ConfigError(f"{section}.on_host_failure must be requeue or exit") from None
    hosts = data.get("hosts", [])
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise ConfigError(f"{section}.hosts must be a list of host names")
    return QueueRecord(
        name=name,
        priority=_typed(section, "priority", data.get("priority", 0), int),
        open=_typed(section, "open", data.get("open", True), bool),
        active=_typed(section, "active", data.get("active", True), bool),
        hosts=tuple(hosts),
        description=_typed(section, "description", data.get("description", ""), str),
        on_host_failure=policy,
        **_queue_scheduling(section, data),
    )


def _queue_scheduling(section: str, data: dict[str, Any]) -> dict[str, Any]:
    """`plugins`, `max_running`, `max_running_per_user`, `shares`, the per-job defaults and
    maximums and `users` of one `[[queue]]`."""
    from xce.sched.plugins import policy_for

    out: dict[str, Any] = {}
    plugins = data.get("plugins", [])
    if not isinstance(plugins, list) or not all(isinstance(p, str) for p in plugins):
        raise ConfigError(f"{section}.plugins must be a list of plugin names")
    try:
        policy_for(tuple(plugins))
    except ValueError as exc:
        raise ConfigError(f"{section}.plugins: {exc}") from None
    out["plugins"] = tuple(plugins)
    for key in (
        "max_running",
        "max_running_per_user",
        "default_walltime_s",
        "max_walltime_s",
        "default_memory_mb",
        "max_memory_mb",
        "max_slots",
    ):
        if key in data:
            out[key] = int(_positive(section, key, _typed(section, key, data[key], int)))
    users = data.get("users", [])
    if not isinstance(users, list) or not all(isinstance(u, str) and u for u in users):
        raise ConfigError(f"{section}.users must be a list of user names and @groups")
    out["users"] = tuple(users)
    preempt = data.get("preempt", [])
    if not isinstance(preempt, list) or not all(isinstance(q, str) and q for q in preempt):
        raise ConfigError(f"{section}.preempt must be a list of queue names")
    out["preempt"] = tuple(preempt)
    out["preempt_mode"] = _typed(section, "preempt_mode", data.get("preempt_mode", "suspend"), str)
    out["preempt_min_run_s"] = _typed(
        section, "preempt_min_run_s", data.get("preempt_min_run_s", 0), int
    )
    from xce.controller.queue_rules import check_settings

    problem = check_settings(
        QueueRecord(
            str(data.get("name", "x")),
            **{k: v for k, v in out.items() if k.startswith(("default_", "max_", "preempt"))},
        )
    )
    if problem:
        raise ConfigError(f"{section}: {problem}")
    shares = data.get("shares", {})
    _typed(section, "shares", shares, dict)
    for who, value in shares.items():
        _positive(f"{section}.shares", who, value)
    out["shares"] = tuple(sorted((who, str(value)) for who, value in shares.items()))
    return out


_JOB_USER = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")


def _controller_safety(data: dict[str, Any]) -> dict[str, Any]:
    """`allow_root_jobs`, `min_job_uid`, `job_users` of `[controller]`: who jobs may run as."""
    s = "controller"
    out: dict[str, Any] = {}
    if "allow_root_jobs" in data:
        out["allow_root_jobs"] = _typed(s, "allow_root_jobs", data["allow_root_jobs"], bool)
    if "min_job_uid" in data:
        uid = _typed(s, "min_job_uid", data["min_job_uid"], int)
        if uid < 0:
            raise ConfigError(f"controller.min_job_uid must be 0 or more, got {uid}")
        out["min_job_uid"] = uid
    if "job_users" in data:
        users = data["job_users"]
        if not isinstance(users, list) or not all(
            isinstance(u, str) and _JOB_USER.match(u) for u in users
        ):
            raise ConfigError(f"controller.job_users must be a list of user names, got {users!r}")
        out["job_users"] = tuple(users)
    return out


def _controller(data: dict[str, Any], base: Path) -> dict[str, Any]:
    s = "controller"
    _check_keys(
        s,
        data,
        {
            "listen",
            "state_dir",
            "heartbeat_interval_s",
            "missed_heartbeats",
            "schedule_interval_s",
            "max_upload_mb",
            "max_body_kb",
            "max_array_size",
            "default_queue",
            "wal_fsync",
            "wal_fsync_interval_s",
            "wal_segment_mb",
            "checkpoint_every",
            "checkpoint_interval_s",
            "finished_retention_s",
            "url",
            "replication_listen",
            "replication_token",
            "replication_token_file",
            "fence_timeout_s",
            "upload_quota_mb",
            "upload_ttl_s",
            "allow_root_jobs",
            "min_job_uid",
            "job_users",
            "max_job_outputs_mb",
            "accounting",
            "accounting_retention_months",
        },
    )
    out: dict[str, Any] = _controller_safety(data)
    if "url" in data:
        out["url"] = _typed(s, "url", data["url"], str).rstrip("/")
    if "replication_listen" in data:
        out["replication_host"], out["replication_port"] = _listen(s, data["replication_listen"])
    if "replication_token" in data:
        out["replication_token"] = _typed(s, "replication_token", data["replication_token"], str)
    if "replication_token_file" in data:
        path = (
            base / _typed(s, "replication_token_file", data["replication_token_file"], str)
        ).expanduser()
        _secret_file_safe("controller.replication_token_file", path)
        try:
            out["replication_token"] = path.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"controller.replication_token_file {path}: {exc.strerror}") from None
    if "listen" in data:
        out["listen_host"], out["listen_port"] = _listen(s, data["listen"])
    if "state_dir" in data:
        raw = _typed(s, "state_dir", data["state_dir"], str)
        out["state_dir"] = (base / Path(raw).expanduser()).resolve()
    for key in (
        "heartbeat_interval_s",
        "schedule_interval_s",
        "wal_fsync_interval_s",
        "checkpoint_interval_s",
        "finished_retention_s",
        "fence_timeout_s",
        "upload_ttl_s",
    ):
        if key in data:
            out[key] = float(_positive(s, key, data[key]))
    if "wal_fsync" in data:
        out["wal_fsync"] = _typed(s, "wal_fsync", data["wal_fsync"], str)
        if out["wal_fsync"] not in ("always", "interval"):
            raise ConfigError(
                f"controller.wal_fsync must be always or interval, got {out['wal_fsync']!r}"
            )
    for key in (
        "missed_heartbeats",
        "max_upload_mb",
        "max_body_kb",
        "max_array_size",
        "wal_segment_mb",
        "checkpoint_every",
        "upload_quota_mb",
        "max_job_outputs_mb",
    ):
        if key in data:
            out[key] = int(_positive(s, key, _typed(s, key, data[key], int)))
    if "default_queue" in data:
        out["default_queue"] = _typed(s, "default_queue", data["default_queue"], str)
    if "accounting" in data:
        out["accounting"] = _typed(s, "accounting", data["accounting"], bool)
    if "accounting_retention_months" in data:
        months = _typed(s, "accounting_retention_months", data["accounting_retention_months"], int)
        if months < 0:
            raise ConfigError(
                "controller.accounting_retention_months must be 0 (keep "
                f"everything) or more, got {months}"
            )
        out["accounting_retention_months"] = months
    return out


def _secret_file_safe(key: str, path: Path) -> None:
    """A token file others could read (or replace) is refused, as StrictModes does for the
    controller's own secrets (xce/auth/strict_modes.py): the message names the fix."""
    from xce.auth.strict_modes import OPERATOR_SECRET, problems

    found = problems([(path, OPERATOR_SECRET)])
    if found:
        raise ConfigError(f"{key}: {found[0]}")


def _worker(data: dict[str, Any], base: Path) -> dict[str, Any]:
    s = "worker"
    _check_keys(
        s,
        data,
        {
            "name",
            "slots",
            "memory_mb",
            "attributes",
            "spool_dir",
            "allow_root_jobs",
            "kill_grace_s",
            "heartbeat_interval_s",
            "usage_interval_s",
            "token",
            "token_file",
            "jobs_dir",
            "min_job_uid",
            "cgroup",
            "cgroup_parent",
            "pids_limit",
            "private_tmp",
            "gres",
            "gpu_device_path",
            "task_listen",
        },
    )
    out: dict[str, Any] = {}
    if "name" in data:
        out["name"] = _typed(s, "name", data["name"], str)
    for key in ("slots", "memory_mb"):
        if key in data:
            out[key] = int(_positive(s, key, _typed(s, key, data[key], int)))
    if "attributes" in data:
        out["attributes"] = _attributes(s, data["attributes"])
    for key in ("spool_dir", "jobs_dir"):
        if key in data:
            raw = _typed(s, key, data[key], str)
            out[key] = (base / Path(raw).expanduser()).resolve()
    if "min_job_uid" in data:
        out["min_job_uid"] = _typed(s, "min_job_uid", data["min_job_uid"], int)
        if isinstance(out["min_job_uid"], bool) or out["min_job_uid"] < 0:
            raise ConfigError("worker.min_job_uid must be a uid (an integer >= 0)")
    if "pids_limit" in data:
        out["pids_limit"] = _typed(s, "pids_limit", data["pids_limit"], int)
        if isinstance(out["pids_limit"], bool) or out["pids_limit"] < 0:
            raise ConfigError("worker.pids_limit must be 0 (no limit) or a positive integer")
    if "cgroup" in data:
        out["cgroup"] = _typed(s, "cgroup", data["cgroup"], str)
        if out["cgroup"] not in ("auto", "v2", "v1", "none"):
            raise ConfigError(
                f'worker.cgroup must be "auto", "v2", "v1" or "none", got {out["cgroup"]!r}'
            )
    if "task_listen" in data:
        text = _typed(s, "task_listen", data["task_listen"], str)
        host, sep, port = text.rpartition(":")
        if not sep or not (port.isascii() and port.isdigit()) or not int(port) < 65536:
            raise ConfigError(
                f"worker.task_listen must be HOST:PORT (port 0: any free port), got {text!r}"
            )
        out["task_host"], out["task_port"] = host.strip("[]") or "127.0.0.1", int(port)
    if "cgroup_parent" in data:
        out["cgroup_parent"] = _typed(s, "cgroup_parent", data["cgroup_parent"], str)
    for key in ("allow_root_jobs", "private_tmp"):
        if key in data:
            out[key] = _typed(s, key, data[key], bool)
    for key in ("kill_grace_s", "heartbeat_interval_s", "usage_interval_s"):
        if key in data:
            out[key] = float(_positive(s, key, data[key]))
    if "gres" in data:
        from xce.gres_config import parse_worker_gres

        out["gres"] = parse_worker_gres(data["gres"])
    if "gpu_device_path" in data:
        out["gpu_device_path"] = _typed(s, "gpu_device_path", data["gpu_device_path"], str)
        if "{}" not in out["gpu_device_path"]:
            raise ConfigError(
                'worker.gpu_device_path must contain {} (the device id), e.g. "/dev/nvidia{}"'
            )
    if "token" in data:
        out["token"] = _typed(s, "token", data["token"], str)
    if "token_file" in data:
        path = (base / _typed(s, "token_file", data["token_file"], str)).expanduser()
        _secret_file_safe("worker.token_file", path)
        try:
            out["token"] = path.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"worker.token_file {path}: {exc.strerror}") from None
    return out


def _tls(data: Any, base: Path) -> TlsSettings:
    _typed("(top level)", "tls", data, dict)
    _check_keys(
        "tls", data, {"cert_file", "key_file", "ca_file", "require_client_cert", "insecure"}
    )
    out: dict[str, Any] = {}
    for key in ("cert_file", "key_file", "ca_file"):
        if key in data:
            raw = _typed("tls", key, data[key], str)
            out[key] = (base / Path(raw).expanduser()).resolve()
    if ("cert_file" in out) != ("key_file" in out):
        raise ConfigError("tls.cert_file and tls.key_file must be given together")
    if "insecure" in data:
        out["insecure"] = _typed("tls", "insecure", data["insecure"], bool)
    if "require_client_cert" in data:
        mode = data["require_client_cert"]
        if isinstance(mode, bool):
            mode = "all" if mode else "none"
        if mode not in ("none", "workers", "all"):
            raise ConfigError(
                'tls.require_client_cert must be "none", "workers", "all" or a '
                f"boolean, got {mode!r}"
            )
        if mode != "none" and not ("cert_file" in out and "ca_file" in out):
            raise ConfigError(
                "tls.require_client_cert needs tls.cert_file, tls.key_file and tls.ca_file"
            )
        out["require_client_cert"] = mode
    return TlsSettings(**out)


def parse_config(data: dict[str, Any], path: Path | None = None) -> Config:
    """Validate a parsed TOML document into `Config`; raises `ConfigError` naming the key."""
    base = path.parent if path else Path.cwd()
    _check_keys(
        "(top level)",
        data,
        {
            "cluster",
            "controller",
            "auth",
            "queue",
            "worker",
            "tls",
            "guard",
            "scheduler",
            "license",
        },
    )
    cluster = data.get("cluster", {})
    _check_keys(
        "cluster",
        cluster,
        {
            "controllers",
            "replication",
            "failover_timeout_s",
            "heartbeat_interval_s",
            "sync_timeout_s",
            "reclaim",
        },
    )
    ha: dict[str, Any] = {}
    if "replication" in cluster:
        ha["replication"] = _typed("cluster", "replication", cluster["replication"], str)
        if ha["replication"] not in ("async", "sync"):
            raise ConfigError(
                f"cluster.replication must be async or sync, got {ha['replication']!r}"
            )
    for key in ("failover_timeout_s", "heartbeat_interval_s", "sync_timeout_s"):
        if key in cluster:
            ha[key] = float(_positive("cluster", key, cluster[key]))
    if "reclaim" in cluster:
        ha["reclaim"] = _typed("cluster", "reclaim", cluster["reclaim"], bool)
    controllers = cluster.get("controllers", list(Config.controllers))
    if (
        not isinstance(controllers, list)
        or not controllers
        or not all(
            isinstance(c, str) and c.startswith(("http://", "https://")) for c in controllers
        )
    ):
        raise ConfigError("cluster.controllers must be a non-empty list of http(s):// URLs")
    ctl = _controller(data.get("controller", {}), base)
    if "queue" in data:
        queues = tuple(_queue(i, q) for i, q in enumerate(data["queue"]))
        names = [q.name for q in queues]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup:
            raise ConfigError(f"queue {dup!r} is defined twice")
        for i, queue in enumerate(queues):
            unknown = [n for n in queue.preempt if n not in names]
            if unknown:
                raise ConfigError(f"queue[{i}].preempt: queue {unknown[0]!r} is not defined")
        ctl["queues"] = queues
    if "scheduler" in data:
        try:
            ctl["scheduler"] = parse_scheduler(data["scheduler"])
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    if "license" in data:
        from xce.gres_config import parse_licenses

        ctl["licenses"] = parse_licenses(data["license"])
    settings = ControllerSettings(**ctl)
    if settings.default_queue not in {q.name for q in settings.queues}:
        raise ConfigError(f"controller.default_queue {settings.default_queue!r} is not a queue")
    worker = WorkerSettings(**_worker(data.get("worker", {}), base))
    tls = _tls(data.get("tls", {}), base)
    from xce.auth.guard_config import parse_guard  # uses this module's helpers

    auth = parse_auth(data.get("auth", {}), base)
    return Config(
        tuple(c.rstrip("/") for c in controllers),
        settings,
        worker,
        path,
        tls,
        guard=parse_guard(data.get("guard", {})),
        auth=auth,
        ha=HaSettings(**ha),
    )


def load_config(path: str | os.PathLike[str] | None) -> Config:
    if path is None:
        return Config()
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read config {p}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config {p} is not valid TOML: {exc}") from None
    try:
        return parse_config(data, p)
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc.message}") from None
