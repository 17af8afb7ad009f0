"""A job's accounting group (sbatch --account, bsub -P): one of its user's groups where the
site declares groups; the accounting record is charged to it; the spec keeps the submit
directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from xce.accounting.record import charged
from xce.config.scheduler import SchedulerSettings
from xce.config.settings import ControllerSettings
from xce.controller.requests import SubmitRequest
from xce.controller.service import ControllerService
from xce.core import events as ev
from xce.core.errors import Forbidden, InvalidRequest
from xce.core.model import JobSpec, QueueRecord
from xce.store.files import FileStore


async def _service(tmp_path: Path, groups: tuple = ()) -> ControllerService:
    settings = ControllerSettings(
        state_dir=tmp_path,
        queues=(QueueRecord("normal"),),
        scheduler=SchedulerSettings(groups=groups),
    )
    service = ControllerService(settings, FileStore(tmp_path / "f", 1 << 20), clock=lambda: 1.0)
    await service.commit([ev.QueueCreated(1.0, settings.queues[0])])
    return service


async def test_an_account_must_be_one_of_the_users_groups(tmp_path: Path) -> None:
    service = await _service(tmp_path, (("physics", ("alice",)), ("chem", ("bob",))))
    job = await service.submit(
        SubmitRequest.from_fields(
            user="alice", command="x", account="physics", submit_dir="/home/alice/p"
        )
    )
    spec = service.state.jobs[job].spec
    assert (spec.account, spec.submit_dir) == ("physics", "/home/alice/p")
    with pytest.raises(Forbidden, match="'alice' is not a member"):
        await service.submit(SubmitRequest.from_fields(user="alice", command="x", account="chem"))
    # an operator may charge any group
    await service.submit(
        SubmitRequest.from_fields(user="alice", command="x", account="chem", privileged=True)
    )


async def test_without_declared_groups_an_account_is_a_label(tmp_path: Path) -> None:
    service = await _service(tmp_path)
    job = await service.submit(SubmitRequest.from_fields(user="a", command="x", account="p1"))
    assert service.state.jobs[job].spec.account == "p1"


async def test_the_users_own_groups_are_their_accounts(tmp_path: Path) -> None:
    service = await _service(tmp_path, (("fairshare-a", ("carol",)),))
    mine = SubmitRequest.from_fields
    job = await service.submit(mine(user="alice", command="x", groups=("physics", "hpc")))
    assert service.state.jobs[job].spec.account == "physics"  # the first: the default
    job = await service.submit(
        mine(user="alice", command="x", groups=("physics", "hpc"), account="hpc")
    )
    assert service.state.jobs[job].spec.account == "hpc"
    with pytest.raises(Forbidden, match=r"theirs: physics, hpc"):
        await service.submit(
            mine(user="alice", command="x", groups=("physics", "hpc"), account="chem")
        )
    # [scheduler] groups is the override: it names carol's default account
    job = await service.submit(mine(user="carol", command="x", groups=("staff",)))
    assert service.state.jobs[job].spec.account == "fairshare-a"


async def test_a_relative_submit_dir_is_refused(tmp_path: Path) -> None:
    service = await _service(tmp_path)
    with pytest.raises(InvalidRequest, match="submit_dir must be an absolute path"):
        await service.submit(SubmitRequest.from_fields(user="a", command="x", submit_dir="p"))


def test_the_record_is_charged_to_the_account() -> None:
    assert charged(JobSpec("alice", "q", account="physics"), lambda u: "default") == "physics"
    assert charged(JobSpec("alice", "q"), lambda u: "default") == "default"
