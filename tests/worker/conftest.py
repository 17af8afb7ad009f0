"""Fixtures of the worker's tests: a job root every user can traverse, a local host with the
worker's real execution pieces (tests/worker/local_host.py), a real unprivileged user."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.worker.linux_users import LinuxUser, LinuxUsers, linux_users  # noqa: F401
from tests.worker.local_host import LocalHost, searchable_dir


@pytest.fixture
def root() -> Iterator[Path]:
    path = searchable_dir("xce-jobs-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def host(root: Path) -> AsyncIterator[LocalHost]:
    made = LocalHost(root, pids_limit=64)
    yield made
    made.close()


@pytest.fixture
def user(linux_users: LinuxUsers) -> LinuxUser:
    return linux_users.user()
