"""Pure domain core: records, lifecycle state machines, events and `ClusterState`.

Nothing in this package performs I/O, reads the clock or touches asyncio: time is passed in
on every event, so replaying the same events always yields the same state.
"""
