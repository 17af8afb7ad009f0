"""A job never runs on two hosts at once, whatever happens to the worker running it.

Two real workers and a real controller. The job appends `<attempt> <time>` to a file outside
its spool every 50 ms for a few seconds, then `end`. The worker running it is killed
(`kill -9`), frozen (`SIGSTOP`) or cut off from the controller (its only route, a TCP proxy,
is closed). The controller requeues the job on the other worker only after the heartbeat
deadline plus `fence_timeout_s`; by then the first attempt's keeper has killed it. The test
checks that the two attempts' lines never interleave in time and that the job ends once.

With the old worker the first attempt ran on for 30+ s beside the second.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster

FENCE_S = 3.0
JOB = (
    'for i in $(seq 1 {ticks}); do echo "$XCE_ATTEMPT $(date +%s.%N)" >> {log}; '
    'sleep 0.05; done; echo "$XCE_ATTEMPT end" >> {log}'
)


class Proxy:
    """A TCP relay on 127.0.0.1 to the controller that the test can cut at once."""

    def __init__(self, target_port: int) -> None:
        self.target = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        self.open = True
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while self.open:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            with self.lock:
                if not self.open:
                    client.close()
                    upstream.close()
                    return
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        with self.lock:
            self.open = False
            self.listener.close()
            for conn in self.conns:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(tmp_path / "c", heartbeat=0.3)
    made.fence_timeout = FENCE_S
    yield made
    made.stop()


def _attempts(log: Path) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for line in log.read_text().splitlines():
        attempt, when = line.split()
        if when != "end":
            out.setdefault(int(attempt), []).append(float(when))
    return out


def _check_never_twice(cluster: Cluster, job_id: str, log: Path) -> None:
    job = cluster.wait_state(job_id, "DONE", "EXIT", timeout=90)
    assert job["state"] == "DONE" and job["attempt"] >= 1, job
    runs = _attempts(log)
    spans = sorted((min(t), max(t), a) for a, t in runs.items())
    for (_, end, first), (start, _, second) in itertools.pairwise(spans):
        assert end < start, f"attempts {first} and {second} overlapped: {spans}"
    ends = [line for line in log.read_text().splitlines() if line.endswith(" end")]
    assert ends == [f"{job['attempt']} end"], ends


def _start(cluster: Cluster, tmp_path: Path) -> tuple[str, Path]:
    """The job running on w1, then w2 online to take it over."""
    log = tmp_path / "ticks.log"
    job_id = cluster.submit(command=JOB.format(ticks=240, log=log))
    assert cluster.wait_state(job_id, "RUN")["host"] == "w1"
    cluster.wait_for(
        lambda: log.exists() and len(log.read_text().splitlines()) > 5, 20, "the job ticking"
    )
    cluster.start_worker("w2")
    return job_id, log


def test_kill_9_of_the_worker(cluster: Cluster, tmp_path: Path) -> None:
    cluster.start_controller()
    cluster.start_worker("w1")
    job_id, log = _start(cluster, tmp_path)
    cluster.kill_worker("w1")
    _check_never_twice(cluster, job_id, log)


def test_a_frozen_worker(cluster: Cluster, tmp_path: Path) -> None:
    cluster.start_controller()
    cluster.start_worker("w1")
    job_id, log = _start(cluster, tmp_path)
    frozen = cluster.workers["w1"]
    frozen.send_signal(signal.SIGSTOP)
    try:
        cluster.wait_for(lambda: cluster.job(job_id)["attempt"] >= 1, 30, "the requeue")
    finally:
        frozen.send_signal(signal.SIGCONT)
    _check_never_twice(cluster, job_id, log)


def test_a_worker_cut_off_from_the_controller(cluster: Cluster, tmp_path: Path) -> None:
    cluster.start_controller()
    proxy = Proxy(cluster.port)
    cluster.worker_controllers["w1"] = [f"http://127.0.0.1:{proxy.port}"]
    cluster.start_worker("w1")
    job_id, log = _start(cluster, tmp_path)
    proxy.cut()
    _check_never_twice(cluster, job_id, log)
    assert os.path.exists(log)
