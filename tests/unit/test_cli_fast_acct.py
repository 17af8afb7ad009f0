"""`xce acct` and `xce report` take the CLI's fast path (top-level verbs, `FAST_VERBS`):
the same values as Typer would give, and neither asyncio nor aiohttp is loaded."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main

from tests.conftest import ISOLATION
from tests.unit.test_cli_fast import _fast_values
from xce.cli import fast
from xce.cli.main import FAST_VERBS, GROUPS, build_app

ROOT = Path(__file__).resolve().parents[2]


def _callback(verb: str) -> Any:
    module, function = FAST_VERBS[verb]
    return getattr(importlib.import_module(module), function)


@pytest.mark.parametrize(
    ("verb", "args"),
    [
        ("acct", []),
        ("acct", ["-u", "alice", "-S", "30d", "--format", "jobid,eligible,wait", "--json"]),
        ("acct", ["-j", "17[3]", "--submit-time", "--limit", "5", "--controller", "http://h:1"]),
        ("acct", ["-P", "-n", "--format", "jobid,state"]),
        ("acct", ["--parsable", "--noheader"]),
        ("report", []),
        ("report", ["-P", "-n", "--by", "queue"]),
        ("report", ["--by", "queue", "-S", "365d", "-E", "2026-12", "--json"]),
    ],
)
def test_fast_values_equal_typer_values(verb: str, args: list[str]) -> None:
    command = typer.main.get_command(build_app()).commands[verb]
    with command.make_context(verb, list(args)) as ctx:
        theirs = dict(ctx.params)
    mine = _fast_values(_callback(verb), args)
    for key, value in theirs.items():
        a, b = mine[key], value
        if isinstance(b, tuple | list) or isinstance(a, tuple | list):
            a, b = list(a or []), list(b or [])
        assert a == b, (key, mine[key], value)


def test_the_verbs_have_the_typer_options() -> None:
    for verb in FAST_VERBS:
        parser, _ = fast._parser(_callback(verb))
        mine = {s for a in parser._actions for s in a.option_strings}
        command = typer.main.get_command(build_app()).commands[verb]
        theirs = {
            s for p in command.params for s in (*p.opts, *p.secondary_opts) if s.startswith("-")
        } - {"--help"}
        assert mine == theirs, verb


def test_unsure_verb_lines_are_left_to_typer() -> None:
    assert fast.try_run(["acct", "--bogus"], GROUPS, FAST_VERBS) is False
    assert fast.try_run(["acct", "-h"], GROUPS, FAST_VERBS) is False
    assert fast.try_run(["login"], GROUPS, FAST_VERBS) is False


@pytest.mark.parametrize(
    "args", [["acct", "-u", "alice"], ["report", "--by", "user"], ["job", "eff", "3"]]
)
def test_accounting_commands_load_neither_asyncio_nor_aiohttp(args: list[str]) -> None:
    probe = (
        "import sys; from xce.cli.main import run\n"
        f"try:\n    run({args!r})\nexcept SystemExit as e:\n    code = e.code\n"
        "heavy = [m for m in ('asyncio', 'aiohttp', 'pydantic', 'xce.core.state') "
        "if m in sys.modules]\nprint(code, heavy, file=sys.stderr)"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "HOME": "/nonexistent",
        "XCE_CONTROLLERS": "http://127.0.0.1:9",
        **ISOLATION,
    }
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60
    )
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("xce: error: no controller answered"), result.stderr
    assert lines[-1] == "2 []", result.stderr


def test_verb_help_is_written_by_the_fast_path() -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": "/nonexistent", **ISOLATION}
    result = subprocess.run(
        [sys.executable, "-m", "xce", "acct", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0 and result.stdout.startswith("Usage: xce acct [OPTIONS]")
    assert "eligible" in result.stdout
