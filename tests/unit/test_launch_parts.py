"""The pure parts of `xce launch`: the task plan, the task service's request
checks, the credential, and the worker's `task_listen` setting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xce.cli.launch import LaunchFailed, Task, allocation, plan
from xce.controller.launchcred import credential
from xce.worker.tasks.request import Hello, TaskRefused, parse_hello, parse_request
from xce.worker.tasks.wire import HEADER, HELLO, hello_frame, proof

HOSTS = [("w1", 2), ("w2", 2), ("w3", 2)]


def test_the_plan_is_one_task_per_slot_in_allocation_order() -> None:
    assert plan(HOSTS, None, None, []) == [
        Task(0, 0, "w1"),
        Task(1, 1, "w1"),
        Task(2, 0, "w2"),
        Task(3, 1, "w2"),
        Task(4, 0, "w3"),
        Task(5, 1, "w3"),
    ]
    assert [t.host for t in plan(HOSTS, 3, None, [])] == ["w1", "w1", "w2"]
    assert [t.host for t in plan(HOSTS, None, 1, [])] == ["w1", "w2", "w3"]
    assert [(t.task_id, t.local_task_id, t.host) for t in plan(HOSTS, None, None, ["w3"])] == [
        (0, 0, "w3"),
        (1, 1, "w3"),
    ]
    with pytest.raises(LaunchFailed, match="host w9 is not in this job's allocation"):
        plan(HOSTS, None, None, ["w9"])


def test_the_allocation_comes_from_xce_hosts() -> None:
    assert allocation({"XCE_HOSTS": "w1 w1 w2 w2 w3 w3"}) == HOSTS
    assert allocation({"XCE_EXEC_HOST": "solo", "XCE_SLOTS": "3"}) == [("solo", 3)]


HELLO_OF_7 = Hello("7", 1, "w1", "f" * 64)


def _line(**over: object) -> bytes:
    body = {"argv": ["true"], "env": {"PATH": "/bin"}, "task_id": 0, "local_task_id": 0}
    body.update(over)
    return json.dumps(body).encode()


def _hello(**over: object) -> bytes:
    body = {"v": 2, "job_id": "7", "attempt": 1, "host": "w1", "proof": "0a" * 32}
    body.update(over)
    return json.dumps(body).encode()


def test_the_task_service_checks_every_field() -> None:
    req = parse_request(_line(), HELLO_OF_7)
    assert (req.argv, req.job_id, req.attempt, req.host) == (("true",), "7", 1, "w1")
    bad = [
        (b"not json", "JSON"),
        (_line(extra=1), "keys"),
        (_line(credential="c" * 64), "keys"),  # the credential travels no more
        (_line(argv=[]), "argv"),
        (_line(argv=["a\0b"]), "NUL"),
        (_line(argv=[""]), "empty"),
        (_line(env={"A=B": "x"}), "variable name"),
        (_line(env={"A": 1}), "variable A"),
        (_line(task_id="0"), "task_id"),
        (_line(argv="true"), "argv"),
    ]
    for line, word in bad:
        with pytest.raises(TaskRefused, match=word):
            parse_request(line, HELLO_OF_7)


def test_the_hello_is_checked_before_any_attempt_is_looked_at() -> None:
    assert parse_hello(_hello()) == Hello("7", 1, "w1", "0a" * 32)
    bad = [
        (b"[1]", "keys"),
        (_hello(v=1), "version 2"),
        (_hello(extra=1), "keys"),
        (_hello(credential="c" * 64), "keys"),
        (_hello(job_id="../x"), "job id"),
        (_hello(attempt=True), "attempt"),
        (_hello(attempt=-1), "attempt"),
        (_hello(proof="0A" * 32), "hexadecimal"),
        (_hello(proof="0a" * 31), "hexadecimal"),
        (_hello(proof=None), "proof"),
        (_hello(host=None), "host"),
    ]
    for data, word in bad:
        with pytest.raises(TaskRefused, match=word):
            parse_hello(data)


def test_the_proof_is_bound_to_the_nonce_the_attempt_and_the_host() -> None:
    """An eavesdropper sees the nonce and the proof: neither names the credential, and the
    proof is worth nothing for another connection's nonce, attempt or host."""
    cred, nonce = "c" * 64, b"n" * 32
    one = proof(cred, nonce, "7", 1, "w1")
    others = {
        proof(cred, b"m" * 32, "7", 1, "w1"),
        proof(cred, nonce, "8", 1, "w1"),
        proof(cred, nonce, "7", 2, "w1"),
        proof(cred, nonce, "7", 1, "w2"),
        proof("d" * 64, nonce, "7", 1, "w1"),
    }
    assert one == proof(cred, nonce, "7", 1, "w1") and one not in others and len(others) == 5
    wire = hello_frame(cred, nonce, "7", 1, "w1")
    channel, length = HEADER.unpack(wire[: HEADER.size])
    assert channel == HELLO and length == len(wire) - HEADER.size
    assert cred.encode() not in wire and parse_hello(wire[HEADER.size :]).proof == one


def test_credentials_differ_per_job_attempt_and_key() -> None:
    key = b"k" * 32
    one = credential(key, "7", 1)
    assert one == credential(key, "7", 1)
    assert (
        len({one, credential(key, "7", 2), credential(key, "8", 1), credential(b"j" * 32, "7", 1)})
        == 4
    )


def test_task_listen_is_host_and_port_with_zero_for_any(tmp_path: Path) -> None:
    from xce.config.loader import load_config
    from xce.core.errors import ConfigError

    path = tmp_path / "x.toml"
    path.write_text('[worker]\nname = "w"\ntask_listen = "127.0.0.2:0"\n')
    worker = load_config(path).worker
    assert (worker.task_host, worker.task_port) == ("127.0.0.2", 0)
    path.write_text('[worker]\nname = "w"\ntask_listen = "nowhere"\n')
    with pytest.raises(ConfigError, match=r"worker\.task_listen must be HOST:PORT"):
        load_config(path)


def test_the_command_line_outside_a_job_and_bad_options_are_one_line() -> None:
    import subprocess
    import sys

    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for args, code, text in (
        (["--", "true"], 1, "not inside an XCE job (XCE_JOB_ID is not set)"),
        (["-n", "0", "--", "true"], 2, "-n must be at least 1"),
        ([], 2, "usage: xce launch"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "xce", "launch", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == code, (args, done.stderr)
        assert done.stderr.count("\n") == 1 and text in done.stderr, done.stderr


def test_the_launch_key_lives_with_the_signing_keys_that_ha_replicates(tmp_path: Path) -> None:
    """A standby receives every file of the signing keys' folder (xce/ha/source.py), so a
    key kept there gives a new primary the same credentials for running jobs."""
    from xce.auth.keys import key_dir
    from xce.controller import launchcred

    folder = launchcred.key_folder(tmp_path)
    assert folder == key_dir(tmp_path)
    key = launchcred.load_key(folder)
    assert (folder / launchcred.KEY_FILE).read_bytes() == key
    assert (folder / launchcred.KEY_FILE).stat().st_mode & 0o077 == 0
    assert launchcred.load_key(folder) == key  # a restart (or the standby, given the file)
