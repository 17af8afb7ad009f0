"""The keeper: the process that owns one running attempt and outlives a worker restart (like
Slurm's slurmstepd). `process` runs in the keeper (and the launcher that forks keepers);
`client` is the worker's end of that launcher; `fence` stops a job whose worker lost its
controller.
"""
