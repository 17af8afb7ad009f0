"""What every familiar command shares: running one (`main`), its one-line errors, its
argument parser, and the calls to the controller.

Why not Typer: these commands are started by scripts in loops, like `xce job list`, and
their options are the real tools' (single-dash `-noheader`, `-h` meaning "no header" in
squeue), which Typer cannot spell. So each tool parses with `argparse` (`Parser`), calls the
controller with the light client through `xce.cli.common.call_light` (the same settings,
token and error words as every other command), and prints with `formats`. Errors are one
line, `TOOL: error: ...`, never a traceback: an option XCE does not cover names itself and
the page that lists what is covered.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NoReturn, TypeVar

from xce.cli.compat import TOOLS
from xce.cli.compat.formats import DOC

T = TypeVar("T")


class Usage(Exception):
    """A usage error: `TOOL: error: MESSAGE`, exit 2."""


class Failure(Exception):
    """A command that could not do what it was asked: `TOOL: error: MESSAGE`, exit 1."""


class Done(Exception):
    """Stop with this exit code (after --help)."""

    def __init__(self, code: int = 0) -> None:
        super().__init__(code)
        self.code = code


def main(tool: str, args: list[str]) -> int:
    """Run `tool` with `args`; the exit code. Every error is one line on stderr."""
    if tool not in TOOLS:
        sys.stderr.write(f"xce: error: {tool!r} is not a familiar command XCE covers ({DOC})\n")
        return 2
    module = importlib.import_module(TOOLS[tool][0])
    run: Callable[[list[str]], int | None] = getattr(module, tool)
    try:
        return run(args) or 0
    except Usage as exc:
        sys.stderr.write(f"{tool}: error: {exc}\n")
        return 2
    except Failure as exc:
        sys.stderr.write(f"{tool}: error: {exc}\n")
        return 1
    except Done as exc:
        return exc.code
    except BrokenPipeError:  # `squeue | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        import typer  # already loaded by the shared code that raised it

        if isinstance(exc, typer.Exit):  # `fail()` wrote its one line (`xce: error: ...`)
            return int(exc.exit_code)
        raise


class Parser(argparse.ArgumentParser):
    """argparse that never prints usage or exits: its errors become `Usage`, an unknown
    option is named with the page that lists what XCE covers, `--help` is handled here
    (some tools use `-h` for something else)."""

    def __init__(self, tool: str, summary: str) -> None:
        super().__init__(prog=tool, add_help=False, allow_abbrev=False, description=summary)
        self.tool = tool

    def error(self, message: str) -> NoReturn:
        prefix = "unrecognized arguments: "
        if message.startswith(prefix):
            word = message[len(prefix) :].split()[0]
            if word.startswith("-"):
                raise Usage(
                    f"option {word.split('=')[0]} is not covered by XCE's {self.tool} (see {DOC})"
                )
            raise Usage(f"unexpected argument {word!r}")
        raise Usage(message)

    def parse(self, args: Sequence[str]) -> argparse.Namespace:
        if "--help" in args[: args.index("--") if "--" in args else len(args)]:
            sys.stdout.write(self.format_help() + f"\nWhat XCE covers and what not: {DOC}\n")
            raise Done(0)
        return self.parse_args(list(args))


def call(fn: Callable[[Any], T]) -> T:
    """`fn(client)` with the light client and the CLI's settings (`XCE_CONTROLLERS`,
    `XCE_TOKEN`, client.toml); a controller error is one line and exit 1 (2 unreachable)."""
    from xce.cli.common import call_light

    return call_light(fn)


def list_jobs(
    client: Any, states: Iterable[str] | None = None, **filters: Any
) -> list[dict[str, Any]]:
    """Every job row the filters select (all pages), oldest first as the API lists them."""
    rows: list[dict[str, Any]] = []
    state = ",".join(sorted(states)) if states is not None else None
    if states is not None and not state:
        return rows
    while True:
        page = client.jobs(state=state, limit=100_000, offset=len(rows), **filters)
        rows += page["jobs"]
        if not page["jobs"] or len(rows) >= page["total"]:
            return rows


def me(client: Any) -> str:
    """The user of the token: "my jobs" for bjobs and sacct, as the real tools mean the
    user who runs them."""
    return str(client.request("GET", "/api/v1/auth/whoami")["user"])


def split_list(values: Iterable[str] | None) -> list[str]:
    """`-u a,b -u c` -> [a, b, c]."""
    return [v.strip() for text in values or () for v in text.split(",") if v.strip()]


def write(lines: Iterable[str]) -> None:
    text = "\n".join(lines)
    if text:
        sys.stdout.write(text + "\n")


def warn(tool: str, message: str) -> None:
    sys.stderr.write(f"{tool}: warning: {message}\n")
