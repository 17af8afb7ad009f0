"""The fast path: run a `xce <group> <command>` without building the Typer tree.

Why: Typer (0.29) coerces every parameter through a pydantic TypeAdapter, so parsing one
command costs importing pydantic and building adapters, several times Python's own start-up.
Users and their scripts run `xce job submit|list|show` in loops, so those must
start about as fast as `sbatch`.

How, without a second definition of any option: the group's Typer app already holds each
command's function and its `typer.Option`/`typer.Argument` defaults; this module reads them
(the function's own defaults and annotations; no Typer machinery, not even `inspect`) into an
`argparse` parser and calls the same function with the parsed values; `--help` is written
from the same definitions in click's plain layout. Anything it is not sure about -- shell
completion, an unknown option, a type or parameter feature it
does not translate (callbacks, prompts, ranges, enums...) -- is not an error here: `try_run`
returns False and the full Typer path handles the command exactly as before. So the fast
path can only be faster, never different.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

_SCALARS: dict[str, Any] = {"str": str, "int": int, "float": float, "Path": Path}
# ParameterInfo features this translation does not carry: their presence means "use Typer".
_UNSUPPORTED = (
    "callback",
    "envvar",
    "prompt",
    "is_eager",
    "parser",
    "click_type",
    "min",
    "max",
    "count",
    "exists",
    "resolve_path",
    "default_factory",
    "formats",
)


class _Fallback(Exception):
    """This command line is for the full Typer path."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # never print or exit: let Typer report it
        raise _Fallback(message)


def try_run(
    args: list[str],
    groups: dict[str, tuple[str, str, str]],
    verbs: dict[str, tuple[str, str]] | None = None,
) -> bool:
    """Run `args` (`group command ...`, or `verb ...` for a top-level verb of `verbs`:
    verb -> (module, function)) if this module can do it exactly; else False."""
    if any(k.endswith("_COMPLETE") for k in os.environ):
        return False
    import importlib

    if args and verbs and args[0] in verbs:
        module, function = verbs[args[0]]
        callback = getattr(importlib.import_module(module), function)
        prog, rest = f"xce {args[0]}", args[1:]
    else:
        if len(args) < 2 or args[0] not in groups or args[1].startswith("-"):
            return False
        module, attr, _ = groups[args[0]]
        app = getattr(importlib.import_module(module), attr)
        callback = _command(app, args[1])
        prog, rest = f"xce {args[0]} {args[1]}", args[2:]
    if callback is None:
        return False
    if "--help" in rest:
        try:
            text = help_text(prog, callback)
        except _Fallback:
            return False
        sys.stdout.write(text)
        return True
    if "-h" in args:
        return False
    try:
        parser, converters = _parser(callback)
        values = vars(parser.parse_args(rest))
    except _Fallback:
        return False
    for name, convert in converters.items():
        values[name] = convert(values[name])
    import gc

    import typer

    gc.enable()  # xce/cli/main.py paused it for the start-up only
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


_PARSERS: dict[Any, tuple[_Parser, dict[str, Any]]] = {}


def _parser(callback: Any) -> tuple[_Parser, dict[str, Any]]:
    """An argparse parser equivalent to the Typer command, and per-parameter converters
    that turn argparse's values into what the function expects. Built once per command:
    `xce job submit` asks again for the options its command line named, and for each
    #XCE line."""
    if (made := _PARSERS.get(callback)) is None:
        made = _PARSERS[callback] = _build_parser(callback)
    return made


def _build_parser(callback: Any) -> tuple[_Parser, dict[str, Any]]:
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
                converters[name] = lambda v, d=default: list(v) if v else (None if d is ... else d)
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
    names = code.co_varnames[: code.co_argcount]
    defaults = callback.__defaults__ or ()
    missing = len(names) - len(defaults)
    return [
        (n, defaults[i - missing] if i >= missing else _NO_DEFAULT) for i, n in enumerate(names)
    ]


def _add_option(
    parser: _Parser, converters: dict[str, Any], name: str, info: Any, kind: Any, is_list: bool
) -> None:
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
        converters[name] = lambda v, d=default: (
            v if v is not None else (list(d) if d is not None else None)
        )
        return
    parser.add_argument(*decls, dest=name, type=kind, default=default)


def help_text(prog: str, callback: Any) -> str:
    """`--help` in click's plain layout, from the same defaults and docstring (Typer would
    build the command tree, and its pydantic adapters, only to print this)."""
    from typer.models import ArgumentInfo, OptionInfo

    _parser(callback)  # the same checks: what the fast path cannot parse, it does not describe
    usage, arguments, options = [prog, "[OPTIONS]"], [], []
    for name, info in _parameters(callback):
        annotation = str(callback.__annotations__.get(name, ""))
        if isinstance(info, OptionInfo):
            if info.hidden:
                continue
            decls = [
                d
                for decl in (info.param_decls or (f"--{name.replace('_', '-')}",))
                for d in decl.split("/")
            ]
            left = ", ".join(sorted(decls, key=lambda d: d.startswith("--")))
            if annotation != "bool":
                left += f" <{annotation}>"
            extra = ""
            if info.default not in (None, False, "", [], ...) and annotation != "bool":
                extra = f"[default: {info.default}]"
            options.append((left, " ".join(filter(None, [info.help, extra]))))
        else:
            required = not isinstance(info, ArgumentInfo) or info.default is ...
            many = "..." if annotation.startswith("list[") else ""
            usage.append(f"{{{name}}}{many}" if required else f"[{name}]{many}")
            help_ = getattr(info, "help", None) or ""
            arguments.append(
                (
                    f"{name}{many} <{annotation}>",
                    " ".join(filter(None, [help_, "[required]" if required else ""])),
                )
            )
    options.append(("--help", "Show this message and exit."))
    lines = ["Usage: " + " ".join(usage), ""]
    doc = textwrap.dedent("\n".join((callback.__doc__ or "").split("\n")[1:]))
    first = (callback.__doc__ or "").split("\n")[0].strip()
    for paragraph in "\n".join([first, doc]).strip().split("\n\n"):
        lines += [
            *textwrap.wrap(
                " ".join(paragraph.split()), 78, initial_indent="  ", subsequent_indent="  "
            ),
            "",
        ]
    for title, rows in (("Arguments", arguments), ("Options", options)):
        if not rows:
            continue
        width = min(max(len(left) for left, _ in rows) + 2, 30)
        lines.append(f"{title}:")
        for left, text in rows:
            wrapped = textwrap.wrap(text, max(78 - width - 2, 30)) or [""]
            if len(left) + 2 > width:
                lines.append(f"  {left}")
                lines += [" " * (width + 2) + w for w in wrapped if w]
            else:
                lines.append(f"  {left.ljust(width)}{wrapped[0]}".rstrip())
                lines += [" " * (width + 2) + w for w in wrapped[1:]]
        lines.append("")
    return "\n".join(lines[:-1]) + "\n"
