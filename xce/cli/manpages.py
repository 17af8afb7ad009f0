"""Man pages for `xce` and every subcommand, written from the command tree itself.

The pages are generated at build time (`packaging/build-manpages`, called by the binary and
AppImage builds) from the same click objects that print `--help`, so they cannot drift from
the options the executable accepts. One roff page per visible command: `xce.1`, `xce-job.1`,
`xce-job-submit.1`, ... Hidden commands and options are left out, as `--help` leaves them out.

    python -m xce.cli.manpages OUTDIR

The roff is written here rather than with click-man: typer 0.29 vendors its own click
(`typer._click`), whose objects click-man does not recognise, and a man page needs only a
few macros (`.TH .SH .PP .TP .IP .B`). The module lives under `xce.cli` because it walks the
CLI's tree and the import layers allow only `xce.cli` to import it; nothing at run time
imports this module, so it costs the executable nothing at start-up.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from typer._click.core import Command, Context, Parameter
from typer.core import TyperArgument, TyperGroup

MANUAL = "XCE Manual"
BULLETS = ("- ", "* ")
SECTION = "1"


@dataclass(frozen=True)
class Node:
    """One visible command with its context (for usage and help records) and its children."""

    ctx: Context
    children: tuple[str, ...]

    @property
    def command(self) -> Command:
        """The click command this page describes."""
        return self.ctx.command

    @property
    def page(self) -> str:
        """The page name: the command path joined by `-` (`xce job submit` -> `xce-job-submit`)."""
        return page_name(self.ctx.command_path)


def page_name(command_path: str) -> str:
    """`xce job submit` -> `xce-job-submit`: the name `man` looks the page up by."""
    return "-".join(command_path.split())


def full_tree() -> Command:
    """The whole `xce` command tree, every group and top-level verb loaded (not the lazy one)."""
    import typer.main

    from xce.cli.main import build_app

    return typer.main.get_command(build_app())


def walk(root: Command, name: str = "xce") -> Iterator[Node]:
    """Every visible command under `root`, parents before children, in `--help` order.

    Contexts are built without parsing, as click builds them for `--help`, so that usage
    lines and option records come out exactly as the executable prints them.
    """
    stack: list[Context] = [Context(root, info_name=name)]
    while stack:
        ctx = stack.pop(0)
        children: list[str] = []
        command = ctx.command
        if isinstance(command, TyperGroup):
            for sub_name in command.list_commands(ctx):
                sub = command.get_command(ctx, sub_name)
                if sub is None or sub.hidden:
                    continue
                children.append(sub_name)
        yield Node(ctx, tuple(children))
        group = command
        for sub_name in children:
            assert isinstance(group, TyperGroup)
            sub = group.get_command(ctx, sub_name)
            assert sub is not None
            stack.append(Context(sub, info_name=sub_name, parent=ctx))


# --- roff ------------------------------------------------------------------------------------


def escape(text: str) -> str:
    """Text as roff prints it literally.

    Backslashes become `\\e`, every `-` becomes `\\-` (so options are not hyphenated or
    turned into typographic dashes), non-ASCII characters become `\\[uXXXX]` (groff reads its
    input as Latin-1 unless preconv runs first), and a line starting with `.` or `'` is
    protected with `\\&` so it is not read as a request.
    """
    text = text.replace("\\", "\\e").replace("-", "\\-")
    text = "".join(ch if ord(ch) < 128 else f"\\[u{ord(ch):04X}]" for ch in text)
    return "\n".join(
        "\\&" + line if line.startswith((".", "'")) else line for line in text.split("\n")
    )


def prose(text: str) -> str:
    """Escaped running text, with break points after `,` and `/` inside words.

    Pages are not hyphenated (`.nh`: a split option or page name misleads), so a long list
    such as `jobid,jobname,user,...` needs places where a line may end.
    """
    return re.sub(r"([,/])(?=\S)", r"\1\\:", escape(text))


def bold(text: str) -> str:
    """Escaped text in bold (command names, option flags)."""
    return f"\\fB{escape(text)}\\fR"


def italic(text: str) -> str:
    """Escaped text in italics (metavars, what the user fills in)."""
    return f"\\fI{escape(text)}\\fR"


def paragraphs(text: str) -> list[str]:
    """Help text as roff paragraphs, the way click's `--help` lays it out.

    Blank lines separate paragraphs; lines within one are joined (roff fills them); a
    line starting with `- ` or `* ` starts a bullet (its paragraph may hold several); a
    paragraph starting with click's `\\b` marker keeps its line breaks.
    """
    out: list[str] = []
    for block in re.split(r"\n\s*\n", inspect.cleandoc(text).partition("\f")[0]):
        if not block.strip():
            continue
        if block.startswith("\b"):
            lines = [escape(line) or "\\&" for line in block[1:].strip("\n").split("\n")]
            out.append(".PP\n.nf\n" + "\n".join(lines) + "\n.fi")
            continue
        items: list[str] = []  # a paragraph, or the bullets of a list, one line each
        for line in (line.strip() for line in block.split("\n")):
            if line.startswith(BULLETS) or not items:
                items.append(line)
            else:
                items[-1] += " " + line
        for item in items:
            if item.startswith(BULLETS):
                out.append(".IP \\(bu 2\n" + prose(item[2:].lstrip()))
            else:
                out.append(".PP\n" + prose(item))
    return out


def _term(record: str, argument: bool) -> str:
    """The `.TP` tag of an option or argument: flags (or the argument's name) in bold, the
    metavar in italics, separators as they are."""
    parts: list[str] = []
    for index, token in enumerate(re.split(r"(, | / | )", record)):
        if token in (", ", " / ", " ", ""):
            parts.append(escape(token))
        elif token.startswith("-") or (argument and index == 0):
            parts.append(bold(token))
        else:
            parts.append(italic(token))
    return "".join(parts)


def _records(ctx: Context, params: list[Parameter]) -> list[str]:
    lines: list[str] = []
    for param in params:
        if getattr(param, "hidden", False):
            continue
        record = param.get_help_record(ctx)
        if record is None:
            continue
        term, help_text = record
        lines.append(".TP\n" + _term(term, isinstance(param, TyperArgument)))
        lines.append(prose(" ".join(help_text.split())) if help_text.strip() else "\\&")
    return lines


_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)\.(?=\s|$)")


def short_help(command: Command) -> str:
    """The one-line summary for NAME (what `whatis` and `apropos` show) and the COMMANDS list.

    The command's own short help when it has one, else the first sentence of its help: the
    first paragraph can run to several lines, too long for a NAME line.
    """
    text = command.short_help or (command.help or "").partition("\n\n")[0]
    text = " ".join(inspect.cleandoc(text).split())
    end = _SENTENCE_END.search(text)
    if end is not None and not command.short_help:
        text = text[: end.end()]
    if command.deprecated:
        text = f"{text} (deprecated)".strip()
    return text


def render(node: Node, version: str, date: str = "") -> str:
    """One man page in roff (man macros)."""
    ctx, command = node.ctx, node.command
    path = ctx.command_path
    title = escape(node.page.upper())
    summary = short_help(command) or path
    lines = [
        f'.\\" {node.page}.{SECTION}: generated by `python -m xce.cli.manpages` from the xce',
        '.\\" command definitions; change those (or the generator), not this file.',
        f'.TH "{title}" "{SECTION}" "{date}" "{escape("xce " + version)}" "{MANUAL}"',
        # No hyphenation, ragged right: option names and page names must not be split.
        ".nh",
        ".ad l",
        ".SH NAME",
        f"{escape(node.page)} \\- {prose(summary)}",
        ".SH SYNOPSIS",
        f".B {escape(path)}",
        escape(" ".join(command.collect_usage_pieces(ctx))) or "\\&",
        ".SH DESCRIPTION",
    ]
    lines += paragraphs(command.help or summary)
    if command.epilog:
        lines += paragraphs(command.epilog)
    if node.children:
        assert isinstance(command, TyperGroup)
        lines.append(".SH COMMANDS")
        for name in node.children:
            sub = command.get_command(ctx, name)
            assert sub is not None
            lines.append(".TP\n" + bold(name))
            lines.append(prose(short_help(sub)) or "\\&")
    params = command.get_params(ctx)
    arguments = _records(ctx, [p for p in params if isinstance(p, TyperArgument)])
    if arguments:
        lines += [".SH ARGUMENTS", *arguments]
    options = _records(ctx, [p for p in params if not isinstance(p, TyperArgument)])
    if options:
        lines += [".SH OPTIONS", *options]
    related = [page_name(ctx.parent.command_path)] if ctx.parent is not None else []
    related += [page_name(f"{path} {name}") for name in node.children]
    if related:
        lines.append(".SH SEE ALSO")
        for index, name in enumerate(related):
            comma = "," if index < len(related) - 1 else ""
            lines.append(f".BR {escape(name)} ({SECTION}){comma}")
    return "\n".join(lines) + "\n"


def build_date() -> str:
    """The date in the page footer: `SOURCE_DATE_EPOCH` when set (reproducible builds), else
    none, so two builds of the same source give byte-identical pages."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if not epoch.isdigit():
        return ""
    return time.strftime("%Y-%m-%d", time.gmtime(int(epoch)))


def write_pages(
    outdir: Path, root: Command | None = None, version: str | None = None
) -> list[Path]:
    """Write one page per visible command into `outdir` (created); returns the files written.

    Pages of an earlier run whose command is gone are left in place: `packaging/build-manpages`
    deletes the directory's `xce*.1` first, which this function will not do to a directory it
    was merely pointed at.
    """
    if version is None:
        from xce import __version__

        version = __version__
    tree = full_tree() if root is None else root
    outdir.mkdir(parents=True, exist_ok=True)
    date = build_date()
    written: list[Path] = []
    for node in walk(tree):
        target = outdir / f"{node.page}.{SECTION}"
        target.write_text(render(node, version, date), encoding="ascii")
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    """`python -m xce.cli.manpages OUTDIR`: write the pages, print how many and where."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        sys.stderr.write("usage: python -m xce.cli.manpages OUTDIR\n")
        return 2
    written = write_pages(Path(args[0]))
    print(f"xce.cli.manpages: {len(written)} pages in {args[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
