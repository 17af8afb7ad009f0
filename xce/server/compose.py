"""The controller's composition root: every component of a primary, built and connected here.

Why one place: the components of a controller (service, worker gateway, job history, output
tails, event bus, auth runtime, pending OIDC logins, guard state, replication) depend on one
another, and the order in which they are hooked matters (a listener added late misses the
events before it). Built in one function, that order is written down once; the web app gets
each component under its typed `AppKey` (xce/api/http.py) and handlers read them from
`request.app`, so nothing is found through a module-level registry and nothing registers
itself at import. Tests compose a controller the same way (tests/api/conftest.py).

What connects to what:
- the service commits to `store` (the WAL of xce/store/durable.py; in memory when None) and
  stages accounting records in `accounting`, an observer of its applier (xce/core/applier.py;
  recovery and a standby's follower get the same feed in `StoreSettings.observers`, from
  xce/server/main.py); retention is its `purge_finished`;
- the job history, the output tails and the usage series listen to applied events
  (`service.listeners`), wrapped so that a fault in a read-side helper never fails a
  commit; the cluster history observes the applier (it needs each event's before and
  after) and catches its own faults;
- the event bus joins the durable-batch hooks (`service.committed`) on its first subscriber;
- the worker gateway sets the service's fence (`WorkerGateway.__init__`);
- the scheduler's plugin registry (the built-in one unless given) goes to the service, which
  plans, preempts and checks queues with it, and to the API (`PLUGINS`);
- with a node that has standbys (xce/ha/node.py): the replication source holds commits until
  replicated, job numbers come from replicated reservations, and job files and audit lines
  travel beside the records.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from xce.accounting.feed import AccountingFeed
from xce.api.app import build_app
from xce.api.http import (
    AUTH,
    BUS,
    CLUSTER_HISTORY,
    CONFIG,
    GATEWAY,
    GUARD,
    HA,
    HISTORY,
    LOGINS,
    PLUGINS,
    SERVICE,
    SETTINGS,
    TAILS,
    USAGE,
)
from xce.auth.guard import GuardState
from xce.auth.pending_logins import PendingLogins
from xce.auth.runtime import AuthRuntime
from xce.config.settings import Config
from xce.controller.bus import EventBus
from xce.controller.cluster_history import ClusterHistory
from xce.controller.history import JobHistory
from xce.controller.numbers import reserver_for
from xce.controller.service import ControllerService
from xce.controller.tails import OutputTails
from xce.controller.usage_series import UsageSeries
from xce.controller.workers import WorkerGateway
from xce.core import events as ev
from xce.core.errors import Unauthorized
from xce.core.rbac import allows
from xce.ha.node import Node
from xce.sched.plugins import PluginRegistry, builtin
from xce.store.durable import DurableLog
from xce.store.files import FileStore

log = logging.getLogger("xce.controller")


@dataclass(frozen=True)
class Controller:
    """The composed components of one primary term; `app` serves them."""

    config: Config
    service: ControllerService
    gateway: WorkerGateway
    history: JobHistory
    tails: OutputTails
    bus: EventBus
    cluster_history: ClusterHistory
    usage: UsageSeries
    auth: AuthRuntime
    logins: PendingLogins
    guard: GuardState
    plugins: PluginRegistry
    app: web.Application


def compose(
    config: Config,
    files: FileStore,
    store: DurableLog | None = None,
    node: Node | None = None,
    accounting: AccountingFeed | None = None,
    plugins: PluginRegistry | None = None,
) -> Controller:
    """Build and connect a primary's components over `store`'s recovered state (an empty
    state in memory without a store). `node` is the HA node that made this term (None: a
    controller without one, as in the API tests); with standbys, replication is wired here
    and started by the caller once the API listens (`Node.start_replication`). `plugins`
    are the scheduler plugins queues may choose: the built-in registry unless a site or a
    test passes its own; the service plans and checks queues with it, the API reads it."""
    settings = config.controller
    registry = plugins or builtin()
    service = ControllerService(
        settings,
        files,
        state=store.recovered.state if store is not None else None,
        log=store,
        registry=registry,
    )
    service.accounting = accounting
    # Job histories: rebuilt from the recovered records, then kept live from every event.
    history = JobHistory(service.state, service.clock())
    service.listeners.append(guarded(history.observe, "job history"))
    tails = OutputTails(service.state)
    service.listeners.append(guarded(tails.observe, "output tail"))
    # The cluster history: its figures at the term's start from the state; an observer of
    # the applier (it needs each event's before and after; it never raises). The caller
    # rebuilds the past from the durable records (`ClusterHistory.rebuild`).
    cluster_history = ClusterHistory(
        service.state, settings.history_step_s, lambda: service.clock()
    )
    service.applier.observers = (*service.applier.observers, cluster_history)
    usage = UsageSeries(service.state)
    service.listeners.append(guarded(usage.observe, "usage series"))
    bus = EventBus(service.state, service.committed)
    gateway = WorkerGateway(service)
    # Submission records follow the WAL's policy: no more durable than the job they record.
    relaxed = settings.wal_fsync_interval_s if settings.wal_fsync == "interval" else None
    auth = AuthRuntime(config.auth, settings.state_dir, audit_relaxed_s=relaxed)
    controller = Controller(
        config,
        service,
        gateway,
        history,
        tails,
        bus,
        cluster_history,
        usage,
        auth,
        PendingLogins(),
        GuardState.create(config.guard),
        registry,
        build_app(config),
    )
    _attach(controller)
    if store is not None:
        store.purge = service.purge_finished  # retention is the primary's JobsPurged event
    if node is not None:
        controller.app[HA] = node
        if store is not None and not node.solo:
            _replicate(controller, node, store)
    return controller


def _attach(c: Controller) -> None:
    """The components under their typed keys, where handlers and middlewares read them."""
    app = c.app
    app[CONFIG] = c.config
    app[SETTINGS] = c.config.controller
    app[SERVICE] = c.service
    app[GATEWAY] = c.gateway
    app[AUTH] = c.auth
    app[HISTORY] = c.history
    app[TAILS] = c.tails
    app[BUS] = c.bus
    app[CLUSTER_HISTORY] = c.cluster_history
    app[USAGE] = c.usage
    app[LOGINS] = c.logins
    app[GUARD] = c.guard
    app[PLUGINS] = c.plugins


def _replicate(c: Controller, node: Node, store: DurableLog) -> None:
    """A primary with standbys: commits wait for the replication source, job numbers come
    from replicated reservations, and job files, the users file and audit lines travel
    beside the records."""
    source = node.make_source(
        store, lambda token: verify_replicator(c.auth, token), c.service.state
    )
    c.service.numbers = reserver_for(c.service, store, node.lone_rank)
    c.service.file_replica = source
    c.auth.audit.on_append = source.wake_files


def verify_replicator(runtime: AuthRuntime, token: str) -> None:
    """A standby's token must be valid and grant cluster:replicate."""
    claims = runtime.tokens.verify(token)
    if not allows(runtime.permissions(claims.roles), "cluster:replicate"):
        raise Unauthorized(f"{claims.user} may not replicate (needs cluster:replicate)")


def guarded(listener: Callable[[ev.Event], None], what: str) -> Callable[[ev.Event], None]:
    """Listeners run inside `commit`: a fault in a read-side helper must not fail a commit."""

    def call(event: ev.Event) -> None:
        try:
            listener(event)
        except Exception:
            log.exception("%s listener failed on %s", what, type(event).__name__)

    return call
