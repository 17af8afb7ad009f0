"""A controller in a crash loop: kill -9 after each start's writes. Every start that
replayed records checkpoints at once, so the WAL's segments stay bounded (they grew by a
preallocated segment per crash before)."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.integration.cluster import Cluster
from xce.store.checkpoint import list_checkpoints
from xce.store.recovery import checkpoint_dir, wal_dir
from xce.store.wal.reader import list_segments


def test_kill_9_restarts_keep_the_wal_bounded(tmp_path: Path) -> None:
    c = Cluster(tmp_path / "c")
    state = c.root / "controller"
    counts: list[int] = []
    sizes: list[int] = []
    jobs: list[str] = []
    try:
        applied = 0
        for _ in range(4):
            c.start_controller()
            # The start checkpoints what it replayed (everything the last one applied).
            c.wait_for(
                lambda applied=applied: (
                    not applied
                    or any(seq >= applied for seq, _ in list_checkpoints(checkpoint_dir(state)))
                ),
                20,
                "the start's checkpoint",
            )
            jobs += [c.submit(command="true", hold=True) for _ in range(5)]
            applied = c.get("/api/v1/cluster")["events_applied"]
            assert c.controller is not None
            c.controller.send_signal(signal.SIGKILL)
            c.controller.wait(10)
            segments = list_segments(wal_dir(state))
            counts.append(len(segments))
            sizes.append(sum(p.stat().st_size for _, p in segments))
        c.start_controller()
        assert all(c.job(j)["state"] == "PSUSP" for j in jobs)  # nothing lost meanwhile
    finally:
        c.stop()
    # Each start writes into a segment of its own, and a checkpoint drops the segments
    # wholly before the older of the two kept checkpoints: at most three remain.
    print(f"segments after each crash: {counts}, bytes: {sizes}")
    assert max(counts) <= 3, counts
    assert counts[-1] <= counts[2], counts  # not growing with the number of crashes
    segment_bytes = c.wal_segment_mb * 1024 * 1024
    assert max(sizes) <= 3 * segment_bytes, sizes
