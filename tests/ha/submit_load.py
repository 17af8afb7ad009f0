"""Continuous submits against an HA cluster, counted per second, for availability tests.

Each client thread submits held jobs one after the other like the real client does: it
starts with the candidate that last acknowledged one and, on a refused connection, a timeout
or any answer other than 201, tries the next candidate. A submit is *accepted* when some
candidate acknowledged it within one pass over the candidates and *refused* when none did:
what a user of the CLI would see. Outcomes are counted per second since the load started,
by when the submit began, so that a test can say in which seconds refusals fell (and print
the table when they fell where they must not); it never asserts how long anything took.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass

from tests.integration.cluster import ADMIN_TOKEN
from tests.integration.ha_cluster import HaCluster


def post_job(c: HaCluster, i: int, name: str, timeout: float) -> tuple[str | None, str]:
    """Submit a held job named `name` to candidate i only: its number, or None and why not."""
    body = json.dumps({"command": "true", "user": "root", "name": name, "hold": True})
    req = urllib.request.Request(
        c.candidate_urls[i] + "/api/v1/jobs",
        data=body.encode(),
        method="POST",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return str(json.loads(resp.read())["job_id"]), ""
    except urllib.error.HTTPError as exc:
        return None, f"{i}: {exc.code} {exc.read().decode(errors='replace')[:120]}"
    except (OSError, ValueError) as exc:
        return None, f"{i}: {exc}"


@dataclass(frozen=True)
class Ack:
    name: str
    job: str
    by: int  # the candidate that acknowledged it
    started: float  # monotonic, when the submit began
    at: float  # monotonic, when the 201 arrived


@dataclass(frozen=True)
class Refusal:
    started: float
    why: str  # each candidate's answer


class SubmitLoad:
    def __init__(self, c: HaCluster, threads: int = 3, timeout: float = 2.0) -> None:
        """`timeout`: per request. A SIGSTOPped candidate accepts connections (the kernel
        queues them) but never answers; a client gives up on it after this long."""
        self.c = c
        self.timeout = timeout
        self.t0 = time.monotonic()
        self.acks: list[Ack] = []
        self.refusals: list[Refusal] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(t,), daemon=True) for t in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def _post(self, i: int, name: str) -> tuple[str | None, str]:
        return post_job(self.c, i, name, self.timeout)

    def _run(self, t: int) -> None:
        n = len(self.c.candidate_urls)
        current, k = 0, 0
        while not self._stop.is_set():
            name = f"load{t}-{k}"
            k += 1
            started = time.monotonic()
            answers: list[str] = []
            for step in range(n):
                i = (current + step) % n
                job, why = self._post(i, name)
                answers.append(why)
                if job is not None:
                    with self._lock:
                        self.acks.append(Ack(name, job, i, started, time.monotonic()))
                    current = i
                    break
            else:
                with self._lock:
                    self.refusals.append(Refusal(started, "; ".join(answers)))
                time.sleep(0.05)  # nobody took it: do not spin
            time.sleep(0.01)

    def now(self) -> float:
        return time.monotonic()

    def acked_since(self, at: float, by: int | None = None) -> int:
        with self._lock:
            return sum(1 for a in self.acks if a.started >= at and by in (None, a.by))

    def wait_acked(
        self, count: int, since: float, by: int | None = None, timeout: float = 30.0
    ) -> None:
        """Until `count` submits begun after `since` were acknowledged (by `by`)."""
        self.c.wait_for(
            lambda: self.acked_since(since, by) >= count,
            timeout,
            f"{count} submits acknowledged (refusals: {self.refusals[-2:]})",
        )

    def refused_since(self, at: float) -> list[Refusal]:
        with self._lock:
            return [r for r in self.refusals if r.started >= at]

    def refused_outside(self, windows: list[tuple[float, float]]) -> list[Refusal]:
        """Refusals of submits begun outside every (start, end) window."""
        with self._lock:
            return [
                r
                for r in self.refusals
                if not any(start <= r.started <= end for start, end in windows)
            ]

    def stop(self) -> list[Ack]:
        self._stop.set()
        for thread in self._threads:
            thread.join(self.timeout * len(self.c.candidate_urls) + 10)
        return list(self.acks)

    def per_second(self) -> str:
        """Accepted/refused per second since the load began: the message of a failure."""
        accepted = Counter(int(a.started - self.t0) for a in self.acks)
        refused = Counter(int(r.started - self.t0) for r in self.refusals)
        last = max([*accepted, *refused], default=0)
        return " ".join(f"{s}s:{accepted[s]}/{refused[s]}" for s in range(last + 1))


def present(c: HaCluster) -> dict[str, str]:
    """Every job the primary holds: number -> name."""
    jobs: dict[str, str] = {}
    while True:
        page = c.get(f"/api/v1/jobs?limit=100000&offset={len(jobs)}")
        jobs.update((str(j["id"]), j["name"]) for j in page["jobs"])
        if not page["jobs"] or len(jobs) >= page["total"]:
            return jobs


def missing(c: HaCluster, acks: list[Ack]) -> list[Ack]:
    """Acknowledged submits the primary does not hold under their number and name (lost, or
    their number given to another job)."""
    jobs = present(c)
    return [a for a in acks if jobs.get(a.job) != a.name]
