"""The worker (like Slurm's slurmd): runs the jobs the controller gives this host, as their
users, under cgroups, and reports how they ended.

    controller ──long-poll──▶ agent/link ──desired set──▶ agent/reconcile
                                                              │ start / stop / kill
                                                              ▼
    attempt/spool, jobenv, staging (inputs as the user) ──▶ attempt/executor
                                                              │ one message per attempt
                                                              ▼
    keeper/client ──SOCK_SEQPACKET──▶ keeper/process (forks one keeper per attempt:
                                      session, cgroup, the user's uid, fence, result.json)
                                                              │ result.json
                                                              ▼
    attempt/executor (usage, outputs as the user) ──▶ agent/reports ──finish report──▶ controller

* `agent/`: registration, the desired-set long-poll and heartbeats (`link`), making processes
  match that set (`reconcile`), finish reports delivered until taken (`reports`), live output
  (`tail`), what the host declares (`hostinfo`).
* `attempt/`: one attempt's directories, account, environment, launch and end, suspend and
  kill, usage, recovery after a worker restart, and every file operation in the job's tree,
  done through descriptors that cannot leave it or as the job's user (`userfs`, `fscreds`,
  `staging`).
* `keeper/`: the process that owns a running job and outlives a worker restart (like Slurm's
  slurmstepd); `fence` stops a job whose worker lost every controller.
* `tasks/`: the task service behind `xce launch` (tasks started into the job's cgroup on any
  of its hosts) and the share cgroups a multi-host job holds on its other hosts.
* `devices/`: GPUs declared or detected through NVML, bound to jobs, their usage sampled.
* `cgroups/`: the containment backends (v2, v1, none) and the device cgroup.

The worker's own state (spec.json, keeper.json, result.json) lives in a root-only directory
no job can reach; nothing a job can write is trusted.
"""
