"""The fast path: run a `xce <group> <command>` without building the Typer tree.

Why: Typer (0.29) coerces every parameter through a pydantic TypeAdapter, so parsing one
command costs importing pydantic and building adapters, several times Python's own start-up
(issue 18). Users and their scripts run `xce job submit|list|show` in loops, so those must
start about as fast as `sbatch`.

How, without a second definition of any option: the group's Typer app already holds each
command's function and its `typer.Option`/`typer.Argument` defaults; this module reads them
(the function's own defaults and annotations; no Typer machinery, not even `inspect`) into an
`argparse` parser and calls the same function with the parsed values. Anything it is not
sure about -- `--help`, shell completion, an unknown option, a type or parameter feature it
does not translate (callbacks, prompts, ranges, enums...) -- is not an error here: `try_run`
returns False and the full Typer path handles the command exactly as before. So the fast
path can only be faster, never different.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

_SCALARS: dict[str, Any] = {"str": str, "int": int, "float": float, "Path": Path}
# ParameterInfo features this translation does not carry: their presence means "use Typer".
_UNSUPPORTED = ("callback", "envvar", "prompt", "is_eager", "parser", "click_type", "min",
                "max", "count", "exists", "resolve_path", "default_factory", "formats")


class _Fallback(Exception):
    """This command line is for the full Typer path."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # never print or exit: let Typer report it
        raise _Fallback(message)


def try_run(args: list[str], groups: dict[str, tuple[str, str, str]]) -> bool:
    """Run `args` (`group command ...`) if this module can do it exactly; else False."""
    if len(args) < 2 or args[0] not in groups or args[1].startswith("-"):
        return False
    if "-h" in args or "--help" in args or any(k.endswith("_COMPLETE") for k in os.environ):
        return False
    import importlib

    module, attr, _ = groups[args[0]]
    app = getattr(importlib.import_module(module), attr)
    callback = _command(app, args[1])
    if callback is None:
        return False
    try:
        parser, converters = _parser(callback)
        values = vars(parser.parse_args(args[2:]))
    except _Fallback:
        return False
    for name, convert in converters.items():
        values[name] = convert(values[name])
    import typer

    try:
        callback(**values)
    except typer.Exit as exc:
        if exc.exit_code:
            raise SystemExit(exc.exit_code) from None
    return True


def _command(app: Any, name: str) -> Any:
    for info in getattr(app, "registered_commands", []):
        callback = info.callback
        if callback is None:
            continue
        if (info.name or callback.__name__.replace("_", "-")) == name:
            return callback
    return None


def _parser(callback: Any) -> tuple[_Parser, dict[str, Any]]:
    """An argparse parser equivalent to the Typer command, and per-parameter converters
    that turn argparse's values into what the function expects."""
    from typer.models import ArgumentInfo, OptionInfo

    parser = _Parser(add_help=False, allow_abbrev=False, prog="xce")
    converters: dict[str, Any] = {}
    plain = {OptionInfo: OptionInfo(), ArgumentInfo: ArgumentInfo()}
    for name, info in _parameters(callback):
        annotation = str(callback.__annotations__.get(name, ""))
        is_list = annotation.startswith("list[")
        kind = _SCALARS.get(annotation[5:-1] if is_list else annotation)
        if annotation == "bool" and isinstance(info, OptionInfo):
            kind = bool
        if kind is None:
            raise _Fallback(f"{name}: {annotation}")
        if isinstance(info, OptionInfo | ArgumentInfo):
            for feature in _UNSUPPORTED:
                if getattr(info, feature, None) != getattr(plain[type(info)], feature, None):
                    raise _Fallback(f"{name}: {feature}")
        if isinstance(info, OptionInfo):
            _add_option(parser, converters, name, info, kind, is_list)
        elif isinstance(info, ArgumentInfo) or info is _NO_DEFAULT:
            default = info.default if isinstance(info, ArgumentInfo) else ...
            if kind is bool:
                raise _Fallback(name)
            if is_list:
                parser.add_argument(name, type=kind, nargs="+" if default is ... else "*")
                converters[name] = (lambda v, d=default: list(v) if v else
                                    (None if d is ... else d))
            elif default is ...:
                parser.add_argument(name, type=kind)
            else:
                parser.add_argument(name, type=kind, nargs="?", default=default)
        else:
            raise _Fallback(name)
    return parser, converters


_NO_DEFAULT = object()


def _parameters(callback: Any) -> list[tuple[str, Any]]:
    """(name, default) of each parameter; `inspect` itself costs more than the command."""
    code = callback.__code__
    if code.co_kwonlyargcount or code.co_flags & 0x0C:  # *args / **kwargs / keyword-only
        raise _Fallback("signature")
    names = code.co_varnames[:code.co_argcount]
    defaults = callback.__defaults__ or ()
    missing = len(names) - len(defaults)
    return [(n, defaults[i - missing] if i >= missing else _NO_DEFAULT)
            for i, n in enumerate(names)]


def _add_option(parser: _Parser, converters: dict[str, Any], name: str, info: Any,
                kind: Any, is_list: bool) -> None:
    decls = list(info.param_decls or ()) or [f"--{name.replace('_', '-')}"]
    default = info.default
    if default is ...:
        raise _Fallback(f"{name}: required option")
    if kind is bool:
        on = [d for decl in decls for d in decl.split("/")[:1]]
        off = [decl.split("/")[1] for decl in decls if "/" in decl]
        if not off and default is not False:
            raise _Fallback(name)
        parser.add_argument(*on, dest=name, action="store_true", default=bool(default))
        if off:
            parser.add_argument(*off, dest=name, action="store_false")
        return
    if is_list:
        parser.add_argument(*decls, dest=name, type=kind, action="append", default=None)
        converters[name] = (lambda v, d=default: v if v is not None else
                            (list(d) if d is not None else None))
        return
    parser.add_argument(*decls, dest=name, type=kind, default=default)
