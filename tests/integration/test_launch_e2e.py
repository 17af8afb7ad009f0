"""`xce launch` with real processes: a controller and three workers on
127.0.0.1, each with its task service. A 6-slot `span[ptile=2]` job launches one task per
slot, 2 per host, inside that host's cgroup for the job; kill ends them on every host; the
launch credential works for its own attempt's hosts only, and only while it runs."""

from __future__ import annotations

import json
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil

from tests.integration.cluster import Cluster
from tests.integration.conftest import THREE_HOSTS
from xce.cli.launch import Refused, open_task
from xce.worker.tasks.wire import EXIT, HEADER, STDIN, STDOUT

HOSTS = THREE_HOSTS


def _output(c: Cluster, job_id: str) -> tuple[dict[str, Any], str, str]:
    job = c.wait_state(job_id, "DONE", "EXIT", timeout=90)
    return job, c.download(job_id, "stdout").decode(), c.download(job_id, "stderr").decode()


def test_launch_runs_one_task_per_slot_in_each_hosts_cgroup(three: Cluster) -> None:
    script = (
        "xce launch -l -- sh -c 'echo task=$XCE_TASK_ID local=$XCE_LOCAL_TASK_ID "
        'host=$XCE_EXEC_HOST job=$XCE_JOB_ID; grep -o "xce-[^/]*/[^/]*" '
        "/proc/self/cgroup | sort -u | head -1'; echo status=$?; "
        'cat "$XCE_HOSTFILE"; command -v xce'
    )
    job_id = three.submit(command=script, slots=6, resources="span[ptile=2]")
    job, out, err = _output(three, job_id)
    assert job["state"] == "DONE", (job, out, err)
    lines = out.splitlines()
    tasks = sorted(line for line in lines if "task=" in line)
    attempt = job["attempt"]
    expected = [f"{i}: task={i} local={i % 2} host={HOSTS[i // 2]} job={job_id}" for i in range(6)]
    assert tasks == expected, out
    # each task sits in its host's cgroup for the job: the job's own on the first host,
    # the share on the others
    groups = {}
    for line in lines:
        head, _, rest = line.partition(": ")
        if rest.startswith("xce-"):
            groups[int(head)] = rest
    assert len(groups) == 6, out
    for i, group in groups.items():
        host = HOSTS[i // 2]
        name = f"{job_id}.{attempt}" + ("" if host == "w1" else ".share")
        assert group.startswith(f"xce-{host}-") and group.endswith("/" + name), (i, group)
    assert "status=0" in lines
    hostfile = [x for x in lines if x.split(" ")[0] in HOSTS]
    assert hostfile == ["w1 2", "w2 2", "w3 2"], out
    # the worker's own xce is first on the job's PATH
    assert lines[-1].endswith("/.xce-bin/xce") and "w1" in lines[-1], lines[-1]


def test_options_choose_tasks_and_the_worst_status_wins(three: Cluster) -> None:
    script = (
        "xce launch -n 3 -- sh -c 'echo n$XCE_TASK_ID@$XCE_EXEC_HOST'; "
        "xce launch --per-host 1 -- sh -c 'echo q$XCE_TASK_ID@$XCE_EXEC_HOST'; "
        "xce launch --host w3 -- sh -c 'echo h$XCE_TASK_ID@$XCE_EXEC_HOST'; "
        "echo piped | xce launch w2 'cat; echo rsh@$XCE_EXEC_HOST'; "
        "xce launch --host w9 -- true; echo bad=$?; "
        "xce launch -- sh -c 'exit $XCE_TASK_ID'"
    )
    job_id = three.submit(command=script, slots=6, resources="span[ptile=2]")
    job, out, err = _output(three, job_id)
    assert job["state"] == "EXIT" and job["exit_code"] == 5, (job, out, err)
    lines = out.splitlines()
    assert sorted(x for x in lines if x.startswith("n")) == ["n0@w1", "n1@w1", "n2@w2"]
    assert sorted(x for x in lines if x.startswith("q")) == ["q0@w1", "q1@w2", "q2@w3"]
    assert sorted(x for x in lines if x.startswith("h")) == ["h0@w3", "h1@w3"]
    assert "piped" in lines and "rsh@w2" in lines
    assert "bad=255" in lines and "host w9 is not in this job's allocation" in err


def _sleepers(tag: str) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", tag]]


def test_kill_ends_the_tasks_on_every_host(three: Cluster) -> None:
    job_id = three.submit(command="xce launch -- sleep 171.5", slots=6, resources="span[ptile=2]")
    three.wait_state(job_id, "RUN", timeout=60)
    three.wait_for(lambda: len(_sleepers("171.5")) == 6, 60, "six tasks")
    users = {p.username() for p in _sleepers("171.5")}
    assert users == {"root"}  # the job's user (the harness submits as root)
    three.control(job_id, "kill")
    three.wait_state(job_id, "EXIT", timeout=60)
    three.wait_for(lambda: not _sleepers("171.5"), 60, "every task ended")


# --- the credential, played by hostile code -----------------------------------------------


HELLO_KEYS = ("job_id", "attempt", "credential", "host")


def _call(address: str, request: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """One task as `xce launch` runs it: the hello proves `credential` for the attempt, the
    rest of `request` is the request. The refusal of the hello is an exit like any other."""
    host, _, port = address.rpartition(":")
    hello = [request[k] for k in HELLO_KEYS]
    try:
        sock, session = open_task((host, int(port)), *hello)
    except Refused as exc:
        return "", exc.body
    with sock:
        rest = {k: v for k, v in request.items() if k not in HELLO_KEYS}
        sock.sendall(session.request_frame(rest) + session.seal(STDIN, b""))
        reader = sock.makefile("rb")
        out = b""
        while True:
            head = reader.read(HEADER.size)
            assert len(head) == HEADER.size, "connection closed without an exit"
            channel, length = HEADER.unpack(head)
            data = session.open(channel, reader.read(length))
            if channel == EXIT:
                return out.decode(), json.loads(data)
            if channel == STDOUT:
                out += data


def _job_env(three: Cluster, tag: str, slots: int) -> tuple[str, dict[str, str]]:
    env_file = three.jobs_root / f"{tag}.env"
    job_id = three.submit(
        command=f"env > {env_file}.tmp; mv {env_file}.tmp {env_file}; sleep 60",
        slots=slots,
        resources="span[ptile=2]",
    )
    three.wait_for(env_file.exists, 60, f"job {tag}'s environment")
    env = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
    return job_id, env


def test_the_launch_credential_works_only_for_its_attempt_hosts_while_it_runs(
    three: Cluster,
) -> None:
    a_id, a = _job_env(three, "a", 4)  # two hosts
    b_id, b = _job_env(three, "b", 6)  # all three
    tasks = dict(item.split("=", 1) for item in a["XCE_LAUNCH_TASKS"].split(","))
    tasks_b = dict(item.split("=", 1) for item in b["XCE_LAUNCH_TASKS"].split(","))
    a_hosts = a["XCE_NODELIST"].split(",")
    assert len(a_hosts) == 2 and set(tasks) == set(a_hosts)
    everyone = {**tasks_b, **tasks}
    assert set(everyone) == set(HOSTS), everyone
    outside = next(h for h in HOSTS if h not in a_hosts)
    req: dict[str, Any] = {
        "job_id": a_id,
        "attempt": int(a["XCE_ATTEMPT"]),
        "credential": a["XCE_LAUNCH_CRED"],
        "argv": ["sh", "-c", "echo ok $XCE_EXEC_HOST"],
        "env": {"PATH": "/usr/bin:/bin"},
        "task_id": 0,
        "local_task_id": 0,
    }
    # the real thing works on each of the attempt's hosts (so the refusals below can fail)
    for host in a_hosts:
        assert _call(tasks[host], {**req, "host": host}) == (
            f"ok {host}\n",
            {"exit_code": 0, "signal": None, "error": ""},
        )
    second = a_hosts[1]
    shared = a_hosts[0]  # B runs there too
    refused = {
        # another job's credential, and a made-up one
        "other job's": (tasks[second], {**req, "host": second, "credential": b["XCE_LAUNCH_CRED"]}),
        "made up": (tasks[second], {**req, "host": second, "credential": "0" * 64}),
        # A's credential for job B, which runs on that host too
        "for job B": (
            tasks[shared],
            {**req, "job_id": b_id, "host": shared, "attempt": int(b["XCE_ATTEMPT"])},
        ),
        # a host outside A's allocation knows no such attempt
        "outside": (everyone[outside], {**req, "host": outside}),
        "wrong attempt": (tasks[second], {**req, "host": second, "attempt": req["attempt"] + 1}),
    }
    with ThreadPoolExecutor(len(refused)) as pool:  # each is answered after the same wait
        answers = dict(
            zip(refused, pool.map(lambda c: _call(*c)[1], refused.values()), strict=True)
        )
    # one answer for all: it does not say which attempts run on the host
    words = {name: answer["error"] for name, answer in answers.items()}
    assert all(a["exit_code"] is None for a in answers.values()), answers
    assert words["other job's"] == words["made up"] == words["wrong attempt"], words
    assert words["other job's"].startswith(f"host {second} refused the launch"), words
    assert words["for job B"].replace(shared, second) == words["other job's"], words
    assert words["outside"].replace(outside, second) == words["other job's"], words
    # the wrong host name, bad requests
    _, answer = _call(tasks[second], {**req, "host": outside})
    assert answer["error"] == f"this is host {second}, not {outside}"
    _, answer = _call(tasks[second], {**req, "host": second, "argv": []})
    assert "argv must be" in answer["error"]
    _, answer = _call(tasks[second], {**req, "host": second, "env": {"A=B": "x"}})
    assert "bad variable name" in answer["error"]
    _, answer = _call(tasks[second], {**req, "host": second, "extra": 1})
    assert "keys" in answer["error"]
    # after the job ends, its credential is worth nothing anywhere
    three.control(a_id, "kill")
    three.wait_state(a_id, "EXIT", timeout=60)
    for host in a_hosts:
        deadline = time.monotonic() + 30
        while True:  # the host learns of the end at its next poll
            _, answer = _call(tasks[host], {**req, "host": host})
            if "refused the launch" in answer["error"] or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert "refused the launch" in answer["error"], (host, answer)
    three.control(b_id, "kill")


def test_a_lost_host_ends_the_job_and_its_tasks_everywhere(three: Cluster) -> None:
    """With tasks: `kill -9` of a worker that is not the job's first
    ends the whole job with the reason naming it, and no task survives on any host, the
    lost one included (its share's fence watcher kills them once the fence runs out)."""
    job_id = three.submit(
        command="xce launch -- sleep 183.5", slots=6, resources="span[ptile=2]", queue="fragile"
    )  # on_host_failure=exit
    three.wait_state(job_id, "RUN", timeout=60)
    three.wait_for(lambda: len(_sleepers("183.5")) == 6, 60, "six tasks")
    three.kill_worker("w3", signal.SIGKILL)
    job = three.wait_state(job_id, "EXIT", timeout=90)
    assert job["reason"] == "host w3 became unavailable", job
    three.wait_for(lambda: not _sleepers("183.5"), 60, "every task ended, w3's too")


def _freezer_state(pid: int) -> str:
    """The freezer state of the v1 cgroup `pid` is in ("n/a" without a freezer hierarchy)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "freezer" in controllers.split(","):
            return (Path("/sys/fs/cgroup/freezer" + path) / "freezer.state").read_text().strip()
    return "n/a"


def test_suspend_and_resume_reach_the_tasks_on_every_host(three: Cluster) -> None:
    job_id = three.submit(command="xce launch -- sleep 191.5", slots=6, resources="span[ptile=2]")
    three.wait_state(job_id, "RUN", timeout=60)
    three.wait_for(lambda: len(_sleepers("191.5")) == 6, 60, "six tasks")
    pids = [p.pid for p in _sleepers("191.5")]
    v1 = Path("/sys/fs/cgroup/freezer").is_dir()  # else the states read "n/a"
    frozen, thawed = ("FROZEN", "THAWED") if v1 else ("n/a", "n/a")
    three.control(job_id, "stop")
    three.wait_for(lambda: all(_freezer_state(p) == frozen for p in pids), 30, "every task frozen")
    three.control(job_id, "resume")
    three.wait_for(lambda: all(_freezer_state(p) == thawed for p in pids), 30, "every task thawed")
    assert len(_sleepers("191.5")) == 6
    three.control(job_id, "kill")
    three.wait_for(lambda: not _sleepers("191.5"), 60, "every task ended")


def test_tasks_run_as_the_jobs_user_whatever_the_request_says(three: Cluster) -> None:
    """A job of an ordinary user: its tasks on every host run as that user (never root),
    with the account's HOME, and the request cannot set XCE_EXEC_HOST or HOME."""
    import uuid

    from tests.integration.cluster import linux_users

    env_file = Path(f"/tmp/xce-launch-{uuid.uuid4().hex}.env")
    with linux_users("xcelaunch1"):
        job_id = three.submit(
            command=f"env > {env_file}.tmp; mv {env_file}.tmp {env_file}; sleep 60",
            slots=4,
            resources="span[ptile=2]",
            user="xcelaunch1",
        )
        try:
            three.wait_for(env_file.exists, 60, "the job's environment")
            env = dict(
                line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line
            )
            tasks = dict(item.split("=", 1) for item in env["XCE_LAUNCH_TASKS"].split(","))
            assert len(tasks) == 2
            req = {
                "job_id": job_id,
                "attempt": int(env["XCE_ATTEMPT"]),
                "credential": env["XCE_LAUNCH_CRED"],
                "task_id": 0,
                "local_task_id": 0,
                "argv": ["sh", "-c", "id -un; echo $HOME $XCE_EXEC_HOST"],
                "env": {"PATH": "/usr/bin:/bin", "HOME": "/root", "XCE_EXEC_HOST": "x"},
            }
            home = Path("~xcelaunch1").expanduser()
            for host, address in tasks.items():
                out, answer = _call(address, {**req, "host": host})
                assert answer == {"exit_code": 0, "signal": None, "error": ""}, answer
                assert out.splitlines() == ["xcelaunch1", f"{home} {host}"], out
        finally:
            three.control(job_id, "kill")
            three.wait_state(job_id, "EXIT", timeout=60)
            env_file.unlink(missing_ok=True)
