"""MPI through `xce launch`: a small C program (allreduce over all ranks, then
rank and host printed) compiled with mpicc, started by OpenMPI's mpirun with the job's
hostfile and `xce launch` as its remote agent, inside a 6-slot job over three loopback
workers. Every rank appears once, on the host its slot is on. All "hosts" are this machine,
so the host printed is XCE_EXEC_HOST (set by each host's task service), not the kernel's.

The job runs as root (`--allow-run-as-root`): the harness's Python lives under /root (0700),
which an ordinary user could not run `xce launch` from."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.integration.cluster import Cluster
from tests.integration.conftest import THREE_HOSTS

HOSTS = THREE_HOSTS
PROGRAM = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    int rank, size, one, sum = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    one = rank + 1;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    const char *host = getenv("XCE_EXEC_HOST");
    printf("rank %d of %d on %s sum %d\n", rank, size, host ? host : "?", sum);
    MPI_Finalize();
    return 0;
}
"""

pytestmark = pytest.mark.skipif(
    shutil.which("mpicc") is None or shutil.which("mpirun") is None,
    reason="mpicc/mpirun missing (apt-get install openmpi-bin libopenmpi-dev, as .ci/run does)",
)


def test_mpirun_with_xce_launch_runs_every_rank_once_on_its_host(three: Cluster) -> None:
    source = three.jobs_root / "allreduce.c"
    source.write_text(PROGRAM)
    binary = three.jobs_root / "allreduce"
    subprocess.run(["mpicc", "-o", str(binary), str(source)], check=True, timeout=120)
    # The three "hosts" are one machine: OpenMPI's shared-memory transport (vader) would put
    # the segments of ranks it believes are on different nodes in one place and crash, so
    # the ranks talk TCP over loopback (a real cluster needs none of these --mca lines but
    # the agent). For the same reason PMIx keeps its job data in each daemon's memory
    # (gds hash), not in shared-memory files of a session directory that the three daemons,
    # all "vm" in one /tmp, would share and clean up under each other (one full-suite run saw
    # a rank die of a signal; this is its likely cause).
    # And each daemon gets a /tmp of its own: on one machine the daemons' session
    # directories (/tmp/ompi.HOSTNAME.UID/jf.N) are one path, and two daemons creating it at
    # once fail ("mkdir ... File exists", seen in one full-suite run). The agent is still
    # `xce launch`, with the remote command wrapped.
    agent = three.jobs_root / "mpi-agent"
    agent.write_text(
        "#!/bin/sh\n"
        "host=$1; shift\n"
        'exec xce launch "$host" \'d=$(mktemp -d) && export TMPDIR="$d" && { \'"$*"\'; }; '
        's=$?; rm -rf "$d"; exit $s\'\n'
    )
    agent.chmod(0o755)
    script = (
        f"export PMIX_MCA_gds=hash; "
        f'mpirun --allow-run-as-root --hostfile "$XCE_HOSTFILE" '
        f'--mca plm_rsh_agent "{agent}" --mca pml ob1 --mca btl self,tcp '
        f"--mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -np 6 {binary}"
    )
    job_id = three.submit(command=script, slots=6, resources="span[ptile=2]")
    job = three.wait_state(job_id, "DONE", "EXIT", timeout=180)
    out = three.download(job_id, "stdout").decode()
    err = three.download(job_id, "stderr").decode()
    if job["state"] != "DONE":  # the whole of OpenMPI's story (an assert would truncate it)
        pytest.fail(
            f"job {job['state']} ({job.get('reason')}, exit {job.get('exit_code')})\n"
            f"--- stdout\n{out[-4000:]}\n--- stderr\n{err[-8000:]}",
            pytrace=False,
        )
    ranks = sorted(line for line in out.splitlines() if line.startswith("rank "))
    # mpirun maps ranks by slot: 0-1 on the first host of the hostfile, 2-3, 4-5
    assert ranks == [f"rank {r} of 6 on {HOSTS[r // 2]} sum 21" for r in range(6)], (out, err)

    # A migrated Slurm script's bare `mpirun` (no hostfile, no -np): the job's SLURM_*
    # variables give OpenMPI the hosts and slots, and the job's environment keeps it off
    # its Slurm starter, which would look for `srun`.
    bare = script.replace('--hostfile "$XCE_HOSTFILE" ', "").replace(" -np 6", "")
    job_id = three.submit(command=bare, slots=6, resources="span[ptile=2]")
    job = three.wait_state(job_id, "DONE", "EXIT", timeout=180)
    out = three.download(job_id, "stdout").decode()
    if job["state"] != "DONE":
        err = three.download(job_id, "stderr").decode()
        pytest.fail(f"bare mpirun: job {job['state']}\n{out[-4000:]}\n{err[-8000:]}", False)
    hosts = sorted(line.split(" on ")[1].split()[0] for line in out.splitlines() if " on " in line)
    assert hosts == sorted(HOSTS * 2), out
