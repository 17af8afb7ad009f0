"""The submit host a job is given (SLURM_SUBMIT_HOST, LSB_SUB_HOST, PBS_O_HOST) is set by the
controller from the connection; the body's value is ignored."""

from __future__ import annotations

import socket

from .conftest import Api, as_user

JOBS = "/api/v1/jobs"


async def test_the_submit_host_is_the_connections_not_the_bodys(secured: Api) -> None:
    """A job's SLURM_SUBMIT_HOST is where its results may be copied back to: a client
    cannot name a host it is not on. From loopback it is the controller's own host."""
    answer = await secured.call(
        "POST",
        JOBS,
        201,
        headers=as_user("dave", "operator"),
        json={"command": "id", "submit_host": "trusted-login\u0000x"},
    )
    job = secured.service.state.job(answer["job_id"])
    assert job.spec.submit_host == socket.gethostname()
    shown = await secured.call(
        "GET", f"{JOBS}/{answer['job_id']}", 200, headers=as_user("dave", "operator")
    )
    assert shown["submit_host"] == socket.gethostname()
