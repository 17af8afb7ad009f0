"""The CLI's fast path (xce/cli/fast.py) parses exactly as the Typer path does, or defers."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main

from tests.conftest import ISOLATION
from xce.cli import fast
from xce.cli.main import GROUPS, build_app

ROOT = Path(__file__).resolve().parents[2]


def _commands() -> list[tuple[str, str, Any]]:
    out = []
    for noun, (module, attr, _) in GROUPS.items():
        app = getattr(importlib.import_module(module), attr)
        for info in app.registered_commands:
            name = info.name or info.callback.__name__.replace("_", "-")
            out.append((noun, name, info.callback))
    return out


def _click(noun: str, name: str) -> Any:
    return typer.main.get_command(build_app(noun)).commands[noun].commands[name]


def _typer_values(noun: str, name: str, args: list[str]) -> dict[str, Any]:
    command = _click(noun, name)
    with command.make_context(name, list(args)) as ctx:
        values = dict(ctx.params)
    return values


def _fast_values(callback: Any, args: list[str]) -> dict[str, Any]:
    parser, converters = fast._parser(callback)
    values = vars(parser.parse_args(args))
    for key, convert in converters.items():
        values[key] = convert(values[key])
    return values


def test_most_commands_take_the_fast_path_with_the_same_option_names() -> None:
    taken = []
    for noun, name, callback in _commands():
        try:
            parser, _ = fast._parser(callback)
        except fast._Fallback:
            continue
        taken.append(f"{noun} {name}")
        mine = {s for a in parser._actions for s in a.option_strings}
        theirs = {
            s
            for p in _click(noun, name).params
            for s in (*p.opts, *p.secondary_opts)
            if s.startswith("-")
        } - {"--help"}
        assert mine == theirs, (noun, name)
    for hot in ("job submit", "job list", "job show", "host list", "job kill", "queue list"):
        assert hot in taken


CASES = [
    ("job", "submit", ["-n", "2", "-J", "x", "--env", "A=1", "--env", "B=2", "sleep", "1"]),
    ("job", "submit", ["sleep", "10", "-q", "short", "--hold", "-W", "1:00"]),
    ("job", "submit", ["--script", "run.sh", "--mem", "100", "--json"]),
    ("job", "submit", ["--", "ls", "-l"]),
    ("job", "list", []),
    ("job", "list", ["-s", "PEND,RUN", "--limit", "5", "--json", "-u", "alice"]),
    ("job", "list", ["-u", "all", "--format", "%.18i %.9P %.8j", "--noheader"]),
    ("job", "list", ["-o", "id,user,name:20", "--parsable", "--user", "all"]),
    ("job", "show", ["17[3]", "--json"]),
    ("job", "kill", ["1", "2", "3"]),
    ("job", "wait", ["4", "--timeout", "2.5"]),
    ("host", "list", ["--controller", "http://127.0.0.1:1", "--controller", "http://[::1]:2"]),
    ("host", "close", ["h1", "-r", "disk"]),
]


@pytest.mark.parametrize(("noun", "name", "args"), CASES)
def test_fast_values_equal_typer_values(noun: str, name: str, args: list[str]) -> None:
    callback = next(cb for n, c, cb in _commands() if (n, c) == (noun, name))
    mine = _fast_values(callback, args)
    theirs = _typer_values(noun, name, args)
    for key, value in theirs.items():
        a, b = mine[key], value
        if isinstance(b, tuple | list) or isinstance(a, tuple | list):
            a, b = list(a or []), list(b or [])
        assert a == b, (key, mine[key], value)


@pytest.mark.parametrize(
    "args",
    [
        ["job", "list", "-h"],
        ["job", "list", "--bogus"],
        ["job", "list", "--limit", "x"],
        ["job", "submit", "ls", "-l"],
        ["job", "nosuch"],
        ["login"],
        ["job"],
    ],
)
def test_anything_unsure_is_left_to_typer(args: list[str]) -> None:
    assert fast.try_run(args, GROUPS) is False


def _xce(*args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "HOME": "/nonexistent",
        "XCE_CONTROLLERS": "http://127.0.0.1:9",
        **ISOLATION,
    }
    return subprocess.run(
        [sys.executable, "-m", "xce", *args], capture_output=True, text=True, env=env, timeout=60
    )


def test_usage_errors_are_one_line_with_exit_2() -> None:
    for args in (["job", "list", "--bogus"], ["job", "list", "--limit", "x"], ["nosuch"]):
        result = _xce(*args)
        assert result.returncode == 2, result
        assert result.stderr.count("\n") == 1 and result.stderr.startswith("xce: error: "), (
            result.stderr
        )
    unreachable = _xce("job", "list")
    assert unreachable.returncode == 2 and unreachable.stderr.startswith(
        "xce: error: no controller answered"
    )


def test_help_keeps_brackets_and_needs_no_rich() -> None:
    for args in (["job", "submit", "--help"], ["job", "--help"], ["--help"]):
        result = _xce(*args)
        assert result.returncode == 0, result.stderr
        assert "╭" not in result.stdout
    fast_help = _xce("job", "submit", "--help").stdout
    assert "LOCAL[:JOBPATH]" in fast_help and "select[mem>4000]" in fast_help
    assert "-o, --output <str>" in fast_help and "--input" not in fast_help  # hidden
    assert "[default: 1]" in fast_help


def test_fast_help_names_every_option_typer_shows(capsys: pytest.CaptureFixture[str]) -> None:
    for noun, name, callback in _commands():
        try:
            text = fast.help_text(f"xce {noun} {name}", callback)
        except fast._Fallback:
            continue
        for param in _click(noun, name).params:
            if getattr(param, "hidden", False):
                continue
            for opt in param.opts:
                assert opt in text, (noun, name, opt)


def test_each_group_alone_has_the_commands_of_the_whole_tree() -> None:
    whole = typer.main.get_command(build_app())
    for noun in GROUPS:
        alone = typer.main.get_command(build_app(noun)).commands[noun]
        assert set(alone.commands) == set(whole.commands[noun].commands), noun


def test_the_whole_tree_loads_neither_asyncio_nor_the_cluster_state() -> None:
    """Building the whole tree (`xce job --help` and shell completion build parts of it)
    imports every group's module: none may pull the event loop or the core (they doubled
    its start-up)."""
    probe = (
        "import sys, typer.main; from xce.cli.main import build_app\n"
        "typer.main.get_command(build_app())\n"
        "heavy = [m for m in ('asyncio', 'xce.core.state', 'aiohttp', 'textual') "
        "if m in sys.modules]\nprint(heavy, file=sys.stderr)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert result.stderr.strip().splitlines()[-1] == "[]", result.stderr


def _run_probe(args: list[str], modules: tuple[str, ...]) -> tuple[str, list[str]]:
    """`xce ARGS` in a fresh interpreter: its stdout, and which of `modules` it imported."""
    probe = (
        "import sys; from xce.cli.main import run\n"
        f"try:\n    run({args!r})\nexcept SystemExit:\n    pass\n"
        f"print([m for m in {modules!r} if m in sys.modules], file=sys.stderr)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    return result.stdout, ast.literal_eval(result.stderr.strip().splitlines()[-1])


def test_the_root_help_is_the_whole_trees_without_loading_the_groups() -> None:
    """`xce --help` shows each group's name and line only: it builds stand-ins from
    GROUPS, and the page is the one the whole tree prints."""
    groups = tuple(module for module, _, _ in GROUPS.values() if module != "xce.cli.init")
    text, loaded = _run_probe(["--help"], groups)
    assert loaded == []
    whole = subprocess.run(
        [
            sys.executable,
            "-c",
            "import typer.main; from xce.cli.main import build_app\n"
            "typer.main.get_command(build_app()).main(['--help'], prog_name='xce')",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    ).stdout
    assert text == whole and "job " in text and "compat " in text


def test_a_plain_submit_loads_no_dialect_tables_and_no_listing_layouts() -> None:
    """`xce job submit CMD` (no script) needs neither the #SBATCH/#BSUB tables nor the
    listing layouts `xce job eff`'s module used to import at load."""
    _, loaded = _run_probe(
        ["job", "submit", "--controller", "http://127.0.0.1:1", "true"],
        ("xce.cli.directives.lsf", "xce.cli.directives.slurm", "xce.cli.fields"),
    )
    assert loaded == []
