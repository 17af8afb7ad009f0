"""Job script directives, the captured environment and the -o/-e file names."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from xce.cli import submitting
from xce.cli.directives import DirectiveError, directive_lines, megabytes, parse, slurm_seconds
from xce.cli.environment import MAX_BYTES, EnvironmentTooLarge, export_environment
from xce.core.errors import InvalidRequest
from xce.core.jobfiles import check_file_pattern, expand_file_pattern


def _options(*lines: str, lenient: bool = False) -> dict[str, Any]:
    script = "#!/bin/sh\n" + "\n".join(lines) + "\necho hi\n"
    return parse(script, submitting._parse_xce_line, lenient).options


SBATCH = [
    ("#SBATCH --ntasks=4", {"slots": 4}),
    ("#SBATCH -n 4", {"slots": 4}),
    ("#SBATCH -n4", {"slots": 4}),
    ("#SBATCH -n 2 -c 3", {"slots": 6}),
    ("#SBATCH --nodes=1 --ntasks-per-node=8", {"slots": 8, "resources": "span[hosts=1]"}),
    ("#SBATCH --mem=4G", {"memory": 4096}),
    ("#SBATCH --mem 512", {"memory": 512}),
    ("#SBATCH -n 4 --mem-per-cpu=100M", {"slots": 4, "mem_per_cpu": 100}),
    ("#SBATCH --time=90", {"walltime": "5400s"}),
    ("#SBATCH -t 1:30:00", {"walltime": "5400s"}),
    ("#SBATCH -t 2-00:00", {"walltime": "172800s"}),
    ("#SBATCH -t 10:30", {"walltime": "630s"}),
    ("#SBATCH -p short", {"queue": "short"}),
    ("#SBATCH --reservation=maint", {"reservation": "maint"}),
    ("#SBATCH --partition=short", {"queue": "short"}),
    ("#SBATCH -J name --job-name=other", {"name": "other"}),
    ("#SBATCH -o out-%j.txt -e err-%j.txt", {"stdout": "out-%j.txt", "stderr": "err-%j.txt"}),
    ("#SBATCH --array=1-10%2", {"array": "1-10%2"}),
    ("#SBATCH -d afterok:12:13", {"dependency": "afterok:12:13"}),
    ("#SBATCH --hold", {"hold": True}),
    ("#SBATCH --begin=now+1hour", {"begin": "now+1hour"}),
    ("#SBATCH -D /scratch/run", {"cwd": "/scratch/run"}),
    ("#SBATCH --gres=gpu:a100:2", {"gpus": 2}),
    ("#SBATCH --gpus=1", {"gpus": 1}),
    ("#SBATCH --export=NONE", {"export": "NONE"}),
    ("#SBATCH --mail-type=END --mail-user=me@x", {}),
]

BSUB = [
    ("#BSUB -n 4", {"slots": 4}),
    ("#BSUB -n 2,8", {"slots": 2}),
    ("#BSUB -M 4000", {"memory": 4000}),
    ("#BSUB -W 1:30", {"walltime": "1:30"}),
    ("#BSUB -q night", {"queue": "night"}),
    ("#BSUB -U team", {"reservation": "team"}),
    ("#BSUB -J sim", {"name": "sim"}),
    ('#BSUB -J "sweep[1-100]%5"', {"name": "sweep", "array": "1-100%5"}),
    ("#BSUB -o out.%J.%I -e err.%J", {"stdout": "out.%J.%I", "stderr": "err.%J"}),
    ("#BSUB -oo out.txt", {"stdout": "out.txt"}),
    ('#BSUB -w "done(12) && ended(13)"', {"dependency": "afterok:12,afterany:13"}),
    ('#BSUB -w "exit(7)"', {"dependency": "afternotok:7"}),
    ("#BSUB -H", {"hold": True}),
    ("#BSUB -b 22:30", {"begin": "22:30"}),
    ("#BSUB -cwd /scratch/x", {"cwd": "/scratch/x"}),
    ('#BSUB -R "select[mem>4000] span[hosts=1]"', {"resources": "select[mem>4000] span[hosts=1]"}),
    ('#BSUB -gpu "num=2:mode=shared"', {"gpus": 2}),
    ("#BSUB -B -N -u me@x", {}),
]

XCE = [
    ("#XCE -n 3 -J xcey", {"slots": 3, "name": "xcey"}),
    (
        "#XCE --mem 100 -W 2h -q short --hold",
        {"memory": 100, "walltime": "2h", "queue": "short", "hold": True},
    ),
    ("#XCE --begin 2026-12-24T18:00", {"begin": "2026-12-24T18:00"}),
    ("#XCE --env A=1 --env B=2 --export NONE", {"env": ["A=1", "B=2"], "export": "NONE"}),
    (
        "#XCE -o o.txt -e e.txt --stage-out 'res/*.dat'",
        {"stdout": "o.txt", "stderr": "e.txt", "stage_out": ["res/*.dat"]},
    ),
]


def test_whole_hosts_and_spans_translate() -> None:
    assert _options("#SBATCH --exclusive")["exclusive"] is True
    assert _options("#BSUB -x")["exclusive"] is True
    found = _options("#BSUB -n 8 -R 'span[ptile=4]'")
    assert found["slots"] == 8 and found["resources"] == "span[ptile=4]"


@pytest.mark.parametrize(("line", "expected"), SBATCH + BSUB + XCE)
def test_directive_table(line: str, expected: dict[str, Any]) -> None:
    assert _options(line) == expected


@pytest.mark.parametrize(
    "line",
    [
        "#SBATCH --bogus=proj",
        "#SBATCH --mem-per-gpu=2G",
        "#BSUB -Is bash",
        '#BSUB -w "done(1) || done(2)"',
    ],
)
def test_unsupported_directives_name_the_line_or_warn_when_lenient(line: str) -> None:
    with pytest.raises(DirectiveError, match=r"^line 3: "):
        _options("#SBATCH -n 1", line)
    script = f"#!/bin/sh\n{line}\ntrue\n"
    found = parse(script, submitting._parse_xce_line, lenient=True)
    assert found.warnings and "line 2" in found.warnings[0]


@pytest.mark.parametrize(
    "line",
    [
        "#SBATCH --mem=lots",
        "#SBATCH -t soon",
        "#BSUB -n",
        "#XCE --slots many",
        "#XCE sleep 10",
        "#BSUB -J 'open",
    ],
)
def test_bad_values_are_errors_naming_the_line(line: str) -> None:
    with pytest.raises(DirectiveError, match=r"^line 2: "):
        _options(line)


def test_only_the_leading_comment_block_counts() -> None:
    script = (
        "#!/bin/bash\n\n# a comment\n#SBATCH -n 2\n#SBATCHX -n 9\n  #BSUB -q q\n"
        "echo go\n#SBATCH -n 8\n"
    )
    assert [(n, p) for n, p, _ in directive_lines(script)] == [(4, "#SBATCH"), (6, "#BSUB")]


def test_command_line_wins_and_lists_add_up() -> None:
    given = dict(submitting.DEFAULTS, slots=8, env=["B=2"], name="")
    script = "#!/bin/sh\n#SBATCH -n 2 -J fromscript\n#XCE --env A=1\ntrue\n"
    submitting._apply_directives(script, given, lenient=False)
    assert given["slots"] == 8 and given["name"] == "fromscript"
    assert given["env"] == ["A=1", "B=2"]


def test_sizes_and_times() -> None:
    assert megabytes("2G") == 2048 and megabytes("100K") == 1 and megabytes("0") == 0
    assert slurm_seconds("1-0") == 86400 and slurm_seconds("5") == 300
    with pytest.raises(ValueError):
        megabytes("4X")


def test_export_all_keeps_the_hosts_own_variables_out() -> None:
    environ = {
        "PATH": "/opt/bin:/usr/bin",
        "FOO": "1",
        "HOME": "/home/a",
        "USER": "a",
        "XCE_TOKEN": "secret",
        "XCE_JOB_ID": "3",
        "PWD": "/x",
        "BASH_FUNC_f%%": "()",
    }
    assert export_environment(None, environ) == {"PATH": "/opt/bin:/usr/bin", "FOO": "1"}
    assert export_environment("NONE", environ) == {}
    assert export_environment("FOO,BAR=2,MISSING", environ) == {"FOO": "1", "BAR": "2"}
    assert export_environment("ALL,BAR=2", environ)["BAR"] == "2"
    for bad in ("NONE,FOO", "XCE_TOKEN", "HOME", "1X"):
        with pytest.raises(ValueError):
            export_environment(bad, environ)


def test_an_oversized_environment_is_a_clear_error() -> None:
    environ = {"BIG": "x" * MAX_BYTES, "SMALL": "1"}
    with pytest.raises(EnvironmentTooLarge, match=r"BIG \(256 KiB\).*--export NONE"):
        export_environment("ALL", environ)
    assert export_environment("SMALL", environ) == {"SMALL": "1"}


def test_file_patterns() -> None:
    assert expand_file_pattern("o.%J.%I", 17, 3) == "o.17.3"
    assert expand_file_pattern("slurm-%j_%a-%A.out", 5, None) == "slurm-5_0-5.out"
    assert expand_file_pattern("100%%", 1, None) == "100%"
    assert expand_file_pattern("%x-%j.out", 4, None, "a/b") == "a_b-4.out"
    check_file_pattern("stdout", "out-%J.txt")
    for bad in ("out-%q", "trailing%", "  "):
        with pytest.raises(InvalidRequest, match="stdout"):
            check_file_pattern("stdout", bad)


def test_the_command_line_wins_even_with_a_default_value(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`xce job submit -n 1 job.sh` with `#SBATCH -n 4` runs on 1 slot: an option given on
    the command line wins over a directive even when its value is the default."""
    from xce.cli import submitting

    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH -n 4\n#SBATCH -J fromscript\ntrue\n")
    given = {**submitting.DEFAULTS, "slots": 1}
    args = ["job", "submit", "-n", "1", str(script)]
    explicit = submitting.explicit_options(args)
    assert explicit == {"slots"}
    body, _ = submitting.build(None, script, [], given, False, explicit)
    assert body["slots"] == 1 and body["name"] == "fromscript"
    body, _ = submitting.build(
        None, script, [], given, False, submitting.explicit_options(["job", "submit", str(script)])
    )
    assert body["slots"] == 4
    assert submitting.explicit_options(["job", "submit", "-n4", "--name=x", "--", "-q"]) == {
        "slots",
        "name",
    }
    assert submitting.explicit_options(["job", "list"]) is None


def test_export_leaves_out_what_the_packaged_xce_bootloader_set_for_itself(monkeypatch) -> None:
    """A frozen `xce job submit` runs with the PyInstaller bootloader's variables: they point
    at the submitter's unpack directory and must not reach the job (the CI's binary test)."""
    monkeypatch.setattr(sys, "_MEIPASS", "/tmp/_MEIabc", raising=False)
    environ = {
        "PATH": "/usr/bin",
        "_PYI_ARCHIVE_FILE": "/usr/local/bin/xce",
        "_PYI_PARENT_PROCESS_LEVEL": "1",
        "_MEIPASS2": "/tmp/_MEIabc",
        "LD_LIBRARY_PATH": "/tmp/_MEIabc:/opt/lib",
        "LD_LIBRARY_PATH_ORIG": "/opt/lib",
    }
    assert export_environment(None, environ) == {"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/opt/lib"}
    del environ["LD_LIBRARY_PATH_ORIG"]
    environ["LD_LIBRARY_PATH"] = "/tmp/_MEIabc"
    assert export_environment(None, environ) == {"PATH": "/usr/bin"}
