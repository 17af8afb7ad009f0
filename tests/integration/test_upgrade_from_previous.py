"""A rolling upgrade from the previous release, with both builds as real processes.

The previous release is taken from this repository's history (the parent of the commit
that set the current `__version__`), unpacked beside the test and run with PYTHONPATH
pointing at it; both builds share the installed dependencies. Its candidate writes jobs,
a standby of this build follows it, the primary role moves to the new build with a
switchover, and every acknowledged job is there. The old primary, now behind a primary
whose formats it does not know, must be stopped at once (docs/upgrades.md): it cannot
refuse itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path

import pytest

from tests.integration.ha_cluster import HaCluster
from tests.integration.test_ha_cli import xce
from xce import __version__

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def previous_release(into: Path) -> Path:
    """The tree of the previous release, unpacked under `into`; skips without git."""
    try:
        found = subprocess.run(
            [
                *("git", "-C", str(ROOT), "log", "--format=%H", "-1"),
                *(f'-S__version__ = "{__version__}"', "--", "xce/__init__.py"),
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        tree = subprocess.run(
            ["git", "-C", str(ROOT), "archive", f"{found}^", "xce"],
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("the previous release needs this repository's git history")
    if not found:
        pytest.skip("no commit set the current version")
    into.mkdir(parents=True)
    with tarfile.open(fileobj=BytesIO(tree)) as archive:
        archive.extractall(into, filter="data")
    return into


class MixedCluster(HaCluster):
    """Candidates of two builds: `old` names those run from the previous release."""

    def __init__(self, root: Path, old_tree: Path) -> None:
        super().__init__(root, failover_timeout=2.0)
        self.old_tree = old_tree
        self.old: set[str] = set()

    def _spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        if name not in self.old:
            return super()._spawn(name, *args)
        log = self.root / f"{name}.log"
        self.logs.append(log)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(self.old_tree)}
        return subprocess.Popen(
            [sys.executable, "-m", "xce", *args],
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self.old_tree,
        )


def test_a_rolling_upgrade_from_the_previous_release_loses_nothing(tmp_path: Path) -> None:
    old_tree = previous_release(tmp_path / "previous")
    old_version = subprocess.run(
        [sys.executable, "-m", "xce", "--version"],
        env={**os.environ, "PYTHONPATH": str(old_tree)},
        cwd=old_tree,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[-1]
    assert old_version != __version__

    c = MixedCluster(tmp_path / "ha", old_tree)
    c.old.update({"controller0", "controller1"})
    try:
        c.start_pair()  # both of the previous release
        c.old.add("w1")
        c.start_worker("w1")
        running = c.submit(command="sleep 300", name="kept")
        first = c.wait_state(running, "RUN")
        jobs = [c.submit(command="true", hold=True) for _ in range(20)]
        eligible = {j: c.job(j)["eligible_time"] for j in jobs}

        c.kill_candidate(1)  # step 2: the standby first, to this build
        c.old.discard("controller1")
        c.start_candidate(1, "standby")
        c.wait_caught_up(1)

        moved = xce(c, "admin", "switchover", "--to", c.candidate_urls[1])
        assert moved.returncode == 0, moved.stderr + c.log_text()
        c.wait_for(lambda: c.primary() == 1, 30, "the new build primary")
        c.kill_candidate(0)  # step 4 for a release that cannot refuse itself

        view = c.request("GET", "/api/v1/cluster", retry_for=10)
        assert view["version"] == __version__
        jobs += [c.submit(command="true", hold=True) for _ in range(5)]
        for j in jobs:
            job = c.request("GET", f"/api/v1/jobs/{j}", retry_for=10)
            assert job["state"] == "PSUSP"
            if j in eligible:
                assert job["eligible_time"] == eligible[j]

        # step 5: the worker, its running job kept by its keeper across the agent's restart
        c.kill_worker("w1")
        c.old.discard("w1")
        c.start_worker("w1")
        c.wait_for(
            lambda: c.request("GET", "/api/v1/hosts/w1")["worker_version"] == __version__,
            30,
            "the upgraded worker registered",
        )
        job = c.request("GET", f"/api/v1/jobs/{running}", retry_for=10)
        assert job["state"] == "RUN"  # the same attempt, never restarted
        assert (job["attempt"], job["start_time"]) == (first["attempt"], first["start_time"])

        c.old.discard("controller0")  # the old primary, upgraded, on its own state directory
        c.start_candidate(0, "standby")
        c.wait_caught_up(0)
        health = c.health(0)
        assert health is not None and health["release"] == __version__
        assert not health["incompatible"]
    finally:
        c.stop()
