"""The fence for a share cgroup that holds tasks: `xce launch` tasks on a host
that is not a job's first run in the share cgroup (xce/worker/tasks/shares.py), which no keeper
watches. The task service starts one of these per share when the share's first task starts;
it outlives the worker (its own session), and kills the share's cgroup once the worker's
last contact with a controller (`state/contact`, xce/worker/keeper/fence.py) is older than the
fence, as keepers do for jobs: a worker killed with -9, frozen or cut off leaves no task
running past the moment the controller ends or requeues the job. It exits when the cgroup
is gone (the share was released). Standard library and the cgroup backends only.

    python -m xce.worker.tasks.sharefence STATE_DIR KIND PARENT NAMESPACE NAME
"""

from __future__ import annotations

import sys
import time

from xce.worker.cgroups import detect
from xce.worker.keeper import fence

INTERVAL_S = 0.5


def watch(state_dir: str, kind: str, parent: str, namespace: str, name: str) -> int:
    backend = detect(kind, parent, namespace)
    contact = fence.read(state_dir)
    while True:
        cgroup = backend.open(name)
        if cgroup is None:
            return 0
        latest = fence.read(state_dir)  # None: unreadable or torn, keep the last one
        if latest is not None and (contact is None or latest.at >= contact.at):
            contact = latest
        if contact is not None and contact.expired():
            cgroup.kill()
            cgroup.remove()
            return 0
        time.sleep(INTERVAL_S)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 5:
        sys.stderr.write(
            "usage: python -m xce.worker.tasks.sharefence STATE_DIR KIND PARENT NAMESPACE NAME\n"
        )
        sys.exit(2)
    sys.exit(watch(*args))


if __name__ == "__main__":
    main()
