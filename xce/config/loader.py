"""The one TOML config file, validated at start with messages that name the bad key.

A single file serves every role: `[cluster]` (the ordered controller candidate list),
`[controller]`, `[auth]`, `[[queue]]`, `[worker]`, `[tls]`, `[guard]`, `[scheduler]` and
`[[license]]`. Unknown keys are errors, not silently ignored, because a typo in a cluster
config is an outage waiting to happen.

Each key is declared once in a typed msgspec table (xce/config/tables.py, and beside their
settings for `[auth]`, `[guard]`, `[scheduler]`, `[[license]]`; the login backends declare
their own in xce/auth/backends); xce/config/check.py words the errors. What the rest of the
code reads are the settings of xce/config/settings.py, which extend the
same keys; `parse_config` derives the rest: paths resolved against the file, `listen` split
into host and port, token files read.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from xce.config.auth import refuse_static_tokens
from xce.config.check import convert, values
from xce.config.file_safety import OPERATOR_SECRET, problems
from xce.config.gres import licenses, worker_gres
from xce.config.settings import (
    Config,
    ControllerKeys,
    ControllerSettings,
    HaSettings,
    TlsSettings,
    WorkerKeys,
    WorkerSettings,
)
from xce.config.tables import FileTable, TlsTable, WorkerTable, host_port
from xce.core.errors import ConfigError

__all__ = ["load_config", "parse_config"]


def parse_config(data: dict[str, Any], path: Path | None = None) -> Config:
    """Validate a parsed TOML document into `Config`; raises `ConfigError` naming the key."""
    base = path.parent if path else Path.cwd()
    refuse_static_tokens(data.get("auth") if isinstance(data, dict) else None)
    file = convert(data, FileTable)
    return Config(
        controllers=tuple(c.rstrip("/") for c in file.cluster.controllers),
        controller=_controller(file, base),
        worker=_worker(file.worker, base),
        path=path,
        tls=_tls(file.tls, base),
        guard=file.guard.settings(),
        auth=file.auth.settings(base),
        ha=HaSettings(**values(file.cluster, HaSettings)),
    )


def _resolve(base: Path, raw: str) -> Path:
    return (base / Path(raw).expanduser()).resolve()


def _controller(file: FileTable, base: Path) -> ControllerSettings:
    t = file.controller
    out = values(t, ControllerKeys)
    out["listen_host"], out["listen_port"] = host_port("listen", t.listen)
    if t.state_dir is not None:
        out["state_dir"] = _resolve(base, t.state_dir)
    out["url"] = t.url.rstrip("/")
    if t.local_socket:
        out["local_socket"] = str(_resolve(base, t.local_socket))
    if t.replication_listen is not None:
        out["replication_host"], out["replication_port"] = host_port(
            "replication_listen", t.replication_listen
        )
    if t.replication_token_file is not None:
        out["replication_token"] = _secret(
            "controller.replication_token_file", base, t.replication_token_file
        )
    if file.queue is not None:
        out["queues"] = tuple(q.record() for q in file.queue)
    return ControllerSettings(
        **out, scheduler=file.scheduler.settings(), licenses=licenses(file.license)
    )


def _worker(t: WorkerTable, base: Path) -> WorkerSettings:
    out = values(t, WorkerKeys)
    if t.name is not None:
        out["name"] = t.name
    for key in ("spool_dir", "jobs_dir"):
        if (raw := getattr(t, key)) is not None:
            out[key] = _resolve(base, raw)
    out["task_host"], out["task_port"] = host_port("task_listen", t.task_listen, 0)
    if t.relay_listen:
        out["relay_host"], out["relay_port"] = host_port("relay_listen", t.relay_listen)
    if t.token_file is not None:
        out["token"] = _secret("worker.token_file", base, t.token_file)
    attributes = tuple((k, str(v)) for k, v in sorted(t.attributes.items()))
    gres = None if t.gres is None else worker_gres(t.gres)
    return WorkerSettings(**out, attributes=attributes, gres=gres)


def _tls(t: TlsTable, base: Path) -> TlsSettings:
    def path(raw: str | None) -> Path | None:
        return None if raw is None else _resolve(base, raw)

    return TlsSettings(
        cert_file=path(t.cert_file),
        key_file=path(t.key_file),
        ca_file=path(t.ca_file),
        require_client_cert=t.client_cert_mode,
        insecure=t.insecure,
    )


def _secret(key: str, base: Path, raw: str) -> str:
    """A token file's text. One others could read (or replace) is refused, as StrictModes
    does for the controller's own secrets (xce/auth/strict_modes.py): the message names the
    fix."""
    path = base / Path(raw).expanduser()  # `~/token`: the home's, as for every path
    found = problems([(path, OPERATOR_SECRET)])
    if found:
        raise ConfigError(f"{key}: {found[0]}")
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"{key} {path}: {exc.strerror}") from None


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
