"""Job scripts of each flavour end to end: `xce up`, then `xce job submit` of
#SBATCH, #BSUB (on stdin, as `bsub < job.sh`) and #XCE scripts; the running job reports its
slots, name and environment into its -o file, which must appear where the script said."""

from __future__ import annotations

import os
import pwd
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_cli_up import Up

REPORT = (
    'echo "slots=$XCE_SLOTS name=$XCE_JOB_NAME id=$XCE_JOB_ID foo=${FOO-unset} '
    'home=$HOME path=$PATH"\necho to-stderr >&2\n'
)


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    u = Up(tmp_path_factory.mktemp("scripts"))
    u.start()
    try:
        yield u
    finally:
        u.stop()
        for segment in (u.root / "state").glob("controller/wal/*.seg"):
            segment.unlink()


def _submit(up: Up, *args: str, stdin: str | None = None, cwd: Path, **env: str) -> tuple[str, str]:
    result = subprocess.run(
        [sys.executable, "-m", "xce", "job", "submit", *args],
        env={**up.env, **env},
        cwd=cwd,
        text=True,
        capture_output=True,
        timeout=60,
        input=stdin,
    )
    assert result.returncode == 0, result.stderr
    return re.search(r"Job <(\d+)>", result.stdout).group(1), result.stderr  # type: ignore


def _wait(up: Up, job_id: str) -> None:
    done = up.xce("job", "wait", job_id, "--timeout", "60")
    assert done.returncode == 0, done.stdout + done.stderr + up.log.read_text()[-3000:]


def _report(path: Path) -> dict[str, str]:
    return dict(item.split("=", 1) for item in path.read_text().split())


def test_sbatch_script_file(up: Up, tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH --ntasks=2\n#SBATCH -J slurmjob\n"
        "#SBATCH --output=slurm-%j.out\n#SBATCH --error=%x-%j.err\n"
        "#SBATCH --time=5\n#SBATCH --mail-type=END\n" + REPORT
    )
    job_id, warnings = _submit(
        up,
        "--cwd",
        str(tmp_path),
        str(script),
        cwd=tmp_path,
        FOO="from-submitter",
        HOME="/nonexistent-submit-home",
        PATH=f"/opt/submitter/bin:{os.environ['PATH']}",
        XCE_JOB_ID="999",
    )
    assert "line 7" in warnings and "mail" in warnings
    _wait(up, job_id)
    got = _report(tmp_path / f"slurm-{job_id}.out")
    assert got["slots"] == "2" and got["name"] == "slurmjob" and got["id"] == job_id
    assert got["foo"] == "from-submitter"  # --export ALL by default, as sbatch
    assert got["home"] == pwd.getpwuid(os.getuid()).pw_dir  # the host owns HOME
    # PATH travels, after the directory of the worker's own `xce` (xce launch)
    first, rest = got["path"].split(":", 1)
    assert first.endswith("/.xce-bin") and rest.startswith("/opt/submitter/bin:"), got["path"]
    assert (tmp_path / f"slurmjob-{job_id}.err").read_text() == "to-stderr\n"
    shown = up.xce("job", "show", job_id, "--json")
    assert '"walltime_s": 300' in shown.stdout


def test_bsub_script_on_stdin_is_an_array(up: Up, tmp_path: Path) -> None:
    text = (
        '#!/bin/sh\n#BSUB -n 2\n#BSUB -J "lsfarr[1-2]"\n#BSUB -o lsf.%J.%I\n#BSUB -W 10\n' + REPORT
    )
    job_id, _ = _submit(
        up, "--cwd", str(tmp_path), "--export", "NONE", stdin=text, cwd=tmp_path, FOO="not-exported"
    )
    _wait(up, job_id)
    for index in (1, 2):
        got = _report(tmp_path / f"lsf.{job_id}.{index}")
        assert got["slots"] == "2" and got["name"] == "lsfarr" and got["foo"] == "unset"


def test_xce_directives_and_the_command_line_wins(up: Up, tmp_path: Path) -> None:
    script = tmp_path / "x.sh"
    script.write_text(
        "#!/bin/sh\n#XCE -n 2 -J fromscript -o xce.out\n#XCE --env FOO=directive\n" + REPORT
    )
    job_id, _ = _submit(
        up, "--cwd", str(tmp_path), "-J", "fromcli", "-n", "1", str(script), cwd=tmp_path
    )
    _wait(up, job_id)
    got = _report(tmp_path / "xce.out")
    assert got["name"] == "fromcli" and got["foo"] == "directive"
    assert got["slots"] == "1"  # given on the command line, so it wins (default or not)


def test_unknown_directive_is_refused_naming_the_line(up: Up, tmp_path: Path) -> None:
    script = tmp_path / "bad.sh"
    script.write_text("#!/bin/sh\n#SBATCH -n 1\n#SBATCH --bogus=proj\ntrue\n")
    result = up.xce("job", "submit", str(script))
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "xce: error: script directive line 3: "
        "'#SBATCH --bogus=proj': unknown or unsupported "
        "#SBATCH option --bogus"
    )
    bad_pattern = up.xce("job", "submit", "-o", "out-%q", "true")
    assert bad_pattern.returncode == 1 and "unknown '%q'" in bad_pattern.stderr


def test_old_spellings_still_work_with_a_warning(up: Up, tmp_path: Path) -> None:
    data = tmp_path / "in.txt"
    data.write_text("staged\n")
    job_id, warnings = _submit(
        up, "-i", str(data), "-e", "OLD=env", "--", 'cat in.txt; echo "OLD=$OLD"', cwd=tmp_path
    )
    assert "--stage-in" in warnings and "spell it --env" in warnings
    _wait(up, job_id)
    assert up.xce("job", "output", job_id).stdout == "staged\nOLD=env\n"
