"""The scheduling pass: order pending jobs, filter and rank hosts, place or reserve (pipeline),
with its parts: host search (hosts, hostpool, ranking), one job's try (place), jobs across hosts
(spread, multihost), devices (gres), EASY and advance reservations, the memo passes share, and
preemption after a pass.
"""
