"""XCE persistence benchmark: `python -m bench [--quick] [--json FILE] [--dir DIR]`.

Prints one table (figure | measured | target | verdict) covering the raw fsync rate of the
disk, durable submissions through a real controller process, the WAL writer alone,
checkpoints, recovery and memory per pending job. Timings are medians of several runs.
"""
