"""A cluster with several controller candidates (real processes on 127.0.0.1) for HA tests.

Candidate i listens on its own port (replication on port + 1) with its own state directory;
only candidate 0 starts with the signing keys, the others receive them over replication.
Requests go to whichever candidate is primary, like the real client: a refused connection
or a 503 `not_primary` moves on to the next one.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.integration.cluster import ISSUER, KEYS, ApiFailure, Cluster
from xce.auth.keys import key_dir
from xce.ha.door import STARTING

STANDBY_TOKEN = ISSUER.issue("standby", (), ("standby",), "service")[0]


def free_pair() -> int:
    """A port p with p + 1 free too (the replication listener), outside the kernel's
    ephemeral range so that no outgoing connection holds p + 1 when a standby takes over."""
    from bench.soak import free_pair as pair_outside_ephemeral

    return pair_outside_ephemeral(_TAKEN)


_TAKEN: set[int] = set()


class HaCluster(Cluster):
    def __init__(
        self,
        root: Path,
        candidates: int = 2,
        failover_timeout: float = 2.0,
        replication: str = "async",
        heartbeat: float = 0.3,
    ) -> None:
        super().__init__(root, heartbeat=heartbeat)
        self.fence_timeout = 15.0  # well past a failover: workers keep their jobs through it
        self.start_timeout = 20.0  # a first start; preload() raises it with the state's size
        self.ports = [free_pair() for _ in range(candidates)]
        self.candidate_urls = [f"http://127.0.0.1:{p}" for p in self.ports]
        self.url = self.candidate_urls[0]
        self.cluster_extra = (
            f"failover_timeout_s = {failover_timeout}\n"
            f'heartbeat_interval_s = 0.3\nreplication = "{replication}"\n'
            f"sync_timeout_s = 5.0"
        )
        self.candidates: dict[int, subprocess.Popen[bytes]] = {}

    def _candidate_config(self, i: int) -> Path:
        text = self._config().read_text()
        state = self.root / f"controller{i}"
        text = text.replace(
            f'listen = "127.0.0.1:{self.port}"', f'listen = "127.0.0.1:{self.ports[i]}"'
        )
        text = text.replace(
            f'state_dir = "{self.root / "controller"}"',
            f'state_dir = "{state}"\nreplication_token = "{STANDBY_TOKEN}"',
        )
        path = self.root / f"controller{i}.toml"
        path.write_text(text)
        return path

    def start_candidate(self, i: int, role: str = "controller", wait: bool = True) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        state = self.root / f"controller{i}"
        if i == 0 and not key_dir(state).exists():
            state.mkdir(mode=0o700, exist_ok=True)
            shutil.copytree(KEYS, key_dir(state))
        self.candidates[i] = self._spawn(
            f"controller{i}", role, "-c", str(self._candidate_config(i))
        )
        if wait:
            self.wait_for(
                lambda: self.health(i) is not None, self.start_timeout, f"candidate {i} up"
            )

    def start_controller(self) -> None:
        self.start_candidate(0)

    def preload(self, jobs: int) -> None:
        """Give every candidate the same log of `jobs` held jobs before it first starts (a
        checkpoint plus a WAL tail, written in-process): a state whose recovery and role
        switches take a while, without submitting it over HTTP."""
        import asyncio

        from xce.core import events as ev
        from xce.core.model import JobSpec, QueueRecord
        from xce.store.durable import DurableLog, StoreSettings

        # Recovery of 150k jobs takes ~10 s on a quiet 2-core machine and several times that
        # under load: the first start waits in proportion.
        self.start_timeout = max(self.start_timeout, jobs / 2000)
        first = self.root / "controller0"
        first.mkdir(parents=True, mode=0o700)

        async def write() -> None:
            store = DurableLog.open(first, StoreSettings())
            state = store.recovered.state
            spec = JobSpec(user="root", queue="normal", command="true", name="preloaded", hold=True)
            events = [ev.QueueCreated(1.0, QueueRecord("normal"))]
            events += [ev.JobSubmitted(2.0, n, spec) for n in range(1, jobs + 1)]
            for i, e in enumerate(events):
                state.apply(e)
                store.append(e)
                if i == jobs // 2:
                    await store.checkpoint(state)
            await store.writer.sync(durable=True)
            await store.writer.close()

        asyncio.run(write())
        for i in range(1, len(self.ports)):
            shutil.copytree(first, self.root / f"controller{i}")
        for i in range(len(self.ports)):  # a log like this came with the keys, over replication
            shutil.copytree(KEYS, key_dir(self.root / f"controller{i}"))

    def start_pair(self) -> None:
        """Candidate 0 primary (`xce controller`), candidate 1 a caught-up standby."""
        self.start_candidate(0)
        assert self.wait_primary() == 0
        self.start_candidate(1, "standby")
        self.wait_caught_up(1)
        self.wait_writable()

    def wait_writable(self, timeout: float = 20) -> None:
        """Until the primary has written its configured queues: a term claimed alone writes
        only once a worker or the other candidate reached it (xce/ha/lease.py)."""

        def check() -> bool:
            try:
                return self.request("GET", "/api/v1/queues/normal", retry_for=0)["name"] == "normal"
            except (ApiFailure, OSError):
                return False

        self.wait_for(check, timeout, "the primary writing")

    def kill_candidate(self, i: int, sig: int = signal.SIGKILL) -> None:
        proc = self.candidates.pop(i)
        proc.send_signal(sig)
        proc.wait(10)

    def health(self, i: int) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(self.candidate_urls[i] + "/healthz", timeout=2) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    def primary(self) -> int | None:
        """The candidate that says it is primary (the newest epoch if, wrongly, several),
        once its API answers: a winner whose controller is still starting answers on the
        door (xce/ha/door.py) and says so."""
        found = [
            (h["epoch"], i)
            for i in range(len(self.ports))
            if (h := self.health(i)) and h["role"] == "primary" and h.get("reason") != STARTING
        ]
        return max(found)[1] if found else None

    def primaries(self) -> list[int]:
        return [
            i for i in range(len(self.ports)) if (h := self.health(i)) and h["role"] == "primary"
        ]

    def wait_primary(self, timeout: float = 20, other_than: int | None = None) -> int:
        found: list[int] = []

        def check() -> bool:
            p = self.primary()
            if p is not None and p != other_than:
                found.append(p)
                return True
            return False

        self.wait_for(check, timeout, "a primary")
        return found[-1]

    def wait_caught_up(self, i: int, timeout: float = 30) -> None:
        def check() -> bool:
            # The primary's position first, then the standby's: under a steady submit burst a
            # sync standby trails the primary's newest record by the batch in flight, so
            # "caught up" means it has reached where the primary stood a moment before.
            p = self.primary()
            target = (self.health(p) or {"seq": 1 << 62})["seq"] if p is not None else 1 << 62
            h = self.health(i)
            return (
                p is not None
                and h is not None
                and h["role"] == "standby"
                # following that primary (a primary stepping down shows its own log's end
                # while it shuts down, and names itself)
                and h.get("primary") == self.candidate_urls[p]
                and h["seq"] >= target
                # and that primary counts it in sync: a standby whose log diverged shows its
                # old end, as far as the primary's, until the checkpoint sent to it is in
                and self._in_sync(i)
            )

        self.wait_for(check, timeout, f"candidate {i} caught up")

    def _in_sync(self, i: int) -> bool:
        """Whether the primary counts candidate `i` among its standbys in sync."""
        try:
            view = self.request("GET", "/api/v1/cluster")["ha"]
        except (ApiFailure, OSError):
            return False
        return any(
            s.get("node") == self.candidate_urls[i] and s.get("in_sync")
            for s in view.get("standbys") or []
        )

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        token: str | None = None,
        raw: bytes | None = None,
        retry_for: float = 0.0,
        extra_headers: dict[str, str] | None = None,
    ) -> Any:
        """Like the client: try the candidates in turn; `retry_for` seconds of retries."""
        from tests.integration.cluster import ADMIN_TOKEN

        token = token or ADMIN_TOKEN
        deadline = time.monotonic() + retry_for
        while True:
            last: Exception | None = None
            for url in [self.url, *[u for u in self.candidate_urls if u != self.url]]:
                self.url = url
                try:
                    return super().request(method, path, body, token, raw, extra_headers)
                except ApiFailure as exc:
                    if exc.status == 503 and exc.body.get("error", {}).get("code") == "not_primary":
                        last = exc
                        continue
                    raise
                except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                    last = exc
                    continue
            if time.monotonic() >= deadline:
                assert last is not None
                raise last
            time.sleep(0.1)

    def stop(self) -> None:
        for proc in self.candidates.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
        for proc in self.candidates.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.candidates.clear()
        super().stop()


class PrimaryWatch:
    """Polls every candidate's /healthz in a thread and records which candidates said they
    were primary of which epoch: one primary per epoch is the promise being checked."""

    def __init__(self, c: HaCluster, every: float = 0.05) -> None:
        self.c = c
        self.every = every
        self.seen: dict[int, set[int]] = {}
        self.polls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for i in range(len(self.c.ports)):
                h = self.c.health(i)
                if h and h.get("role") == "primary":
                    self.seen.setdefault(int(h["epoch"]), set()).add(i)
            self.polls += 1
            self._stop.wait(self.every)

    def stop(self) -> dict[int, set[int]]:
        """Epochs that more than one candidate served as primary (empty when all is well)."""
        self._stop.set()
        self._thread.join(10)
        return {e: ranks for e, ranks in self.seen.items() if len(ranks) > 1}


def logged(c: HaCluster, text: str) -> list[str]:
    """Lines of every candidate's log (each file once) that contain `text`."""
    return [
        line
        for path in sorted(set(c.logs))
        if path.exists()
        for line in path.read_text().splitlines()
        if text in line
    ]
