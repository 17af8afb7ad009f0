"""High availability with real processes on 127.0.0.1: election, failover, fencing, catch-up.

Two controller candidates (candidate 0 started with `xce controller`, candidate 1 with
`xce standby`) and a worker; the primary is killed with SIGKILL or frozen with SIGSTOP.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.integration.cluster import ADMIN_TOKEN, ApiFailure
from tests.integration.ha_cluster import HaCluster, PrimaryWatch, logged

TAKEOVER_BOUND_S = 15.0  # generous on a shared 2-core machine; bench figure 12 measures it


def make(tmp_path: Path, replication: str = "async", preload: int = 0) -> HaCluster:
    c = HaCluster(tmp_path / "ha", candidates=2, failover_timeout=2.0, replication=replication)
    if preload:
        c.preload(preload)
    c.start_pair()
    c.start_worker("w1", slots=4)
    return c


@pytest.fixture
def ha(tmp_path: Path) -> Iterator[HaCluster]:
    c = make(tmp_path, "sync")
    try:
        yield c
    finally:
        c.stop()


class Burst:
    """Submitting threads that record every acknowledged job (id -> name) until stopped.
    Each job's name is unique and its command names it too: both are compared later."""

    def __init__(self, c: HaCluster, threads: int = 4) -> None:
        self.c = c
        self.acked: dict[str, str] = {}
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.pool = ThreadPoolExecutor(threads)
        self.futures = [self.pool.submit(self._run, t) for t in range(threads)]

    def _run(self, t: int) -> None:
        i = 0
        while not self.stop.is_set():
            name = f"b{t}-{i}"
            i += 1
            try:
                job = self.c.request(
                    "POST",
                    "/api/v1/jobs",
                    {"command": f"echo {name}", "user": "root", "name": name, "hold": True},
                    retry_for=30,
                )["job_id"]
            except (ApiFailure, OSError) as exc:
                self.errors.append(f"{name}: {exc}")
                continue
            self.acked[job] = name

    def progress(self, count: int = 20, timeout: float = 30) -> None:
        """Wait until `count` more submissions are acknowledged: the burst is under way
        (against whichever controller is primary now) rather than "a second has passed"."""
        before = len(self.acked)
        self.c.wait_for(
            lambda: len(self.acked) >= before + count,
            timeout,
            f"{count} more acknowledged submissions (errors: {self.errors[-3:]})",
        )

    def finish(self) -> dict[str, str]:
        self.stop.set()
        for f in self.futures:
            f.result(60)
        self.pool.shutdown()
        return self.acked


def listed(c: HaCluster) -> list[dict[str, object]]:
    """Every job, page by page (a listing returns at most 100,000)."""
    jobs: list[dict[str, object]] = []
    while True:
        page = c.get(f"/api/v1/jobs?limit=100000&offset={len(jobs)}")
        jobs += page["jobs"]
        if not page["jobs"] or len(jobs) >= page["total"]:
            return jobs


def all_jobs(c: HaCluster) -> dict[str, str]:
    return {str(j["id"]): str(j["name"]) for j in listed(c)}


def job_contents(c: HaCluster) -> dict[str, tuple[object, ...]]:
    """id -> (name, user, queue, submit time, state) of every job: content, not only ids."""
    return {
        str(j["id"]): (j["name"], j["user"], j["queue"], j["submit_time"], j["state"])
        for j in listed(c)
    }


def check_no_loss(c: HaCluster, acked: dict[str, str]) -> None:
    present = all_jobs(c)
    lost = {job: name for job, name in acked.items() if present.get(job) != name}
    assert not lost, f"{len(lost)} acknowledged jobs lost or changed: {list(lost.items())[:5]}"


def submit_after_takeover(c: HaCluster, **body: object) -> str:
    """A submission right after a lone takeover: the new primary writes once a worker has
    reached it (xce/ha/lease.py), so retry like the CLI does."""
    body.setdefault("user", "root")
    return str(c.request("POST", "/api/v1/jobs", body, retry_for=20)["job_id"])


def direct(c: HaCluster, i: int, method: str, path: str, body: object = None) -> int:
    """Send to candidate i only (no rotation); the HTTP status, or 0 if it did not answer."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        c.candidate_urls[i] + path,
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=3) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def test_kill_9_of_the_primary_during_a_burst_keeps_every_acknowledged_job(ha: HaCluster) -> None:
    """Sync mode: takeover, no acknowledged job lost, the running job keeps running once."""
    running = ha.submit(command="sleep 6; echo finished-once", name="long")
    ha.wait_state(running, "RUN")
    burst = Burst(ha)
    burst.progress()
    killed_at = time.monotonic()
    ha.kill_candidate(0)
    new = ha.wait_primary(TAKEOVER_BOUND_S, other_than=0)
    takeover = time.monotonic() - killed_at
    assert new == 1 and takeover < TAKEOVER_BOUND_S
    burst.progress()  # submissions carry on against the new primary
    acked = burst.finish()
    assert len(acked) > 10, burst.errors[:3]
    check_no_loss(ha, acked)
    assert ha.health(1)["epoch"] == 2
    # The worker kept its job through the failover and re-reported it to the new primary.
    job = ha.wait_state(running, "DONE", timeout=30)
    assert job["attempt"] == 0 and job["host"] == "w1"
    assert ha.download(running, "stdout") == b"finished-once\n"
    # Jobs still get scheduled by the new primary.
    after = submit_after_takeover(ha, command="echo after")
    ha.wait_state(after, "DONE")


def test_sync_mode_loses_nothing_over_repeated_failovers(ha: HaCluster) -> None:
    rounds(ha, 4)


@pytest.mark.slow
def test_sync_mode_loses_nothing_over_twenty_failovers(ha: HaCluster) -> None:
    rounds(ha, 20)


def rounds(ha: HaCluster, count: int) -> None:
    burst = Burst(ha, threads=3)
    times = []
    for _ in range(count):
        primary = ha.wait_primary()
        burst.progress(10)
        started = time.monotonic()
        ha.kill_candidate(primary)
        ha.wait_primary(TAKEOVER_BOUND_S, other_than=primary)
        times.append(time.monotonic() - started)
        ha.start_candidate(primary, "controller")  # the old primary comes back as standby
        ha.wait_caught_up(primary, 60)
    acked = burst.finish()
    check_no_loss(ha, acked)
    epochs = {ha.health(i)["epoch"] for i in range(2)}
    assert epochs == {1 + count}
    print(f"takeover times: {sorted(round(t, 2) for t in times)}")


def test_the_old_primary_comes_back_as_a_standby_and_refuses_writes(ha: HaCluster) -> None:
    ha.kill_candidate(0)
    assert ha.wait_primary(TAKEOVER_BOUND_S, other_than=0) == 1
    job = submit_after_takeover(ha, command="echo new term", name="after-failover")
    ha.start_candidate(0, "controller")
    ha.wait_caught_up(0)
    health = ha.health(0)
    assert health["role"] == "standby" and health["epoch"] == ha.health(1)["epoch"] == 2
    assert health["primary"] == ha.candidate_urls[1]
    assert direct(ha, 0, "POST", "/api/v1/jobs", {"command": "true", "user": "root"}) == 503
    assert direct(ha, 0, "GET", "/api/v1/jobs") == 503  # and reads go to the primary too
    assert ha.job(job)["name"] == "after-failover"


def test_a_frozen_primary_does_not_write_after_a_takeover(ha: HaCluster) -> None:
    """SIGSTOP cuts the primary off as a partition would; on SIGCONT it must not write."""
    ha.candidates[0].send_signal(signal.SIGSTOP)
    try:
        assert ha.wait_primary(TAKEOVER_BOUND_S, other_than=0) == 1
        submit_after_takeover(ha, command="echo during the freeze", name="frozen")
    finally:
        ha.candidates[0].send_signal(signal.SIGCONT)
    statuses = [
        direct(ha, 0, "POST", "/api/v1/jobs", {"command": "true", "user": "root", "name": "stale"})
        for _ in range(5)
    ]
    assert 200 not in statuses and 201 not in statuses, statuses
    ha.wait_for(lambda: (ha.health(0) or {}).get("role") == "standby", 20, "0 stepped down")
    ha.wait_caught_up(0)
    assert ha.primaries() == [1]
    names = set(all_jobs(ha).values())
    assert "frozen" in names and "stale" not in names
    assert ha.health(0)["seq"] == ha.health(1)["seq"]


def test_a_switchover_moves_the_role_with_no_loss(ha: HaCluster) -> None:
    burst = Burst(ha, threads=3)
    burst.progress()
    answer = ha.post("/api/v1/cluster/switchover", {"to": ha.candidate_urls[1]})
    assert answer["primary"] == ha.candidate_urls[1]
    ha.wait_for(lambda: ha.primaries() == [1], 20, "candidate 1 primary")
    burst.progress()
    acked = burst.finish()
    check_no_loss(ha, acked)
    ha.wait_caught_up(0)
    roles = {ha.candidate_urls[0]: "standby", ha.candidate_urls[1]: "primary"}

    def view() -> dict:
        return ha.get("/api/v1/cluster")["ha"]

    # The view shows the primary's last probe of the others (every heartbeat, 1 s timeout):
    # on a loaded machine one may time out, so wait for a probe that answered.
    ha.wait_for(
        lambda: {c["url"]: c["role"] for c in view()["candidates"]} == roles,
        20,
        "the primary's view naming both roles",
    )
    cluster = view()
    assert cluster["role"] == "primary" and cluster["epoch"] == 2  # one term: no re-election
    assert cluster["standbys"][0]["lag_records"] == 0
    metrics = ha.get("/metrics").decode()
    assert "xce_epoch 2.0" in metrics
    assert f'xce_replication_lag_records{{standby="{ha.candidate_urls[0]}"}}' in metrics


def catch_up(tmp_path: Path, jobs: int) -> None:
    c = HaCluster(tmp_path / "ha", candidates=2, failover_timeout=2.0)
    try:
        c.start_candidate(0)
        c.wait_primary()
        c.start_worker("w1")
        c.wait_writable()
        spec = {"command": "true", "user": "root", "hold": True}
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda _: c.post("/api/v1/jobs", spec), range(jobs)))
        started = time.monotonic()
        c.start_candidate(1, "standby")  # empty state directory, no keys
        c.wait_caught_up(1, 300)
        print(f"an empty standby caught up on {jobs} jobs in {time.monotonic() - started:.1f} s")
        c.kill_candidate(0)
        assert c.wait_primary(TAKEOVER_BOUND_S, other_than=0) == 1
        # The keys came over the replication link: the same tokens work on the new primary.
        listed = c.get("/api/v1/jobs?limit=100000")["jobs"]
        assert len(listed) == jobs
    finally:
        c.stop()


def test_an_empty_standby_catches_up_and_takes_over(tmp_path: Path) -> None:
    catch_up(tmp_path, 1500)


@pytest.mark.slow
def test_an_empty_standby_catches_up_on_100k_jobs(tmp_path: Path) -> None:
    catch_up(tmp_path, 100_000)


def test_three_candidates_elect_one_primary_and_need_a_majority(tmp_path: Path) -> None:
    c = HaCluster(tmp_path / "ha3", candidates=3, failover_timeout=2.0)
    try:
        # With three candidates even the first primary needs a majority: start them all.
        c.start_candidate(0)
        c.start_candidate(1, "standby")
        c.start_candidate(2, "standby")
        assert c.wait_primary(TAKEOVER_BOUND_S) == 0  # the best rank, all logs empty
        c.wait_caught_up(1)
        c.wait_caught_up(2)
        c.start_worker("w1")
        job = c.submit(command="true", hold=True, name="three")
        c.wait_caught_up(1)  # async replication: only what reached a standby survives
        c.wait_caught_up(2)
        c.kill_candidate(0)
        new = c.wait_primary(TAKEOVER_BOUND_S, other_than=0)
        other = 3 - new
        assert c.primaries() == [new] and new == 1  # equal logs: the better rank wins
        c.wait_for(
            lambda: (c.health(other) or {}).get("primary") == c.candidate_urls[new],
            20,
            "the other standby following the new primary",
        )
        c.submit(command="true", hold=True)
        c.wait_caught_up(other)
        assert c.job(job)["name"] == "three"
        # Alone, a primary of three cannot hold a majority: it stops taking writes even
        # though a worker still reaches it (with three candidates only majorities count).
        c.kill_candidate(other)
        c.wait_for(
            lambda: (
                direct(c, new, "POST", "/api/v1/jobs", {"command": "true", "user": "root"}) == 503
            ),
            15,
            "writes refused without a majority",
        )
        c.start_candidate(other, "standby")
        c.wait_for(
            lambda: (
                direct(
                    c,
                    new,
                    "POST",
                    "/api/v1/jobs",
                    {"command": "true", "user": "root", "hold": True},
                )
                == 201
            ),
            30,
            "writes again with a majority",
        )
    finally:
        c.stop()


def test_retention_purges_on_the_primary_and_the_standby_follows_through_failover(
    tmp_path: Path,
) -> None:
    """Retention on (1 s, a checkpoint a second): finished jobs leave the primary by its
    JobsPurged record, a requeue racing the purge is either applied or refused, the
    standby follows every record, and after a failover the new primary holds exactly what
    the old one held."""
    c = HaCluster(tmp_path / "ha", candidates=2, failover_timeout=2.0, replication="sync")
    c.extra_controller = "finished_retention_s = 1.0\ncheckpoint_interval_s = 1.0\n"
    try:
        c.start_pair()
        c.start_worker("w1", slots=4)
        kept = c.submit(command="true", name="kept", hold=True)  # never finishes
        first = c.submit(command="true", name="first")
        c.wait_state(first, "DONE")

        def gone(job: str) -> bool:  # purged: only its accounting record answers (archived)
            try:
                return c.job(job).get("archived") is True
            except ApiFailure as exc:
                return exc.status == 404

        c.wait_for(lambda: gone(first), 20, "the finished job purged")
        outcomes = []
        for i in range(3):  # requeues racing the purge of a job that just finished
            job = c.submit(command="true", name=f"race{i}")
            c.wait_state(job, "DONE")
            time.sleep(0.3 * i + 0.7)
            try:
                c.control(job, "requeue")
                outcomes.append("requeued")
            except ApiFailure as exc:
                assert exc.status == 404, exc.body
                outcomes.append("purged first")
        # every finished job goes, whichever way each race went; the held one stays
        c.wait_for(lambda: set(all_jobs(c)) == {kept}, 30, f"all but {kept} purged")
        c.wait_caught_up(1)
        c.kill_candidate(0)
        assert c.wait_primary(TAKEOVER_BOUND_S + 5, other_than=0) == 1
        assert set(all_jobs(c)) == {kept}, outcomes
        last = submit_after_takeover(c, command="true", name="after")
        c.wait_state(last, "DONE")
    finally:
        c.stop()


# Restart delays of the killed primary, against failover_timeout_s = 2: before, around and
# after the standby's takeover (systemd's Restart=on-failure with RestartSec=2 is one).
# The default suite keeps the delays around the takeover (the slow sweep covers the rest):
# each restart costs a preloaded recovery, and the suite has to fit CI's time on 2 cores.
RESTART_DELAYS = (0.0, 2.0, 2.5)
SLOW_RESTART_DELAYS = tuple(d / 4 for d in range(0, 17)) * 3  # 0 .. 4 s step 0.25, 3 runs


def sweep_cluster(tmp_path: Path, candidates: int, preload: int) -> HaCluster:
    """Sync mode, `candidates` candidates (0 primary, the others caught-up standbys), a
    worker, and every candidate starting from the same preloaded log."""
    if candidates == 2:
        return make(tmp_path, "sync", preload)
    c = HaCluster(tmp_path / "ha", candidates=candidates, failover_timeout=2.0, replication="sync")
    c.preload(preload)
    c.start_candidate(0)
    for i in range(1, candidates):
        c.start_candidate(i, "standby")
    c.wait_primary(TAKEOVER_BOUND_S)
    c.start_worker("w1", slots=4)
    c.wait_writable()
    return c


def restart_sweep(
    tmp_path: Path, delays: tuple[float, ...], preload: int, candidates: int = 2
) -> None:
    """kill -9 of the primary, then `xce controller` on it again after each delay, under a
    sync-mode submit burst. After every round every candidate is up, one primary and caught-
    up standbys; at the end: never two primaries of one epoch (healthz polled every 50 ms,
    and the logs), zero acknowledged jobs lost or changed, and the job table is the same on
    another candidate (checked across a switchover)."""
    c = sweep_cluster(tmp_path, candidates, preload)  # a state whose recovery takes a while
    try:
        watch = PrimaryWatch(c)
        burst = Burst(c, threads=3)
        for delay in delays:
            primary = c.wait_primary(TAKEOVER_BOUND_S)
            before = len(burst.acked)
            c.wait_for(lambda b=before: len(burst.acked) >= b + 20, 30, "submits progressing")
            c.kill_candidate(primary)
            time.sleep(delay)
            c.start_candidate(primary, "controller", wait=False)
            new = c.wait_primary(TAKEOVER_BOUND_S + delay)
            for other in range(candidates):
                if other != new:
                    c.wait_caught_up(other, 120)
            print(f"restart after {delay:.2f} s: primary {new}, epoch {c.health(new)['epoch']}")
        burst.progress()
        acked = burst.finish()
        doubles = watch.stop()
        assert not doubles, f"two primaries of one epoch: {doubles}\n{c.log_text()}"
        assert not logged(c, "IMPOSSIBLE"), logged(c, "IMPOSSIBLE")
        assert len(acked) > 20 * len(delays), burst.errors[:3]
        check_no_loss(c, acked)
        primary = c.wait_primary()
        target = (primary + 1) % candidates
        c.wait_caught_up(target)
        table = job_contents(c)
        c.post("/api/v1/cluster/switchover", {"to": c.candidate_urls[target]})
        c.wait_for(lambda: c.primaries() == [target], 20, "the switchover")
        assert job_contents(c) == table  # the other candidate held the very same jobs
        print(
            f"{len(delays)} restarts, {len(acked)} acknowledged jobs, none lost; "
            f"{watch.polls} health polls, epochs {sorted(watch.seen)}"
        )
    finally:
        c.stop()


@pytest.mark.timeout(600)
def test_a_quickly_restarted_primary_never_makes_two_primaries_of_one_epoch(tmp_path: Path) -> None:
    restart_sweep(tmp_path, RESTART_DELAYS, preload=60_000)


@pytest.mark.slow
@pytest.mark.timeout(3600)  # 51 rounds, each a kill -9, a restart and a catch-up of 150k jobs
@pytest.mark.parametrize("candidates", [2, 3])
def test_restart_delay_sweep_from_0_to_twice_the_failover_timeout(
    tmp_path: Path, candidates: int
) -> None:
    restart_sweep(tmp_path, SLOW_RESTART_DELAYS, preload=150_000, candidates=candidates)


def test_a_restart_while_the_new_primary_is_unreachable_takes_another_epoch(tmp_path: Path) -> None:
    """The issue's double primary made deterministic: the standby took over, then cannot be
    reached (SIGSTOP, like a listener between roles or a partition) exactly while the old
    primary restarts. The restarted one may claim an epoch alone only after a whole failover
    timeout of silence, and only one of its own class: never the other's epoch. When they
    meet, the lower epoch steps down and its diverged tail is discarded by a checkpoint
    transfer, with the discarded records named in the log. Job numbers of the two lone
    terms do not collide either (the lost job's number is not handed out again)."""
    c = make(tmp_path, "sync")
    try:
        c.kill_candidate(0)
        assert c.wait_primary(TAKEOVER_BOUND_S, other_than=0) == 1
        alone = submit_after_takeover(c, command="true", hold=True, name="on-1-alone")
        epoch1 = c.health(1)["epoch"]
        c.candidates[1].send_signal(signal.SIGSTOP)
        try:
            c.start_candidate(0, "controller", wait=False)
            seen: list[dict] = []  # the reading that showed it primary (a later one may time out)

            def primary() -> bool:
                health = c.health(0) or {}
                seen[:] = [health]
                return health.get("role") == "primary"

            c.wait_for(primary, 30, "0 primary")
            epoch0 = seen[0]["epoch"]
        finally:
            c.candidates[1].send_signal(signal.SIGCONT)
        assert epoch0 != epoch1, f"two primaries of epoch {epoch0}"
        assert not logged(c, "IMPOSSIBLE")
        newer = 0 if epoch0 > epoch1 else 1
        c.wait_for(lambda: c.primaries() == [newer], 30, "the older term stepped down")
        c.wait_caught_up(1 - newer, 60)
        assert logged(c, "are discarded; sending a checkpoint")
        after = submit_after_takeover(c, command="true", hold=True, name="after-the-split")
        if newer == 0:  # the job acknowledged by 1 alone (degraded) was lost with its term
            assert after != alone
        assert c.job(after)["name"] == "after-the-split"
    finally:
        c.stop()


def test_async_a_lost_job_number_is_never_given_to_another_job(tmp_path: Path) -> None:
    """Async mode may lose acknowledged jobs in a failover (by design): their numbers must
    stay gaps, so that `xce job kill N` held by the first client never reaches another
    user's job."""
    c = make(tmp_path, "async")
    try:
        before = c.submit(command="true", hold=True, name="before")
        c.wait_caught_up(1)
        c.kill_candidate(1)  # the standby is gone: what follows reaches no one
        lost = {
            c.submit(command="true", hold=True, name=f"lost-{i}"): f"lost-{i}" for i in range(5)
        }
        c.kill_candidate(0)
        c.start_candidate(1, "standby")  # it comes back alone and takes over
        assert c.wait_primary(TAKEOVER_BOUND_S) == 1
        after = submit_after_takeover(c, command="true", hold=True, name="after")
        present = all_jobs(c)
        assert present[before] == "before"
        assert after not in lost, f"job number {after} was handed out twice"
        assert not set(lost) & set(present), "the lost jobs were not lost: nothing tested"
        assert int(after) > max(int(n) for n in lost)
    finally:
        c.stop()


def test_a_submit_retried_with_its_idempotency_key_across_a_failover_makes_one_job(
    ha: HaCluster,
) -> None:
    """The client lost the answer when the primary died (sync mode: the job is on the
    standby); its retry with the same key on the new primary finds the job."""
    body = {"command": "echo once", "user": "root", "name": "exactly-once", "hold": True}
    key = {"Idempotency-Key": "retry-across-failover-1"}
    first = ha.request("POST", "/api/v1/jobs", body, extra_headers=key)["job_id"]
    ha.kill_candidate(0)
    assert ha.wait_primary(TAKEOVER_BOUND_S, other_than=0) == 1
    again = ha.request("POST", "/api/v1/jobs", body, retry_for=20, extra_headers=key)["job_id"]
    assert again == first
    named = [j for j in ha.get("/api/v1/jobs?limit=100000")["jobs"] if j["name"] == "exactly-once"]
    assert [j["id"] for j in named] == [first]
