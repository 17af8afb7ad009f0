"""Shell completion: the generated bash script in a real `bash -i`, with
job ids, queue and host names from a running `xce up` cluster; zsh and fish scripts where
those shells are installed; `--install-completion` writes where each shell looks."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_cli_up import Up

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    u = Up(tmp_path_factory.mktemp("completion"))
    u.start()
    bin_dir = u.root / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "xce"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -m xce "$@"\n')
    wrapper.chmod(0o755)
    u.env = {
        **u.env,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "XDG_DATA_HOME": str(u.root / "data"),
        "XDG_CONFIG_HOME": str(u.root / "config"),
        "HOME": str(u.root),
    }
    try:
        yield u
    finally:
        u.stop()
        for segment in (u.root / "state").glob("controller/wal/*.seg"):
            segment.unlink()


def _bash(up: Up, *words: str) -> list[str]:
    """COMPREPLY for `xce WORDS...` (the last word being completed) in an interactive bash
    that sourced `xce --show-completion bash`."""
    line = " ".join(f"'{w}'" for w in ("xce", *words))
    program = (
        f"source <(xce --show-completion bash); COMP_WORDS=({line}); "
        f'COMP_CWORD={len(words)}; _xce_complete; printf "%s\\n" "${{COMPREPLY[@]}}"'
    )
    result = subprocess.run(
        ["bash", "--norc", "-i", "-c", program],
        env=up.env,
        text=True,
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return [w for w in result.stdout.splitlines() if w]


def test_bash_completes_commands_options_and_cluster_names(up: Up) -> None:
    held = up.xce("job", "submit", "--hold", "true")
    job_id = re.search(r"Job <(\d+)>", held.stdout).group(1)  # type: ignore[union-attr]
    assert "job" in _bash(up, "") and "tui" in _bash(up, "")
    assert _bash(up, "jo") == ["job"]
    assert set(_bash(up, "job", "s")) == {"show", "stop", "submit"}
    assert "--stage-in" in _bash(up, "job", "submit", "--st")
    assert job_id in _bash(up, "job", "kill", "")
    assert "normal" in _bash(up, "job", "submit", "-q", "")
    hosts = up.xce("host", "list").stdout.splitlines()[1].split()[0]
    assert _bash(up, "host", "close", "") == [hosts]
    assert _bash(up, "job", "list", "--limit", "") == []  # a number: nothing to offer
    up.xce("job", "kill", job_id)


def test_names_do_not_complete_when_no_controller_answers(up: Up) -> None:
    words = ["job", "kill", "--controller", "http://127.0.0.1:9", ""]
    assert _bash(up, *words) == []


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_install_writes_where_the_shell_looks(up: Up, shell: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "xce", "--install-completion", shell],
        env=up.env,
        text=True,
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    path = Path(result.stdout.split(" installed in ")[1].split(":")[0])
    assert path.is_file() and path.is_relative_to(up.root)
    if shutil.which(shell) and shell != "bash":
        check = [shell, "-n", str(path)] if shell == "zsh" else [shell, "--no-execute", str(path)]
        assert subprocess.run(check, capture_output=True).returncode == 0


def test_unknown_shell_is_one_line(up: Up) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "xce", "--install-completion", "tcsh"],
        env=up.env,
        text=True,
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr == "xce: error: no completion for shell 'tcsh': use bash, zsh, fish\n"
