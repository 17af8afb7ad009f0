"""First-come-first-served, first-fit placement: the default policy of the plugin pipeline.

Kept as a module so that `fcfs.plan` still names the default: a queue with no `plugins`
orders by (queue priority, submission) and places each job on the first host, by name, that
is online, allowed by its queue, matches its `select[]` (ranked by `order[]` when given) and
has the free slots and memory it asks for. A job that does not fit does not block later
ones (no reservation: that is the `backfill` plugin).
"""

from __future__ import annotations

from xce.sched.pipeline import plan

__all__ = ["plan"]
