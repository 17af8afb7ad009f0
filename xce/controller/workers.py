"""The controller's side of the worker protocol, and host liveness.

The protocol is level-triggered: a worker asks "what should I be running?" and gets the full
desired set for its host (run / stop / kill, by job id and attempt). It starts what is
missing, signals what differs and kills what is not listed. Lost messages, worker restarts
and controller failovers therefore heal on the next poll, and a job never starts twice: the
worker keys every process by (job id, attempt) and a finished attempt is reported until the
controller acknowledges it.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xce.controller import launchcred
from xce.controller.requests import FinishReport, WorkerInfo
from xce.controller.service import ControllerService
from xce.controller.shareusage import ShareReport, ShareUsage
from xce.core import events as ev
from xce.core.allocation import host_memory_mb
from xce.core.errors import Conflict, NotFound, Unauthorized
from xce.core.job_context import job_families, missing_policy
from xce.core.model import HostFailurePolicy, JobRecord, JobState, Usage
from xce.core.state import ClusterState
from xce.protocol.relay_keys import heartbeat_mac, new_relay_key, same
from xce.protocol.worker import RunReport


def _usage(r: RunReport | FinishReport) -> Usage:
    return Usage(
        r.cpu_user_s,
        r.cpu_system_s,
        r.max_rss_bytes,
        r.wall_time_s,
        r.gpu_util_pct,
        r.gpu_mem_peak_bytes,
    )


def assignment(job: JobRecord, context: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a worker needs to run (or signal) one job; `context` (`WorkerGateway.context`)
    adds what the job sees of the scheduler it was written for."""
    spec = job.spec
    if job.kill_requested:
        action = "kill"
    elif job.state is JobState.RUN:
        action = "run"
    else:
        action = "stop"
    return {
        "job_id": job.id,
        "attempt": job.attempt,
        "action": action,
        "number": job.number,
        "array_index": job.array_index,
        "user": spec.user,
        "name": spec.name,
        "queue": spec.queue,
        "command": spec.command,
        "script": spec.script,
        "slots": spec.slots,
        "memory_mb": spec.memory_mb,
        "walltime_s": spec.walltime_s,
        "env": dict(spec.env),
        "cwd": spec.cwd,
        "inputs": list(spec.inputs),
        "outputs": list(spec.outputs),
        "stdout_file": spec.stdout_file,
        "stderr_file": spec.stderr_file,
        "start_time": job.start_time,
        "devices": list(job.devices),  # granted ("gpu:0"): the worker binds exactly these
        # every host and its slots, first = this one: XCE_HOSTS, XCE_HOSTFILE...
        "hosts": [[p.host, p.slots] for p in job.hosts],
        "submit_dir": spec.submit_dir,
        "submit_host": spec.submit_host,
        **(context or {}),
    }


def share_assignment(job: JobRecord, host: str) -> dict[str, Any]:
    """What a host that is not a multi-host job's first holds for it."""
    part = next((p for p in job.hosts if p.host == host), None)
    slots = part.slots if part is not None else 0
    return {
        "job_id": job.id,
        "attempt": job.attempt,
        "action": assignment_action(job),
        "user": job.spec.user,
        "slots": slots,
        "memory_mb": host_memory_mb(job.spec, slots),
        # this host's own grant: the share binds these as the first host binds its own
        "devices": list(part.devices) if part is not None else [],
    }


def assignment_action(job: JobRecord) -> str:
    if job.kill_requested:
        return "kill"
    return "run" if job.state is JobState.RUN else "stop"


RECONNECT_GRACE_S = 10.0
# Live usage goes into the WAL at most this often per job (the final usage always does).
USAGE_LOG_INTERVAL_S = 30.0


@dataclass(frozen=True)
class KeyHolder:
    """The token a host registered with: its subject and times (epoch seconds)."""

    subject: str
    issued_at: float
    expires_at: float


class WorkerGateway:
    """Registration, heartbeats, desired-state polls and finish reports from workers.

    The fence rule (a job never runs twice): a host silent for `heartbeat_deadline_s` is
    marked unavailable, but its jobs are left as they are for `fence_timeout_s` more. Every
    worker is told `fence_timeout_s` and kills its own jobs once it has reached no
    controller for that long, so when the controller finally requeues (or ends) them, the
    first attempt is already dead. A host heard from in between carries on.
    """

    def __init__(self, service: ControllerService) -> None:
        self.service = service
        # The basis of the deadlines: the last contact, or the controller's start plus
        # RECONNECT_GRACE_S for hosts it has not heard from yet.
        self.last_seen: dict[str, float] = {}
        # Real contacts only (register, heartbeat): what `xce host show` reports.
        self.heard: dict[str, float] = {}
        self.load: dict[str, dict[str, float]] = {}
        # What each worker last said about how it contains jobs (cgroup kind and
        # controllers); memory only, like `load`: a worker sends it on every register.
        self.containment: dict[str, dict[str, str | int | float | bool | None]] = {}
        self._usage_logged: dict[tuple[str, int], float] = {}
        # The latest figures of multi-host jobs' shares (xce/controller/shareusage.py).
        self.share_usage = ShareUsage()
        # Each worker's task service (HOST:PORT, memory only like `containment`) and the key
        # of the per-attempt launch credentials (xce/controller/launchcred.py).
        self.task_addresses: dict[str, str] = {}
        # Each worker's build as it registered (memory only, like `containment`): shown by
        # `xce host show` and the console; "" for a worker before versions were sent.
        self.releases: dict[str, str] = {}
        self._launch_key: bytes | None = None
        # Each host's relay key of its latest registration and the number of the last
        # relayed heartbeat taken under it (xce/protocol/relay_keys.py). Memory only: a
        # controller that restarts or takes over asks each worker to register again, which
        # hands out new keys.
        self.relay_keys: dict[str, tuple[bytes, int]] = {}
        # The token each host registered with (its key lives no longer than it: a revoked
        # or expired worker token also ends its relayed heartbeats). Absent: no token.
        self.relay_holders: dict[str, KeyHolder] = {}
        # Contacts heard so far (register, heartbeat), and the count at each host's latest:
        # how much the controller heard from the others since a host went quiet
        # (`check_liveness`).
        self.contacts = 0
        self._contact_mark: dict[str, int] = {}
        started = service.clock()
        # After a controller restart (or failover) every known host gets extra time to find
        # the controller again: workers back off up to RECONNECT_GRACE_S between retries, and
        # a host must not be declared lost (and its jobs requeued) just for that. A host that
        # was already unavailable keeps its jobs until the fence runs out from here too: this
        # controller cannot know how long it has been silent.
        for name in service.state.hosts:
            self.last_seen[name] = started + RECONNECT_GRACE_S
        service.fence_until = self.fence_until

    @property
    def heartbeat_interval_s(self) -> float:
        """The interval workers are told: the configured one, or longer when the cluster
        has more hosts than `max_heartbeats_per_s` allows at it (hosts / that rate), so the
        controller's heartbeat load stays bounded as the cluster grows. Never past
        `fence_timeout_s / (missed_heartbeats + 1)`: the deadline (`missed_heartbeats` of
        it) stays a full interval short of the fence, and a worker whose heartbeat fails
        tries again at its own, shorter interval (xce/worker/agent/link.py), so a failover or
        one slow answer does not leave its keepers to fence its jobs."""
        settings = self.service.settings
        configured = settings.heartbeat_interval_s
        wanted = len(self.state.hosts) / settings.max_heartbeats_per_s
        if wanted <= configured:
            return configured
        ceiling = self.fence_timeout_s / (settings.missed_heartbeats + 1)
        return max(configured, min(wanted, ceiling))

    @property
    def heartbeat_deadline_s(self) -> float:
        """Silence after which a host is marked unavailable: `missed_heartbeats` of the
        interval workers are told (hosts are never removed, so it never shrinks under a
        worker told a longer one)."""
        return self.heartbeat_interval_s * self.service.settings.missed_heartbeats

    @property
    def fence_timeout_s(self) -> float:
        return float(self.service.settings.fence_timeout_s)

    def requeue_at(self, host: str) -> float:
        """When the jobs of `host` are given up if it stays silent from now on."""
        seen = self.last_seen.get(host, self.service.clock())
        return seen + self.heartbeat_deadline_s + self.fence_timeout_s

    def fence_until(self, host: str) -> float | None:
        """Until when a job of `host` may still be running there although the host is
        unreachable (None: the host is reachable, or its fence has run out). Requeueing such
        a job by hand before then could start a second attempt next to the first."""
        record = self.state.hosts.get(host)
        if record is None or record.reachable:
            return None
        until = self.requeue_at(host)
        return until if self.service.clock() < until else None

    def liveness(self, host: str) -> dict[str, Any]:
        """The timings `xce host show` prints: last heartbeat, deadline, fence, requeue."""
        now = self.service.clock()
        heard = self.heard.get(host)
        record = self.state.hosts.get(host)
        silent = record is not None and not record.reachable
        has_jobs = bool(self.state.jobs_on(host)) if record is not None else False
        requeue_at = self.requeue_at(host)
        return {
            "last_heartbeat_at": heard,
            "last_heartbeat_age_s": round(now - heard, 3) if heard is not None else None,
            "heartbeat_deadline_s": self.heartbeat_deadline_s,
            "fence_timeout_s": self.fence_timeout_s,
            "unavailable_at": self.last_seen.get(host, now) + self.heartbeat_deadline_s,
            # Set while the host is silent past its deadline and still holds jobs.
            "jobs_requeued_at": requeue_at if silent and has_jobs else None,
            "jobs_requeued_in_s": (
                round(max(requeue_at - now, 0.0), 3) if silent and has_jobs else None
            ),
        }

    def _contact(self, host: str, now: float) -> None:
        self.last_seen[host] = now
        self.heard[host] = now
        self.contacts += 1
        self._contact_mark[host] = self.contacts

    @property
    def state(self) -> ClusterState:
        return self.service.state

    async def register(self, info: WorkerInfo, holder: KeyHolder | None = None) -> dict[str, Any]:
        """Take a worker's registration; `holder`: the token it registered with, which
        its relay key does not outlive."""
        now = self.service.clock()
        self._contact(info.host, now)
        self.containment[info.host] = dict(info.containment)
        self.releases[info.host] = info.release
        if info.task_address:
            self.task_addresses[info.host] = info.task_address
        old = self.state.hosts.get(info.host)
        if (
            old is None
            or not old.reachable
            or (old.slots, old.memory_mb, old.attributes, old.gres)
            != (info.slots, info.memory_mb, info.attributes, info.gres)
        ):
            await self.service.commit(
                [
                    ev.HostRegistered(
                        now, info.host, info.slots, info.memory_mb, info.attributes, info.gres
                    )
                ]
            )
        answer = await self.durable_assignments(info.host)
        answer["heartbeat_interval_s"] = self.heartbeat_interval_s
        key = new_relay_key()
        self.relay_keys[info.host] = (key, 0)
        if holder is None:
            self.relay_holders.pop(info.host, None)
        else:
            self.relay_holders[info.host] = holder
        answer["relay_key"] = key.hex()
        return answer

    def relayed(
        self,
        host: str,
        seq: int,
        heartbeat: str,
        mac: str,
        revoked: Callable[[str, float], bool],
    ) -> bytes:
        """Check a heartbeat a relay carried for `host`: signed with the key of the host's
        registration here, under a token still valid (not expired, not `revoked(subject,
        issued_at)`: a direct heartbeat is refused then too), numbered above the last one
        taken; returns that key (the answer's proof is made with it). Refusals name what
        failed; none changes anything."""
        held = self.relay_keys.get(host)
        if held is None:
            raise Conflict(
                f"host {host} has no relay key here (not registered with this controller "
                "since it started): its worker must register again"
            )
        key, last = held
        if not same(mac, heartbeat_mac(key, host, seq, heartbeat)):
            raise Unauthorized(
                f"the relayed heartbeat of host {host} is not signed with its registration's key"
            )
        holder = self.relay_holders.get(host)
        if holder is not None:
            if time.time() >= holder.expires_at:
                raise Unauthorized(
                    f"the token host {host} registered with has expired: its worker must "
                    "register again with a valid one"
                )
            if revoked(holder.subject, holder.issued_at):
                raise Unauthorized(
                    f"the tokens of {holder.subject}, which host {host} registered with, were "
                    "revoked: its worker must register again with a new one"
                )
        if seq <= last:
            raise Conflict(f"relayed heartbeat {seq} of host {host} was taken already")
        self.relay_keys[host] = (key, seq)
        return key

    async def heartbeat(
        self,
        host: str,
        running: list[RunReport],
        load: dict[str, float],
        shares: list[ShareReport] | None = None,
    ) -> dict[str, Any]:
        record = self.state.host(host)
        now = self.service.clock()
        self._contact(host, now)
        self.load[host] = load
        events: list[ev.Event] = []
        if not record.reachable:
            await self.service.commit([ev.HostAvailable(now, host)])
        for report in running:
            job = self.state.jobs.get(report.job_id)
            key = (report.job_id, report.attempt)
            if (
                job is not None
                and job.host == host
                and job.attempt == report.attempt
                and job.state.active
                and job.usage != _usage(report)
                and now - self._usage_logged.get(key, -1e18) >= USAGE_LOG_INTERVAL_S
            ):
                self._usage_logged[key] = now
                events.append(ev.JobUsageReported(now, job.id, job.attempt, _usage(report)))
        if len(self._usage_logged) > 4 * len(self.state.host_load) + 10_000:
            active = {
                (j, self.state.jobs[j].attempt)
                for h in self.state.host_load.values()
                for j in h.jobs
            }
            self._usage_logged = {k: v for k, v in self._usage_logged.items() if k in active}
            self.share_usage.forget(self.state)
        ended = self.share_usage.accept(self.state, host, shares or [], now)
        await self.service.commit(events, reschedule=False)
        for event in ended:  # an OOM kill in a share ends the whole job
            with contextlib.suppress(Conflict):  # it ended meanwhile
                await self.service.commit([event])
        # A controller that started (or took over) since the worker registered has not
        # heard its containment: the worker should register again (the answer is the same
        # desired set, so this costs one request).
        return {
            "version": self.service.host_versions.get(host, 0),
            "register_again": host not in self.containment,
            # How often to send the next ones (a worker before this field keeps its own).
            "heartbeat_interval_s": self.heartbeat_interval_s,
        }

    def assignments(self, host: str) -> dict[str, Any]:
        if host not in self.state.hosts:
            raise NotFound(f"host {host!r} is not registered")
        # A multi-host job runs its script on its first host; the others hold its share
        # of slots and memory in the state but start nothing yet.
        here = [self.state.jobs[j] for j in sorted(self.state.jobs_on(host))]
        jobs = [job for job in here if job.host == host]
        files = self.service.files
        return {
            "version": self.service.host_versions.get(host, 0),
            "jobs": [
                {**assignment(j, self.context(j)), "launch": self.launch_info(j)} for j in jobs
            ],
            # the other hosts' parts: a cgroup each, held for the job (xce/worker/tasks/shares.py)
            "shares": [
                {**share_assignment(j, host), "launch": self.launch_info(j)}
                for j in here
                if j.host != host
            ],
            # The worker kills its jobs once it has reached no controller for this long.
            "fence_timeout_s": self.fence_timeout_s,
            # What it may return per file and per job (it reports the rest as output
            # problems). No cap per file (max_upload_mb = 0) is sent as the job's limit, which
            # no one file can pass either: workers read both as positive numbers.
            "output_limits": {
                "file_bytes": files.max_bytes or files.job_outputs_bytes,
                "job_bytes": files.job_outputs_bytes,
            },
        }

    async def wait_assignments(self, host: str, version: int, timeout: float) -> dict[str, Any]:
        self.assignments(host)  # raises NotFound for an unknown host
        await self.service.wait_host_change(host, version, timeout)
        return await self.durable_assignments(host)

    async def durable_assignments(self, host: str) -> dict[str, Any]:
        """Assignments only once they are on disk: a dispatch lost in a crash never ran."""
        answer = self.assignments(host)  # read first: only what is in it must be durable
        await self.service.log.sync(durable=True)
        return answer

    def owns(self, host: str, job_id: str, attempt: int) -> JobRecord | None:
        """The job if `host` is running this attempt of it now, else None (a stale report)."""
        job = self.state.jobs.get(job_id)
        if job is None or job.host != host or job.attempt != attempt or not job.state.active:
            return None
        return job

    def context(self, job: JobRecord) -> dict[str, Any]:
        """The variable families the job gets and its submit-directory policy (its queue's
        settings, else the controller's), and its array's extent (SLURM_ARRAY_TASK_MIN...)."""
        settings = self.service.settings
        queue = self.state.queues.get(job.spec.queue)
        out: dict[str, Any] = {
            "job_env": list(job_families(queue, tuple(settings.job_env))),
            "missing_submit_dir": missing_policy(queue, settings.missing_submit_dir),
            "array": None,
        }
        array = self.state.arrays.get(job.number) if job.array_index is not None else None
        if array is not None and array.indices.ranges:
            ranges = array.indices.ranges
            out["array"] = {
                "count": len(array.indices),
                "min": ranges[0].start,
                "max": max(r[-1] for r in ranges),
            }
        return out

    def launch_info(self, job: JobRecord) -> dict[str, Any]:
        """What every host of an attempt needs for `xce launch`: the attempt's
        credential, the task service of each of its hosts, and the submitted cwd."""
        if self._launch_key is None:
            state_dir = getattr(self.service.settings, "state_dir", None)
            self._launch_key = launchcred.load_key(
                None if state_dir is None else launchcred.key_folder(Path(state_dir))
            )
        return {
            "credential": launchcred.credential(self._launch_key, job.id, job.attempt),
            "tasks": {p.host: self.task_addresses.get(p.host, "") for p in job.hosts},
            "cwd": job.spec.cwd or "",
        }

    def _host_lost(self, now: float, job: JobRecord, host: str = "") -> ev.Event:
        """The event for a job whose host failed: requeue or exit by its queue's policy
        (a job someone asked to kill is not started again). A lost host other than a
        multi-host job's first is named in the event, so the reason names it."""
        lost = host if host and host != job.host else ""
        if job.requeue_requested:
            return ev.JobHostLost(now, job.id, True, lost)
        queue = self.state.queues.get(job.spec.queue)
        requeue = queue is None or queue.on_host_failure is HostFailurePolicy.REQUEUE
        return ev.JobHostLost(now, job.id, requeue and not job.kill_requested, lost)

    async def finished(self, host: str, report: FinishReport) -> bool:
        """Record a finished attempt; False means the report was stale and is dropped.

        An attempt its keeper killed because the worker was cut off (`host_failure`) ends as
        a host failure would, by the queue's `on_host_failure`, not as the job's own exit."""
        self.state.host(host)
        job = self.owns(host, report.job_id, report.attempt)
        if job is None:
            return False
        now = self.service.clock()
        if report.host_failure:
            await self.service.commit([self._host_lost(now, job)], told=host)
            return True
        if job.requeue_requested:
            # The attempt a requeue asked to end has ended: now the job may run again.
            await self.service.commit([ev.JobRequeued(now, job.id)], told=host)
            return True
        await self.service.commit(
            [
                ev.JobFinished(
                    now,
                    report.job_id,
                    report.attempt,
                    report.exit_code,
                    report.exit_signal,
                    self.share_usage.total(job, _usage(report)),
                    report.reason,
                    report.outputs,
                    self.share_usage.per_host(job, _usage(report)),
                    report.output_problems,  # outputs the worker could not return
                )
            ],
            told=host,  # its poll need not wake to hear that the attempt is gone
        )
        self.share_usage.latest.pop((job.id, job.attempt), None)
        return True

    async def check_liveness(self) -> list[tuple[str, str]]:
        """Apply the fence rule once; returns (host, "unavailable" | "jobs lost") changes.

        At the heartbeat deadline a host becomes unavailable and nothing else changes: its
        worker may only be cut off and its jobs still running. Only after deadline +
        fence_timeout_s (when the worker has killed them itself) are its jobs requeued or
        ended, as their queue's `on_host_failure` says.

        The deadline is also counted in heartbeats: a host is marked unavailable only once
        the controller has heard `missed_heartbeats - 1` rounds from the hosts it still
        hears (those heard within the deadline) since it last heard this one. A controller
        too busy to read its requests (heartbeats queued in its sockets and its loop) hears
        few, slowly, and one that heard nobody marks nobody, so it does not mark hosts
        unavailable for its own slowness; a host that died while the others talk goes at
        the deadline as before, and so do many at once (a switch that cuts off most of the
        cluster): the dead stop counting among the heard. The only host of a cluster goes
        at the deadline (there is nobody else to hear). A host silent past deadline +
        fence_timeout_s goes whatever the count: its worker has fenced its jobs by then (a
        cluster whose every host went quiet at once, too).
        """
        deadline = self.heartbeat_deadline_s
        fence = self.fence_timeout_s
        now = self.service.clock()
        changed: list[tuple[str, str]] = []
        hosts = list(self.state.hosts.items())
        last_seen = self.last_seen
        # Reachable hosts, and those still heard: a silent host (the one the count is for)
        # is never among them, so this is "the others". One walk: at 10,000 hosts every
        # walk shows in the controller's profile.
        reachable = heard = 0
        for name, host in hosts:
            if host.reachable:
                reachable += 1
                if now - last_seen.get(name, now) <= deadline:
                    heard += 1
        rounds = self.service.settings.missed_heartbeats - 1
        if reachable <= 1:
            needed: float = 0  # nobody else to hear
        elif heard == 0:
            needed = math.inf  # heard nobody: the controller's silence, or everyone's
        else:
            needed = rounds * heard
        for name, host in hosts:
            seen = last_seen.get(name)
            if seen is None:
                seen = last_seen[name] = now
            silent = now - seen
            if silent <= deadline:
                continue  # heard lately: most hosts, every time
            if host.reachable:
                heard_since = self.contacts - self._contact_mark.get(name, 0)
                if heard_since >= needed or silent > deadline + fence:
                    await self.service.commit([ev.HostUnavailable(now, name)])
                    changed.append((name, "unavailable"))
                continue
            if silent <= deadline + fence:
                continue
            events: list[ev.Event] = [
                self._host_lost(now, self.state.jobs[job_id], name)
                for job_id in sorted(self.state.jobs_on(name))
            ]
            if events:
                await self.service.commit(events)
                changed.append((name, "jobs lost"))
        return changed
