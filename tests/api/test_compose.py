"""The controller's composition: every component under its key, hooked where it must be,
each composed controller with components of its own, and a read-side fault never fails a
commit."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.api.conftest import Api, make_settings
from tests.sched.test_plugins import LastHostFirst
from tests.unit.helpers import new_state, submit
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
from xce.config.settings import Config
from xce.controller.history import PRUNE_EVERY
from xce.controller.service import ControllerService
from xce.core.errors import InvalidRequest
from xce.core.model import QueueRecord
from xce.sched import plugins
from xce.server.compose import Controller, compose
from xce.store.files import FileStore


def _compose(tmp_path: Path, name: str) -> Controller:
    settings = make_settings(tmp_path / name)
    return compose(Config(controller=settings), FileStore(tmp_path / name / "files", 1 << 20))


def test_the_app_holds_each_component_under_its_key(tmp_path: Path) -> None:
    c = _compose(tmp_path, "a")
    app = c.app
    assert app[SERVICE] is c.service and app[GATEWAY] is c.gateway
    assert app[HISTORY] is c.history and app[TAILS] is c.tails
    assert app[CLUSTER_HISTORY] is c.cluster_history and app[USAGE] is c.usage
    assert app[BUS] is c.bus and app[AUTH] is c.auth
    assert app[LOGINS] is c.logins and app[GUARD] is c.guard
    assert app[CONFIG] is c.config and app[SETTINGS] is c.config.controller
    assert HA not in app  # no node: no HA middleware work, no replication
    assert c.service.numbers is None and c.service.file_replica is None
    # The worker gateway set the service's fence; history, tails and usage series listen to
    # every event; the cluster history observes the applier.
    assert c.service.fence_until == c.gateway.fence_until
    bare = ControllerService(c.config.controller, FileStore(tmp_path / "bare", 1 << 20))
    assert len(c.service.listeners) == len(bare.listeners) + 3
    assert c.cluster_history in c.service.applier.observers
    # the bus waits for a subscriber; job files go after the durable purges and kills
    assert c.service.committed == [c.service.job_files.committed]
    c.bus.subscribe(None, lambda change: True)
    assert c.service.committed == [c.service.job_files.committed, c.bus.publish]
    # No registry given: the built-in plugins, for the service and the API alike.
    assert app[PLUGINS] is c.plugins is c.service.registry is plugins.builtin()


def test_two_controllers_share_no_component(tmp_path: Path) -> None:
    one, two = _compose(tmp_path, "one"), _compose(tmp_path, "two")
    for field in (
        "service",
        "history",
        "tails",
        "bus",
        "cluster_history",
        "usage",
        "auth",
        "logins",
        "guard",
        "app",
    ):
        assert getattr(one, field) is not getattr(two, field), field


async def test_a_failing_history_listener_never_fails_a_commit(
    api: Api, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = api.app[HISTORY]

    def broken() -> None:
        raise RuntimeError("broken")

    monkeypatch.setattr(history, "prune", broken)
    history._observed = PRUNE_EVERY - 1  # the next event prunes, and pruning fails
    with caplog.at_level(logging.ERROR, "xce.controller"):
        job = await api.submit(user="alice")
    assert job in api.service.state.jobs
    assert "job history listener failed on JobSubmitted" in caplog.text
    assert (await api.show(job))["state"] == "PEND"  # the request was answered as usual


def _with_last_host_first() -> plugins.PluginRegistry:
    return plugins.PluginRegistry([*plugins.builtin_plugins(), LastHostFirst])


def test_the_composed_registry_reaches_the_service_and_the_api(tmp_path: Path) -> None:
    registry = _with_last_host_first()
    settings = make_settings(tmp_path)
    c = compose(
        Config(controller=settings), FileStore(tmp_path / "files", 1 << 20), plugins=registry
    )
    assert c.app[PLUGINS] is registry is c.service.registry


async def test_the_service_plans_and_checks_queues_with_its_registry(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    files = FileStore(tmp_path / "files", 1 << 20)
    chosen = QueueRecord("last", plugins=("test-last-host-first",))
    state = new_state(queues=(chosen,), hosts={"a": (2, 100), "b": (2, 100)})
    job = submit(state, "last")
    service = ControllerService(settings, files, state=state, registry=_with_last_host_first())
    assert await service.schedule_once() == 1
    assert state.jobs[job].host == "b"  # the registry's score plugin chose the host
    await service.create_queue(QueueRecord("other", plugins=("test-last-host-first",)))
    builtin_only = ControllerService(settings, files, state=new_state())
    with pytest.raises(InvalidRequest, match="unknown scheduler plugin 'test-last-host-first'"):
        await builtin_only.create_queue(QueueRecord("other", plugins=("test-last-host-first",)))
