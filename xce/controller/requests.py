"""Typed requests the service layer accepts, built by the API from decoded bodies.

`RunReport` is the heartbeat's Struct itself (xce/protocol/worker.py); the rest add what the
URL or the caller's identity says to a decoded body."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from xce.protocol.bodies import SubmitBody


@dataclass(frozen=True, slots=True)
class SubmitRequest:
    """A submit as the service takes it: the API's decoded `SubmitBody` (declared once, in
    xce/protocol/bodies.py), with the caller's user and submit host set, and what the API
    knows about the caller beside it. Built with `of`; the caller's fields are not body
    fields, so a client cannot send them."""

    body: SubmitBody
    # Whose uploads `inputs` may name: the submitter's own; None: anyone's (admins, and
    # callers inside the controller).
    uploads_of: str | None = None
    # Whose jobs `dependency` may name, as a predicate on the owner (the submitter may view
    # them); None: anyone's. A dependency reveals how its target ended.
    may_view_owner: Callable[[str], bool] | None = None
    # `privileged` (operators, admins) may give a priority above
    # `[scheduler.priority] default_job_priority`.
    privileged: bool = False
    # The submitter's own groups (users file, directory, or the OS for a local caller),
    # when the submitter is the job's user: its accounting groups.
    groups: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        body: SubmitBody,
        *,
        user: str,
        submit_host: str,
        uploads_of: str | None = None,
        may_view_owner: Callable[[str], bool] | None = None,
        privileged: bool = False,
        groups: tuple[str, ...] = (),
    ) -> SubmitRequest:
        """`body` as `user` submitted it from `submit_host`, with the caller's fields."""
        body = msgspec.structs.replace(body, user=user, submit_host=submit_host)
        return cls(body, uploads_of, may_view_owner, privileged, groups)

    @classmethod
    def from_fields(cls, **fields: Any) -> SubmitRequest:
        """A request from body and caller fields alike, for callers inside the controller and
        tests: `SubmitRequest.from_fields(user="alice", command="x", privileged=True)`."""
        caller = {k: fields.pop(k) for k in _CALLER if k in fields}
        return cls(SubmitBody(**fields), **caller)


_CALLER = ("uploads_of", "may_view_owner", "privileged", "groups")


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
    # Where the worker's task service listens (HOST:PORT); "" if it has none.
    task_address: str = ""
    release: str = ""  # the worker's build ("" from one before versions were sent)


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
    # longer than the fence timeout (xce/worker/keeper/fence.py).
    host_failure: bool = False
    # NVML's figures of the granted GPUs (xce/worker/devices/gpu_usage.py)
    gpu_util_pct: float = 0.0
    gpu_mem_peak_bytes: int = 0
    # Outputs the worker could not return, each "NAME: why" (the job's reason says so).
    output_problems: tuple[str, ...] = ()


__all__ = ["FinishReport", "SubmitRequest", "WorkerInfo"]
