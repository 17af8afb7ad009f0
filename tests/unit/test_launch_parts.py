"""The pure parts of `xce launch`: the task plan, the task service's request
checks, the credential, and the worker's `task_listen` setting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xce.cli.launch import LaunchFailed, Task, allocation, plan
from xce.controller.launchcred import credential
from xce.worker.tasks.request import Hello, TaskRefused, parse_hello, parse_request
from xce.worker.tasks.wire import (
    EXIT,
    HEADER,
    HELLO,
    SERVER_PROOF,
    STDIN,
    STDOUT,
    ClientHandshake,
    NotProven,
    Session,
    challenge_frame,
    hello_frame,
    proof,
    ready_frame,
    session_key,
)

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
    body = {
        "v": 3,
        "job_id": "7",
        "attempt": 1,
        "host": "w1",
        "nonce": "0b" * 32,
        "proof": "0a" * 32,
    }
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
    assert parse_hello(_hello()) == Hello("7", 1, "w1", "0a" * 32, b"\x0b" * 32)
    bad = [
        (b"[1]", "keys"),
        (_hello(v=2), "version 3"),
        (_hello(nonce="0b" * 31), "nonce"),
        (_hello(nonce=None), "nonce"),
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
    cred, nonce, mine = "c" * 64, b"n" * 32, b"o" * 32
    one = proof(cred, nonce + mine, "7", 1, "w1")
    others = {
        proof(cred, b"m" * 32 + mine, "7", 1, "w1"),
        proof(cred, nonce + b"p" * 32, "7", 1, "w1"),
        proof(cred, nonce + mine, "8", 1, "w1"),
        proof(cred, nonce + mine, "7", 2, "w1"),
        proof(cred, nonce + mine, "7", 1, "w2"),
        proof("d" * 64, nonce + mine, "7", 1, "w1"),
        # the server's proof for the same connection is another: a hello never passes as it
        proof(cred, nonce + mine, "7", 1, "w1", SERVER_PROOF),
    }
    assert one == proof(cred, nonce + mine, "7", 1, "w1")
    assert one not in others and len(others) == 7
    wire = hello_frame(cred, nonce, "7", 1, "w1", mine)
    channel, length = HEADER.unpack(wire[: HEADER.size])
    assert channel == HELLO and length == len(wire) - HEADER.size
    hello = parse_hello(wire[HEADER.size :])
    assert cred.encode() not in wire and hello.proof == one and hello.nonce == mine


def _sessions(cred: str = "c" * 64) -> tuple[Session, Session]:
    """A client's and a server's session of one handshake, made as each end makes its own."""
    client = ClientHandshake(cred, "7", 1, "w1")
    server_nonce = b"s" * 32
    hello = parse_hello(client.hello(challenge_frame(server_nonce)[HEADER.size :])[HEADER.size :])
    nonces = server_nonce + hello.nonce
    ready = ready_frame(cred, nonces, "7", 1, "w1")[HEADER.size :]
    server = Session(session_key(cred, nonces, "7", 1, "w1"), to_server=False)
    return client.session(ready), server


def test_a_server_that_does_not_prove_the_credential_gets_no_session() -> None:
    client = ClientHandshake("c" * 64, "7", 1, "w1")
    client.hello(challenge_frame(b"s" * 32)[HEADER.size :])
    for ready in (b"", b"{}", b'{"proof": "00"}', b"[" * 100000, b'{"proof": "\\u00e9"}'):
        with pytest.raises(NotProven):
            client.session(ready)
    # a proof for the right nonces with another credential, or one that ignores the client's
    for cred, nonces in (("d" * 64, b"s" * 32 + client.nonce), ("c" * 64, b"s" * 64)):
        with pytest.raises(NotProven):
            client.session(ready_frame(cred, nonces, "7", 1, "w1")[HEADER.size :])
    _sessions()  # and the right one is taken


def test_sealed_frames_cannot_be_forged_replayed_reordered_or_turned_back() -> None:
    client, server = _sessions()
    first, second = client.seal(STDIN, b"a"), client.seal(STDIN, b"b")
    assert server.open(STDIN, first[HEADER.size :]) == b"a"
    with pytest.raises(NotProven):  # replayed
        server.open(STDIN, first[HEADER.size :])
    assert server.open(STDIN, second[HEADER.size :]) == b"b"
    out = server.seal(STDOUT, b"x")
    with pytest.raises(NotProven):  # the server's own frame sent back to it
        server.open(STDOUT, out[HEADER.size :])
    with pytest.raises(NotProven):  # its channel changed on the way
        client.open(STDIN, out[HEADER.size :])
    assert client.open(STDOUT, out[HEADER.size :]) == b"x"
    forged = Session(b"k" * 32, to_server=False).exit_frame(0)
    with pytest.raises(NotProven):  # made without the session key
        client.open(EXIT, forged[HEADER.size :])
    with pytest.raises(NotProven):
        client.open(EXIT, b"")
    # another connection of the same attempt and credential has another key
    other_client, _ = _sessions()
    assert other_client.key != client.key


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
    """Usage errors exit 2; every other launch that cannot run exits 255 (like ssh's), in the
    rsh form OpenMPI starts its daemons with as much as in the other: 1 read as the daemon's
    own status."""
    import subprocess
    import sys

    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    job = {
        **env,
        "XCE_JOB_ID": "7",
        "XCE_ATTEMPT": "0",
        "XCE_LAUNCH_CRED": "c" * 64,
        "XCE_HOSTS": "w1 w1",
        "XCE_LAUNCH_TASKS": "w1=127.0.0.1:9",
    }
    for args, where, code, text in (
        (["--", "true"], env, 255, "not inside an XCE job (XCE_JOB_ID is not set)"),
        (["w1", "true"], env, 255, "not inside an XCE job (XCE_JOB_ID is not set)"),
        (["w9", "true"], job, 255, "host w9 is not in this job's allocation"),
        (["--host", "w9", "--", "true"], job, 255, "host w9 is not in this job's allocation"),
        (["w1"], job, 2, "usage: xce launch"),
        (["-n", "0", "--", "true"], env, 2, "-n must be at least 1"),
        ([], env, 2, "usage: xce launch"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "xce", "launch", *args],
            env=where,
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
