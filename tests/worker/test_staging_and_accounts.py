"""Worker-side safety: outputs never leave the job directory; root jobs need permission."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.worker.assignments import assignment
from xce.worker.attempt import accounts, jobenv, readers
from xce.worker.attempt.running import LaunchError, RunningJob
from xce.worker.attempt.staging import collect_outputs


def _job(tmp_path: Path, outputs: list[str]) -> RunningJob:
    job_dir = tmp_path / "job"
    (job_dir / ".xce").mkdir(parents=True)
    (job_dir / ".xce" / "stdout").write_text("out")
    (job_dir / ".xce" / "stderr").write_text("")
    job = RunningJob(assignment(job_id="1", attempt=0, outputs=outputs), job_dir, job_dir)
    job.readers = readers.open_readers(str(job_dir))
    return job


async def test_outputs_skip_symlinks_and_escapes(tmp_path: Path) -> None:
    job = _job(tmp_path, ["*.txt", "res/*", ".xce/*"])
    secret = tmp_path / "secret.txt"
    secret.write_text("do not upload")
    (job.job_dir / "ok.txt").write_text("fine")
    (job.job_dir / "link.txt").symlink_to(secret)
    (job.job_dir / "res").mkdir()
    (job.job_dir / "res" / "a.dat").write_text("a")
    (job.job_dir / "res" / "up").symlink_to(tmp_path)
    found = await collect_outputs(job)
    try:
        assert [name for name, _ in found] == ["stdout", "stderr", "ok.txt", "res/a.dat"]
    finally:
        for _, fd in found:
            os.close(fd)
        readers.close_readers(job)


@pytest.mark.skipif(os.geteuid() != 0, reason="account switching only happens as root")
def test_root_jobs_are_refused_unless_allowed() -> None:
    with pytest.raises(LaunchError, match="allow_root_jobs"):
        accounts.account_for("root", allow_root=False)
    assert accounts.account_for("root", allow_root=True).pw_uid == 0
    with pytest.raises(LaunchError, match="does not exist"):
        accounts.account_for("no-such-user-xce", allow_root=True)


def test_job_environment_carries_array_ids(tmp_path: Path) -> None:
    a = assignment(
        job_id="7[3]",
        attempt=1,
        number=7,
        array_index=3,
        name="n",
        queue="normal",
        slots=2,
        env={"FOO": "bar"},
    )
    env = jobenv.job_environment(a, None, tmp_path, "h1")
    assert env["XCE_JOB_ID"] == "7[3]"
    assert env["XCE_ARRAY_ID"] == "7" and env["XCE_ARRAY_INDEX"] == "3"
    assert env["FOO"] == "bar" and env["XCE_EXEC_HOST"] == "h1"
    assert "LD_PRELOAD" not in env
