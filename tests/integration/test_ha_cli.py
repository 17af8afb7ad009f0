"""`xce cluster status` and `xce admin switchover` against real controller candidates."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster import ADMIN_TOKEN, USER_TOKEN
from tests.integration.ha_cluster import HaCluster


def cli_env(ha: HaCluster, token: str | None = ADMIN_TOKEN) -> dict[str, str]:
    """The CLI pointed at every candidate (like a client.toml listing them), with a token."""
    env = {
        **os.environ,
        "XCE_CLIENT_CONFIG": str(ha.root / "client.toml"),
        "XCE_CONTROLLERS": ",".join(ha.candidate_urls),
        "XDG_CONFIG_HOME": str(ha.root / "config"),
    }
    env.pop("XCE_TOKEN", None)
    if token:
        env["XCE_TOKEN"] = token
    return env


def xce(
    ha: HaCluster, *args: str, token: str | None = ADMIN_TOKEN
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xce", *args],
        env=cli_env(ha, token),
        text=True,
        capture_output=True,
        timeout=60,
    )


def status_json(ha: HaCluster) -> dict[str, Any]:
    result = xce(ha, "cluster", "status", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def roles(view: dict[str, Any]) -> dict[str, str | None]:
    return {c["url"]: c["role"] for c in view["candidates"]}


def standby_connected(ha: HaCluster, url: str) -> bool:
    ha_view = ha.request("GET", "/api/v1/cluster")["ha"]
    return any(s["node"] == url and s["in_sync"] for s in ha_view["standbys"]) and all(
        c["reachable"] for c in ha_view["candidates"]
    )


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[HaCluster]:
    """Candidate 0 primary, candidate 1 a caught-up standby that the primary sees."""
    ha = HaCluster(tmp_path / "ha")
    try:
        ha.start_pair()
        ha.wait_for(
            lambda: standby_connected(ha, ha.candidate_urls[1]),
            20,
            "the standby connected and in sync",
        )
        yield ha
    finally:
        ha.stop()


def test_status_lists_both_candidates_and_switchover_swaps_them(pair: HaCluster) -> None:
    first, second = pair.candidate_urls
    view = status_json(pair)
    assert view["source"] == "cluster"
    assert roles(view) == {first: "primary", second: "standby"}
    assert [c["rank"] for c in view["candidates"]] == [0, 1]
    assert all(c["reachable"] for c in view["candidates"])
    assert view["primary"] == first and view["mode"] == "async" and view["degraded"] is False
    assert [s["node"] for s in view["standbys"]] == [second]
    epoch = view["epoch"]
    assert epoch >= 1

    table = xce(pair, "cluster", "status")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["URL", "RANK", "ROLE", "EPOCH", "SEQ", "LAG", "REACHABLE"]
    assert lines[1].split()[:3] == [first, "0", "primary"]
    assert lines[2].split()[:3] == [second, "1", "standby"]
    assert lines[1].split()[-1] == lines[2].split()[-1] == "yes"
    assert f"primary: {first} (epoch {epoch})" in table.stdout
    assert "replication: async, healthy" in table.stdout
    assert f"standbys: {second} lag " in table.stdout

    # A user without cluster:admin is refused in one line; nothing moves.
    refused = xce(pair, "admin", "switchover", token=USER_TOKEN)
    assert refused.returncode == 1
    assert refused.stderr.startswith("xce: error: ") and len(refused.stderr.splitlines()) == 1
    # An URL that is not a candidate is named in one line.
    bad = xce(pair, "admin", "switchover", "--to", "http://127.0.0.1:9")
    assert bad.returncode == 1 and "not one of cluster.controllers" in bad.stderr
    assert "Traceback" not in bad.stderr and pair.primary() == 0

    moved = xce(pair, "admin", "switchover", "--to", second)
    assert moved.returncode == 0, moved.stderr + pair.log_text()
    assert (
        moved.stdout.strip() == f"Primary role moved from {first} to {second} (epoch {epoch + 1})"
    )
    pair.wait_for(lambda: pair.primary() == 1, 20, "candidate 1 primary")
    pair.wait_caught_up(0)
    pair.wait_for(lambda: standby_connected(pair, first), 20, "the old primary following")

    after = status_json(pair)
    assert roles(after) == {first: "standby", second: "primary"}
    assert after["primary"] == second and after["epoch"] == epoch + 1
    assert [s["node"] for s in after["standbys"]] == [first]


def test_without_a_primary_status_shows_healthz_and_nothing_answering_is_one_line(
    tmp_path: Path,
) -> None:
    # A standby alone (with a long failover timeout) follows nobody: no primary answers.
    ha = HaCluster(tmp_path / "ha", failover_timeout=120)
    try:
        ha.start_candidate(1, role="standby")
        first, second = ha.candidate_urls
        table = xce(ha, "cluster", "status")
        assert table.returncode == 1, table.stderr
        assert table.stdout.splitlines()[1].split() == [first, "0", "-", "-", "-", "-", "no"]
        assert table.stdout.splitlines()[2].split()[:3] == [second, "1", "standby"]
        assert "primary: none answering" in table.stdout
        assert f"unreachable: {first}: " in table.stdout
        view = json.loads(xce(ha, "cluster", "status", "--json").stdout)
        assert view["source"] == "healthz" and view["primary"] is None
        assert roles(view) == {first: None, second: "standby"}

        ha.kill_candidate(1)
        gone = xce(ha, "cluster", "status")
        assert gone.returncode == 2 and gone.stdout == ""
        assert gone.stderr.startswith("xce: error: no controller answered")
        assert len(gone.stderr.splitlines()) == 1
    finally:
        ha.stop()
