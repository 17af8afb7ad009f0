"""The scheduling pass of a running controller: plan on a snapshot, commit the placements.

A part of `ControllerService` (xce/controller/service.py). `Scheduling` keeps what a pass
needs between passes (the incremental snapshot cache, fed by every applied event; the group
map; the planner) and what the API reads of the last pass (why each pending job waits, pass
statistics). Preemption (xce/sched/passes/preemption.py) runs around the plan: the suspended
victims that may go back first do, then the pass, then who is preempted. The plan and
preemption both ask the service's plugin registry (`service.registry`, chosen by
xce/server/compose.py)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from xce.core import events as ev
from xce.core.model import HostStatus
from xce.sched.incremental import SnapshotCache
from xce.sched.passes import preemption
from xce.sched.priority import PrioritySettings
from xce.sched.reasons import ReasonTexts
from xce.sched.snapshot import Snapshot, free_licenses
from xce.sched.types import Plan
from xce.telemetry import metrics

if TYPE_CHECKING:
    from xce.controller.service import ControllerService

Planner = Callable[..., Plan]


class Scheduling:
    """`schedule_once` over `service`'s state, and what the last pass said."""

    def __init__(self, service: ControllerService, planner: Planner) -> None:
        self.service = service
        self.planner = planner
        self.reasons = ReasonTexts()  # why pending jobs wait, rendered when read
        self.stats = {"scheduling_passes": 0, "last_pass_ms": 0.0, "dispatched": 0}
        self._groups = service.settings.scheduler.group_map()
        # The scheduler's view, updated by each committed event (xce/sched/incremental.py)
        self._snapshots = SnapshotCache()
        service.listeners.append(lambda event: self._snapshots.observe(event, service.state))

    async def schedule_once(self) -> int:
        """One scheduling pass: plan on a snapshot, then commit the placements."""
        state = self.service.state
        if not self._any_free_host() and not any(q.preempt for q in state.queues.values()):
            # A full (or empty) cluster: no pass over the pending jobs at all; every pending
            # job reads the same reason.
            online = any(h.status is HostStatus.ONLINE for h in state.hosts.values())
            self.reasons = ReasonTexts(
                default="all online hosts are full" if online else "no online host"
            )
            self.stats["scheduling_passes"] += 1  # a pass all the same: reasons are current
            return 0
        started = time.perf_counter()
        events = self._pass(self.service.clock())
        self.stats["scheduling_passes"] += 1
        self.stats["last_pass_ms"] = (time.perf_counter() - started) * 1000
        if events:
            await self.service.commit(events)
            self.stats["dispatched"] += len(events)
            metrics.DISPATCHED.inc(len(events))
        metrics.SCHEDULING_PASS.observe(time.perf_counter() - started)
        return len(events)

    def _any_free_host(self) -> bool:
        state = self.service.state
        for host in state.hosts.values():
            if host.status is not HostStatus.ONLINE:
                continue
            load = state.host_load.get(host.name)
            if load is None or load.slots < host.slots:
                return True
        return False

    def _pass(self, now: float) -> list[ev.Event]:
        """The events of one pass at `now`: resumed victims, placements, preemptions; the
        reasons of the jobs left waiting are kept for the API."""
        snapshot = self._snapshot(now)
        resumed: list[str] = []
        if preemption.needed(snapshot):  # suspended victims go back first
            resumed, snapshot = preemption.resume_first(snapshot)
        registry = self.service.registry
        result = self.planner(snapshot, now, registry=registry)
        self.reasons = ReasonTexts(result.reasons)
        now = self.service.clock()
        events: list[ev.Event] = [ev.JobResumed(now, job_id) for job_id in resumed]
        for placement in result.placements:
            events.append(
                ev.JobStarted(
                    now, placement.job_id, placement.host, placement.devices, placement.hosts
                )
            )
        if preemption.needed(snapshot):  # xce/sched/passes/preemption.py: resume, then preempt
            decision = preemption.decide(snapshot, now, result, registry)
            self.reasons.update(decision.reasons)
            events.extend(ev.JobResumed(now, job_id) for job_id in decision.resume)
            events.extend(ev.JobPreempted(now, p.victim, p.by, p.requeue) for p in decision.preempt)
        return events

    def _snapshot(self, now: float) -> Snapshot:
        """The scheduler's view at `now`: the cached snapshot with today's usage, and the
        free licenses and priority settings where the cluster has them."""
        service = self.service
        settings = service.settings
        snapshot = self._snapshots.snapshot(service.state, service.usage.usage(now), self._groups)
        if settings.licenses:
            snapshot = dataclasses.replace(
                snapshot, licenses=free_licenses(service.state, dict(settings.licenses))
            )
        if settings.scheduler.priority != PrioritySettings():
            snapshot = dataclasses.replace(snapshot, priority=settings.scheduler.priority)
        if self._predicts(snapshot):  # a queue's policy reads run-time predictions
            snapshot = dataclasses.replace(
                snapshot,
                predictions=service.predictions,
                predictive=settings.scheduler.predictive,
            )
        return snapshot

    def _predicts(self, snapshot: Snapshot) -> bool:
        """Whether a queue's policy reads run-time predictions: only then does the snapshot
        carry them, so a cluster without such a queue schedules exactly as before."""
        registry = self.service.registry
        for queue in snapshot.queues.values():
            try:
                if registry.policy_for(queue.plugins).predicts:
                    return True
            except ValueError:  # a plugin this registry lacks: the pass names it
                continue
        return False
