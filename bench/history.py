"""The cluster history ring's memory and cost with 10,000 hosts: `python -m bench.history`.

The ring (xce/controller/cluster_history.py) claims fixed memory: one 8-byte cell per field,
slot and series (the cluster plus one per queue), whatever the hosts, jobs or uptime. This
builds a state with H hosts and Q queues, attaches a ring at the default 60 s step, then
drives a fake clock through a whole day and then a second one, applying events as the
service's applier does (`before`, apply, `after`): every step some submissions, and every
tenth step a host leaving and coming back (which makes the next sample walk the hosts for
the totals). Printed per row:

- the memory the ring's own code allocated and still holds (tracemalloc, counted by the
  allocating file: the ring's modules, not the state's jobs) after one day and after two:
  the second must equal the first (nothing grows with uptime), and the rows with 1,000 and
  10,000 hosts must be alike (nothing grows with hosts);
- the median CPU time (under tracemalloc, so slower than in service; compare the rows) of
  closing one boundary when nothing changed, and of one whose
  totals must be recounted after a host change (that walk is O(hosts)).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import tracemalloc

from bench.common import spec
from xce.controller.cluster_history import ClusterHistory
from xce.core import events as ev
from xce.core.model import QueueRecord
from xce.core.state import ClusterState

STEP = 60
DAY_STEPS = 86_400 // STEP
T0 = 1_800_000_000.0
RING_FILES = ("cluster_history.py", "history_records.py")


def _state(hosts: int, queues: int) -> ClusterState:
    state = ClusterState()
    for q in range(queues):
        state.apply(ev.QueueCreated(T0, QueueRecord(f"q{q}", priority=30)))
    for h in range(hosts):
        state.apply(ev.HostRegistered(T0, f"h{h:05d}", 32, 128_000))
    return state


class _Driver:
    """Applies events through the ring as the applier does, on a fake clock."""

    def __init__(self, state: ClusterState, ring: ClusterHistory) -> None:
        self.state, self.ring = state, ring
        self.seq = state.applied
        self.number = 0
        self.close_plain: list[float] = []
        self.close_totals: list[float] = []

    def apply(self, event: ev.Event) -> None:
        self.ring.before(self.state, event)
        self.state.apply(event)
        self.seq += 1
        self.ring.after(self.state, event, self.seq)

    def day(self, start_k: int, queues: int) -> None:
        for i in range(DAY_STEPS):
            k = start_k + i
            t = k * STEP
            host_change = i % 10 == 0
            if host_change:
                self.apply(ev.HostUnavailable(t + 1, "h00000"))
                self.apply(ev.HostAvailable(t + 2, "h00000"))
            for j in range(4):
                self.number += 1
                base = spec(fresh=False)
                job_spec = type(base)(
                    user=base.user,
                    queue=f"q{(self.number + j) % queues}",
                    command=base.command,
                    submit_host=base.submit_host,
                )
                self.apply(ev.JobSubmitted(t + 3 + j, self.number, job_spec))
            began = time.process_time()
            self.ring.tick(t + STEP + 0.5)  # closes boundary k + 1
            spent = time.process_time() - began
            (self.close_totals if host_change else self.close_plain).append(spent)


def _held_by_ring() -> int:
    """Bytes still allocated from the ring's own modules (any frame of the traceback)."""
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(True, f"*{name}", all_frames=True) for name in RING_FILES]
    )
    return sum(stat.size for stat in snapshot.statistics("filename"))


def row(hosts: int, queues: int) -> dict[str, float]:
    state = _state(hosts, queues)
    gc.collect()
    tracemalloc.start(8)
    k0 = int(T0 // STEP)
    ring = ClusterHistory(state, STEP, lambda: float(k0 * STEP))
    driver = _Driver(state, ring)
    driver.day(k0, queues)
    gc.collect()
    one_day = _held_by_ring()
    driver.day(k0 + DAY_STEPS, queues)
    gc.collect()
    two_days = _held_by_ring()
    tracemalloc.stop()
    return {
        "one_day_kb": one_day / 1024,
        "two_days_kb": two_days / 1024,
        "close_us": statistics.median(driver.close_plain) * 1e6,
        "close_totals_us": statistics.median(driver.close_totals) * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.history")
    parser.add_argument("--queues", type=int, default=16)
    args = parser.parse_args()
    print(f"cluster history ring, step {STEP} s, {DAY_STEPS + 1} slots, {args.queues} queues")
    head = f"{'hosts':>7} {'1 day KiB':>10} {'2 days KiB':>11} {'close us':>9} {'+totals us':>11}"
    print(head)
    for hosts in (1_000, 10_000):
        r = row(hosts, args.queues)
        print(
            f"{hosts:>7,} {r['one_day_kb']:>10.0f} {r['two_days_kb']:>11.0f} "
            f"{r['close_us']:>9.0f} {r['close_totals_us']:>11.0f}"
        )


if __name__ == "__main__":
    main()
