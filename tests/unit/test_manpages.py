"""The man pages generated from the command tree: one per visible command, complete, valid roff.

The pages are built from the same click objects as `--help` (xce/cli/manpages.py); these tests
walk the tree themselves and check the pages against it, render every page with groff (and
`man -l`) with warnings on, and feed the generator a small app holding hidden commands and
options so that leaving those out is checked even if the real tree ever has none.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main

from xce.cli import manpages

ROOT = Path(__file__).resolve().parents[2]


def _tree() -> Any:
    return manpages.full_tree()


def _visible(command: Any, path: str = "xce") -> dict[str, Any]:
    """Page name -> command for every command `--help` shows, found without the generator."""
    found = {path.replace(" ", "-"): command}
    for name, sub in getattr(command, "commands", {}).items():
        if not sub.hidden:
            found.update(_visible(sub, f"{path} {name}"))
    return found


def _hidden(command: Any, path: str = "xce") -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Hidden commands (parent's page, name) and options (page, flag) anywhere in the tree."""
    commands: list[tuple[str, str]] = []
    options = [
        (path.replace(" ", "-"), flag)
        for param in command.params
        if getattr(param, "hidden", False)
        for flag in [*param.opts, *param.secondary_opts]
    ]
    for name, sub in getattr(command, "commands", {}).items():
        if sub.hidden:
            commands.append((path.replace(" ", "-"), name))
        more_commands, more_options = _hidden(sub, f"{path} {name}")
        commands += more_commands
        options += more_options
    return commands, options


def _flag(flag: str) -> str:
    """A flag as the pages print it: bold, every `-` escaped."""
    return "\\fB" + flag.replace("-", "\\-") + "\\fR"


@pytest.fixture(scope="module")
def page_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    outdir = tmp_path_factory.mktemp("man1")
    written = manpages.write_pages(outdir)
    assert sorted(written) == sorted(outdir.iterdir())
    return outdir


@pytest.fixture(scope="module")
def pages(page_dir: Path) -> dict[str, str]:
    return {path.name: path.read_text(encoding="ascii") for path in page_dir.iterdir()}


def test_every_visible_command_has_a_page_and_nothing_else(pages: dict[str, str]) -> None:
    expected = {f"{name}.1" for name in _visible(_tree())}
    assert {"xce.1", "xce-job.1", "xce-job-submit.1", "xce-queue-list.1"} <= expected
    assert set(pages) == expected


def test_submit_page_has_the_sections_and_names_queue(pages: dict[str, str]) -> None:
    text = pages["xce-job-submit.1"]
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "ARGUMENTS", "OPTIONS", "SEE ALSO"):
        assert f"\n.SH {section}\n" in text, section
    assert re.search(r"^\.TP\n\\fB\\-q\\fR, \\fB\\-\\-queue\\fR \\fI\S+\\fR$", text, re.M)
    assert "\nxce\\-job\\-submit \\- Submit" in text
    assert "\n.B xce job submit\n[OPTIONS]" in text
    assert text.rstrip().endswith(".BR xce\\-job (1)")  # a leaf: its parent only


def test_group_pages_list_their_commands_and_see_also_parent_and_children(
    pages: dict[str, str],
) -> None:
    tree = _tree()
    job = tree.commands["job"]
    children = [name for name, sub in job.commands.items() if not sub.hidden]
    text = pages["xce-job.1"]
    commands = text.split("\n.SH COMMANDS\n")[1].split("\n.SH ")[0]
    assert re.findall(r"^\.TP\n\\fB(.+?)\\fR$", commands, re.M) == [
        c.replace("-", "\\-") for c in children
    ]
    see_also = text.split("\n.SH SEE ALSO\n")[1]
    names = re.findall(r"^\.BR (\S+) \(1\)", see_also, re.M)
    assert names == ["xce"] + [f"xce-job-{c}".replace("-", "\\-") for c in children]
    assert ".SH SEE ALSO" in pages["xce.1"] and ".BR xce\\-job (1)," in pages["xce.1"]


def test_every_visible_option_is_on_its_page(pages: dict[str, str]) -> None:
    checked = 0
    for name, command in _visible(_tree()).items():
        text = pages[f"{name}.1"]
        for param in command.params:
            if getattr(param, "hidden", False) or param.param_type_name != "option":
                continue
            for flag in [*param.opts, *param.secondary_opts]:
                assert _flag(flag) in text, (name, flag)
                checked += 1
        assert _flag("--help") in text, name
    assert checked > 100


def test_hidden_commands_and_options_of_the_real_tree_are_left_out(pages: dict[str, str]) -> None:
    hidden_commands, hidden_options = _hidden(_tree())
    everything = "\n".join(pages.values())
    for parent, name in hidden_commands:
        page = f"{parent}-{name}"
        assert f"{page}.1" not in pages
        assert page.replace("-", "\\-") + " " not in everything, page  # not in SEE ALSO
        assert _flag(name) not in pages[f"{parent}.1"], page  # nor in its parent's COMMANDS
    for page, flag in hidden_options:
        assert _flag(flag) not in pages[f"{page}.1"], (page, flag)


def _toy_app() -> Any:
    """A tree with every awkward case: hidden command and option, roff-special help text."""
    app = typer.Typer(name="xce", help="Toy root.\n\n.starts with a dot\n'and a quote")
    sub = typer.Typer(help="A group.")

    @sub.command("run")
    def run(
        shown: str = typer.Option("x", "--shown", "-s", help="C:\\path and \\n, naïve"),
        secret: str = typer.Option("", "--secret-flag", hidden=True, help="never shown"),
    ) -> None:
        """Run it.

        - first bullet,
          wrapped
        - second bullet: a,long,list/of,words

        \b
        kept  as
          typed
        """

    @sub.command("ghost-cmd", hidden=True)
    def ghost() -> None:
        """Hidden from help."""

    app.add_typer(sub, name="grp")
    return typer.main.get_command(app)


def test_generator_leaves_out_hidden_and_escapes_roff(tmp_path: Path) -> None:
    written = manpages.write_pages(tmp_path, root=_toy_app(), version="9.9")
    assert sorted(p.name for p in written) == ["xce-grp-run.1", "xce-grp.1", "xce.1"]
    everything = "\n".join(p.read_text() for p in written)
    assert "secret" not in everything and "never shown" not in everything
    assert "ghost" not in everything
    run = (tmp_path / "xce-grp-run.1").read_text()
    assert _flag("-s") + ", " + _flag("--shown") + " \\fI<str>\\fR\n" in run
    assert "[default: x]" in run  # defaults shown as --help shows them
    assert "C:\\epath and \\en, na\\[u00EF]ve" in run  # backslashes and non-ASCII escaped
    assert ".IP \\(bu 2\nfirst bullet, wrapped\n.IP \\(bu 2\nsecond bullet:" in run
    assert "a,\\:long,\\:list/\\:of,\\:words" in run  # break points: pages are not hyphenated
    assert ".nf\nkept  as\n  typed\n.fi" in run  # click's \b paragraph keeps its lines
    root = (tmp_path / "xce.1").read_text()
    assert ".PP\n\\&.starts with a dot 'and a quote" in root
    assert '"xce 9.9"' in root


def test_escape_protects_requests_dashes_and_backslashes() -> None:
    assert manpages.escape("a-b") == "a\\-b"
    assert manpages.escape("\\fB") == "\\efB"
    assert manpages.escape(".SH x\n'br\nok") == "\\&.SH x\n\\&'br\nok"
    assert manpages.escape("→") == "\\[u2192]"


def _groff_warnings(path: Path) -> str:
    result = subprocess.run(
        ["groff", "-man", "-Tutf8", "-ww", "-z", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stderr


@pytest.mark.skipif(shutil.which("groff") is None, reason="needs groff (Debian's groff-base)")
def test_every_page_renders_without_groff_warnings(tmp_path: Path, page_dir: Path) -> None:
    toy = manpages.write_pages(tmp_path / "toy", root=_toy_app(), version="9.9")
    for path in [*sorted(page_dir.iterdir()), *toy]:
        assert _groff_warnings(path) == "", path.name
    # And groff does catch what the escaping prevents: an unknown request at a line start.
    bad = tmp_path / "bad.1"
    bad.write_text(".TH BAD 1\n.SH NAME\nbad\n.xyzzy unknown request\n")
    assert "xyzzy" in _groff_warnings(bad)


@pytest.mark.skipif(shutil.which("man") is None, reason="needs man (Debian's man-db)")
def test_man_shows_the_submit_page(page_dir: Path) -> None:
    page = page_dir / "xce-job-submit.1"
    env = {**os.environ, "MANWIDTH": "100", "LC_ALL": "C.UTF-8"}
    result = subprocess.run(
        ["man", "--warnings", "-l", str(page)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0 and result.stderr == "", result.stderr
    shown = re.sub(r".\x08", "", result.stdout).replace("\u2212", "-").replace("\u2010", "-")
    assert "xce-job-submit - Submit a job" in shown
    assert "-q, --queue" in shown
    assert "SEE ALSO" in shown and "xce-job(1)" in shown


def test_build_script_writes_the_pages_and_drops_stale_ones(tmp_path: Path) -> None:
    outdir = tmp_path / "man" / "man1"
    outdir.mkdir(parents=True)
    (outdir / "xce-removed-command.1").write_text(".TH OLD 1\n")
    (outdir / "other.1").write_text(".TH OTHER 1\n")  # not ours: left alone
    env = {**os.environ, "SOURCE_DATE_EPOCH": "0"}
    result = subprocess.run(
        ["bash", str(ROOT / "packaging" / "build-manpages"), str(outdir)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    names = {p.name for p in outdir.iterdir()}
    assert names == {f"{name}.1" for name in _visible(_tree())} | {"other.1"}
    assert '"1970-01-01"' in (outdir / "xce.1").read_text()  # reproducible date


def test_build_scripts_ship_the_pages() -> None:
    binary = (ROOT / "packaging" / "build-binary").read_text()
    appimage = (ROOT / "packaging" / "build-appimage").read_text()
    assert 'packaging/build-manpages" "$ROOT/dist/man/man1"' in binary
    assert '"$APPDIR/usr/share/man/man1"' in appimage
    assert 'cp "$ROOT/dist/man/man1/"xce*.1 "$APPDIR/usr/share/man/man1/"' in appimage


def test_pages_are_byte_identical_across_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No date unless SOURCE_DATE_EPOCH gives one: rebuilding the same source changes nothing."""
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    first = manpages.write_pages(tmp_path / "a", root=_toy_app(), version="1")
    second = manpages.write_pages(tmp_path / "b", root=_toy_app(), version="1")
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]
    assert '.TH "XCE" "1" "" "xce 1"' in first[0].read_text()
