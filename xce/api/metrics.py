"""`GET /metrics`: Prometheus text format, and the middleware that times every request.

Observed metrics (WAL fsyncs, checkpoints, scheduling passes, submissions) come from
`xce.telemetry.metrics`; the state gauges (jobs by state and queue, hosts by status) are read at
scrape time from `ClusterState`'s indexes (`counts`, the pending arrays), which costs O(queues x
states + hosts + pending arrays), never O(jobs).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from xce.api.http import CLUSTER_HISTORY, GATEWAY, SERVICE
from xce.api.routes import Route
from xce.controller.cluster_history import ClusterHistory, host_gpus
from xce.controller.workers import WorkerGateway
from xce.core.model import HostStatus, JobState
from xce.telemetry import metrics

MIB = 1024 * 1024


def observe(request: web.Request, status: int, started: float) -> None:
    """Time a request (started at `perf_counter()` `started`) by its route template, never
        the raw path: ids would explode the label set. Called by the application's outermost
        middleware (xce/api/app.py `front`), so it sees the final status of errors too. The
    histogram takes no lock: this runs on the event loop's thread, as the scrape does."""
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else "unmatched"
    metrics.API_LATENCY.labels(request.method, route, str(status)).observe(
        time.perf_counter() - started
    )


class StateCollector(Collector):
    """Gauges computed from the controller state at scrape time."""

    def __init__(
        self,
        service: Any,
        history: ClusterHistory | None = None,
        gateway: WorkerGateway | None = None,
    ) -> None:
        self.service = service
        self.history = history
        self.gateway = gateway

    def collect(self) -> Iterator[Metric]:
        state = self.service.state
        jobs = GaugeMetricFamily(
            "xce_jobs", "Jobs by state and queue (array tasks included)", labels=("state", "queue")
        )
        counts: dict[tuple[str, str], int] = {}
        for (job_state, queue), n in state.counts.items():
            counts[(job_state.value, queue)] = counts.get((job_state.value, queue), 0) + n
        for number in state.pending_arrays:
            array = state.arrays[number]
            key = (JobState.PEND.value, array.spec.queue)
            counts[key] = counts.get(key, 0) + len(array.pending)
        for queue in state.queues:
            for job_state in JobState:
                counts.setdefault((job_state.value, queue), 0)
        for (job_state, queue), n in sorted(counts.items()):
            jobs.add_metric((job_state, queue), n)
        yield jobs
        hosts = GaugeMetricFamily("xce_hosts", "Hosts by status", labels=("status",))
        by_status = dict.fromkeys((s.value for s in HostStatus), 0)
        for host in state.hosts.values():
            by_status[host.status.value] += 1
        for status, n in by_status.items():
            hosts.add_metric((status,), n)
        yield hosts
        queues = GaugeMetricFamily(
            "xce_queues", "Queues by open/active switch", labels=("open", "active")
        )
        switches: dict[tuple[str, str], int] = {}
        for q in state.queues.values():
            key = (str(q.open).lower(), str(q.active).lower())
            switches[key] = switches.get(key, 0) + 1
        for key, n in sorted(switches.items()):
            queues.add_metric(key, n)
        yield queues
        yield GaugeMetricFamily(
            "xce_events_applied", "Events applied since start", value=state.applied
        )
        if self.history is not None:
            yield from history_metrics(self.history)
        yield from host_metrics(state)
        if self.gateway is not None:
            yield heartbeat_ages(self.gateway)


def heartbeat_ages(gateway: WorkerGateway) -> Metric:
    """Per host, the seconds since this controller last heard it (the `last heartbeat`
    of `xce host show`): a worker that is slow to report shows here before it crosses the
    deadline that marks it unavailable. Hosts not heard since this controller started
    are left out rather than reported as of an age it cannot know. O(hosts) per scrape."""
    ages = GaugeMetricFamily(
        "xce_host_heartbeat_age_seconds",
        "Seconds since this controller last heard from a host (heartbeat or report)",
        labels=("host",),
    )
    now, known = gateway.service.clock(), gateway.service.state.hosts
    for host, heard in sorted(gateway.heard.items()):
        if host in known:  # not a host removed since
            ages.add_metric((host,), max(0.0, now - heard))
    return ages


def history_metrics(history: ClusterHistory) -> Iterator[Metric]:
    """The cluster history's figures now (O(queues)): what the console's charts and the
    Grafana dashboard (packaging/grafana/) draw."""
    now = history.current()
    whole = now[""]
    for name, key, text in (
        ("xce_slots_busy", "slots_busy", "Slots held by running (and suspended) jobs"),
        ("xce_slots_total", "slots_total", "Slots of the reachable hosts"),
        ("xce_gpus_busy", "gpus_busy", "GPUs held by running (and suspended) jobs"),
        ("xce_gpus_total", "gpus_total", "GPUs of the reachable hosts"),
    ):
        family = GaugeMetricFamily(name, text, labels=("queue",))
        family.add_metric(("",), whole[key])
        for queue, figures in sorted(now.items()):
            if queue:
                family.add_metric((queue,), figures[key])
        yield family
    yield CounterMetricFamily(
        "xce_jobs_submitted",
        "Jobs and array tasks submitted since this controller became primary",
        value=history.submitted_total,
    )
    yield CounterMetricFamily(
        "xce_jobs_finished",
        "Jobs and array tasks ended DONE or EXIT since this controller became primary",
        value=history.finished_total,
    )


def host_metrics(state: Any) -> Iterator[Metric]:
    """Per host: slots, memory and GPUs in use and offered (the console's host bars);
    O(hosts) per scrape, one label set per host and resource."""
    used = GaugeMetricFamily(
        "xce_host_used", "Resources held on a host by its jobs", labels=("host", "resource")
    )
    capacity = GaugeMetricFamily(
        "xce_host_capacity", "Resources a host offers", labels=("host", "resource")
    )
    loads = state.host_load
    for name, host in state.hosts.items():
        load = loads.get(name)
        gpus_held = sum(1 for d in load.devices if d.startswith("gpu:")) if load else 0
        used.add_metric((name, "slots"), load.slots if load else 0)
        used.add_metric((name, "memory_bytes"), (load.memory_mb if load else 0) * MIB)
        used.add_metric((name, "gpus"), gpus_held)
        capacity.add_metric((name, "slots"), host.slots)
        capacity.add_metric((name, "memory_bytes"), host.memory_mb * MIB)
        capacity.add_metric((name, "gpus"), host_gpus(host))
    yield used
    yield capacity


async def scrape(request: web.Request) -> web.Response:
    per_scrape = CollectorRegistry(auto_describe=False)
    per_scrape.register(
        StateCollector(
            request.app[SERVICE], request.app.get(CLUSTER_HISTORY), request.app.get(GATEWAY)
        )
    )
    body = generate_latest(metrics.REGISTRY) + generate_latest(per_scrape)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


ROUTES = [
    Route(
        "GET",
        "/metrics",
        scrape,
        "Prometheus metrics (text format)",
        "cluster:view",
        "cluster",
        text_response="text/plain",
    ),
]
