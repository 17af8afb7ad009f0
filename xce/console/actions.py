"""Every control action the console can take: what it calls and what the dialog says.

The confirmation text names exactly what will change (which jobs, queue or host, and the
effect), so a dialog never says just "Are you sure?".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from xce.client import XceClient


@dataclass(frozen=True)
class ActionSpec:
    name: str  # e.g. "job.suspend"; keys of xce.console.perms.ACTION_PERMISSIONS
    verb: str  # "Suspend"
    effect: str  # what happens to each target
    call: Callable[[XceClient, str], Awaitable[Any]]


def _job(action: str) -> Callable[[XceClient, str], Awaitable[Any]]:
    return lambda client, target: client.control(target, action)


def _queue(action: str) -> Callable[[XceClient, str], Awaitable[Any]]:
    return lambda client, target: client.queue_action(target, action)


def _host(action: str) -> Callable[[XceClient, str], Awaitable[Any]]:
    return lambda client, target: client.host_action(target, action, "from xce tui")


ACTIONS: dict[str, ActionSpec] = {
    a.name: a
    for a in (
        ActionSpec(
            "job.suspend",
            "Suspend",
            "stops running (SIGSTOP) or stays pending, held, until resumed",
            _job("stop"),
        ),
        ActionSpec(
            "job.resume", "Resume", "continues (SIGCONT) or becomes pending again", _job("resume")
        ),
        ActionSpec(
            "job.requeue",
            "Requeue",
            "is stopped if running and goes back to PEND to run again",
            _job("requeue"),
        ),
        ActionSpec(
            "job.kill",
            "Kill",
            "is terminated (SIGTERM, then SIGKILL) and ends as EXIT",
            _job("kill"),
        ),
        ActionSpec("queue.open", "Open", "accepts new submissions", _queue("open")),
        ActionSpec(
            "queue.close",
            "Close",
            "refuses new submissions; queued jobs still run",
            _queue("close"),
        ),
        ActionSpec(
            "queue.activate", "Activate", "dispatches its pending jobs again", _queue("activate")
        ),
        ActionSpec(
            "queue.deactivate",
            "Deactivate",
            "stops dispatching; submissions still accepted, running jobs continue",
            _queue("deactivate"),
        ),
        ActionSpec("host.open", "Open", "takes new jobs again", _host("open")),
        ActionSpec(
            "host.close", "Close", "takes no new jobs; running jobs continue", _host("close")
        ),
        ActionSpec(
            "host.drain",
            "Drain",
            "takes no new jobs and shows drained once its jobs end",
            _host("drain"),
        ),
    )
}


def describe(spec: ActionSpec, targets: list[str]) -> str:
    """The dialog text: `Suspend job 12 and 2 more (12, 13, 14[2])?` plus the effect."""
    kind = spec.name.split(".")[0]
    noun = {"job": "job", "queue": "queue", "host": "host"}[kind]
    if len(targets) == 1:
        head = f"{spec.verb} {noun} {targets[0]}?"
    else:
        shown = ", ".join(targets[:12]) + (
            f" and {len(targets) - 12} more" if len(targets) > 12 else ""
        )
        head = f"{spec.verb} {len(targets)} {noun}s: {shown}?"
    subject = "Each" if len(targets) > 1 else "It"
    return f"{head}\n{subject} {spec.effect}."
