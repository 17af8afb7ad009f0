"""sbatch, bsub and qsub options become `xce job submit`'s: an sbatch option means what the
same #SBATCH line means, the command line wins over the script's directives, an option XCE
does not cover is a one-line usage error naming it. The body is captured where it would be
sent (no controller)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from xce.cli.compat import base, lsf, pbs, slurm
from xce.cli.compat import submit as compat_submit
from xce.cli.compat.base import Usage


class Sent:
    """What `submit` would have sent: the body (as the API reads it) and the staged files."""

    body: dict[str, Any]


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Sent:
    import msgspec

    seen = Sent()

    def call(fn: Any) -> dict[str, Any]:
        body = fn.args[0]  # functools.partial(_submit_with_uploads, body, staged)
        seen.body = msgspec.to_builtins(body)
        return {"job_id": "42", "queue": seen.body.get("queue") or "normal"}

    monkeypatch.setattr(compat_submit, "call", call)
    monkeypatch.chdir(tmp_path)
    return seen


def _script(tmp_path: Path, *lines: str, name: str = "job.sh") -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + "".join(line + "\n" for line in lines) + "echo hi\n")
    return path


def test_scan_splits_options_from_the_script_and_its_arguments() -> None:
    scan = compat_submit.scan
    takes = slurm._takes_value
    assert scan(["-n", "4", "--time=5", "-H", "job.sh", "-n", "2"], takes) == (
        [["-n", "4"], ["--time=5"], ["-H"]],
        ["job.sh", "-n", "2"],
    )
    assert scan(["-n4", "--", "-weird"], takes) == ([["-n4"]], ["-weird"])
    assert scan(["--partition", "short"], takes) == ([["--partition", "short"]], [])


SBATCH = [
    (["-n", "4", "-c", "2"], {"slots": 8}),
    (["-n4"], {"slots": 4}),
    (["-t", "10"], {"walltime_s": 600}),
    (["--time=1:30:00"], {"walltime_s": 5400}),
    (["-p", "short"], {"queue": "short"}),
    (["--partition=short", "-J", "sim"], {"queue": "short", "name": "sim"}),
    (["-o", "out.%j", "-e", "err.%j"], {"stdout": "out.%j", "stderr": "err.%j"}),
    (["--array=1-10%2"], {"array": "1-10%2"}),
    (["-a", "1-3"], {"array": "1-3"}),
    (["-d", "afterok:12"], {"dependency": "afterok:12"}),
    (["-H"], {"hold": True}),
    (["--mem=2G"], {"memory_mb": 2048}),
    (["-N", "1", "-n", "2"], {"slots": 2}),
]


@pytest.mark.parametrize(("args", "expected"), SBATCH)
def test_sbatch_options(
    args: list[str], expected: dict[str, Any], sent: Sent, tmp_path: Path, capsys: Any
) -> None:
    assert slurm.sbatch([*args, str(_script(tmp_path))]) == 0
    assert capsys.readouterr().out == "Submitted batch job 42\n"
    for key, value in expected.items():
        assert sent.body.get(key) == value, (key, sent.body)
    assert sent.body["script"].startswith("#!/bin/sh")


def test_sbatch_command_line_wins_over_the_scripts_directives(
    sent: Sent, tmp_path: Path, capsys: Any
) -> None:
    script = _script(tmp_path, "#SBATCH -n 4", "#SBATCH -J fromscript", "#SBATCH -p long")
    assert slurm.sbatch(["-n", "1", "-p", "short", str(script)]) == 0
    # -n 1 is the default of `xce job submit -n`, and still wins: it was given
    body = sent.body
    assert (body.get("slots", 1), body["queue"], body["name"]) == (1, "short", "fromscript")


def test_an_sbatch_option_takes_the_place_of_the_scripts_own(
    sent: Sent, tmp_path: Path, capsys: Any
) -> None:
    """As with sbatch: the options combine (-c 2 on the line, -n 4 in the script: 8 slots),
    and one on the line replaces the script's (`--mem` its `--mem-per-cpu`)."""
    script = _script(tmp_path, "#SBATCH -n 4 --mem-per-cpu=100", "#SBATCH -c 1 -J sim")
    assert slurm.sbatch(["-c", "2", "--mem=1G", str(script)]) == 0
    body = sent.body
    assert (body["slots"], body["memory_mb"], body["name"]) == (8, 1024, "sim")
    assert "mem_per_slot_mb" not in body


def test_the_scripts_warnings_once_and_its_errors_by_line(
    sent: Sent, tmp_path: Path, capsys: Any
) -> None:
    script = _script(tmp_path, "#SBATCH --mail-type=END", "#SBATCH -n 2")
    assert slurm.sbatch(["--mail-user=a@b", str(script)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2, err
    assert err[0].startswith("sbatch: warning: --mail-user=a@b: ")
    assert "script directive line 2" in err[1] and "--mail-type" in err[1]
    bad = _script(tmp_path, "#SBATCH -n 2", "#SBATCH --bogus=1", name="bad.sh")
    with pytest.raises(Usage) as exc:
        slurm.sbatch(["-n", "1", str(bad)])
    assert str(exc.value) == (
        "script directive line 3: '#SBATCH --bogus=1': unknown or unsupported #SBATCH "
        "option --bogus"
    )


def test_sbatch_wrap_parsable_and_quiet(sent: Sent, capsys: Any) -> None:
    assert slurm.sbatch(["--parsable", "-J", "w", "--wrap", "echo a b"]) == 0
    assert capsys.readouterr().out == "42\n"
    assert sent.body["command"] == "echo a b" and "script" not in sent.body
    assert slurm.sbatch(["-Q", "--wrap=true"]) == 0
    assert capsys.readouterr().out == ""


def test_sbatch_reads_the_script_from_stdin(
    sent: Sent, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("#!/bin/sh\n#SBATCH -n 3\nhostname\n"))
    assert slurm.sbatch(["-J", "piped"]) == 0
    assert sent.body["slots"] == 3 and sent.body["name"] == "piped"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--bogus", "x"], "option --bogus is not covered by XCE's sbatch"),
        (["--frobnicate=3"], "option --frobnicate is not covered"),
        (["-n", "many"], "-n many:"),
        (["--uid=5"], "--uid=5: "),
    ],
)
def test_sbatch_refusals_name_the_option(
    args: list[str], words: str, sent: Sent, tmp_path: Path
) -> None:
    with pytest.raises(Usage) as exc:
        slurm.sbatch([*args, str(_script(tmp_path))])
    assert words in str(exc.value)
    assert "\n" not in str(exc.value)


def test_sbatch_script_rules(sent: Sent, tmp_path: Path) -> None:
    plain = tmp_path / "plain.sh"
    plain.write_text("echo no interpreter line\n")
    with pytest.raises(Usage, match="does not look like a batch script"):
        slurm.sbatch([str(plain)])
    with pytest.raises(Usage, match="Unable to open file"):
        slurm.sbatch([str(tmp_path / "missing.sh")])
    with pytest.raises(Usage, match="arguments after the script"):
        slurm.sbatch([str(_script(tmp_path)), "arg1"])


def test_sbatch_warnings_name_the_option(sent: Sent, tmp_path: Path, capsys: Any) -> None:
    assert slurm.sbatch(["--mail-type=END", str(_script(tmp_path))]) == 0
    err = capsys.readouterr().err
    assert err.startswith("sbatch: warning: --mail-type=END: ") and "mail" in err


BSUB = [
    (["-n", "4", "-q", "short"], {"slots": 4, "queue": "short"}),
    (["-J", "sim[1-10]%2"], {"name": "sim", "array": "1-10%2"}),
    (["-W", "30"], {"walltime_s": 1800}),
    (["-o", "out.%J", "-e", "err.%J"], {"stdout": "out.%J", "stderr": "err.%J"}),
    (["-w", "done(12)"], {"dependency": "afterok:12"}),
    (["-H"], {"hold": True}),
    (["-M", "500"], {"memory_mb": 500}),
]


@pytest.mark.parametrize(("args", "expected"), BSUB)
def test_bsub_options(args: list[str], expected: dict[str, Any], sent: Sent, capsys: Any) -> None:
    assert lsf.bsub([*args, "sleep", "10"]) == 0
    queue = expected.get("queue", "normal")
    assert capsys.readouterr().out == f"Job <42> is submitted to queue <{queue}>.\n"
    assert sent.body["command"] == "sleep 10"
    for key, value in expected.items():
        assert sent.body.get(key) == value, (key, sent.body)


def test_bsub_script_on_stdin_and_refusals(
    sent: Sent, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    script = '#BSUB -n 2 -oo old.out\n#BSUB -J fromstdin -R "span[ptile=1]"\nhostname\n'
    monkeypatch.setattr("sys.stdin", io.StringIO(script))
    assert lsf.bsub(["-n", "3", "-o", "new.out"]) == 0
    body = sent.body
    assert (body["slots"], body["name"], body["stdout"]) == (3, "fromstdin", "new.out")
    assert "ptile=1" in body["resources"] and body["script"] == script
    with pytest.raises(Usage, match="option -frob is not covered by XCE's bsub"):
        lsf.bsub(["-frob", "1", "sleep", "1"])


QSUB = [
    (["-N", "pbsjob", "-q", "short@server"], {"name": "pbsjob", "queue": "short"}),
    (["-l", "walltime=01:30:00"], {"walltime_s": 5400}),
    (["-l", "walltime=90"], {"walltime_s": 90}),
    (["-l", "select=1:ncpus=4:mem=2gb"], {"slots": 4, "memory_mb": 2048}),
    (["-l", "nodes=1:ppn=8,mem=1000mb"], {"slots": 8, "memory_mb": 1000}),
    (["-l", "nodes=2:ppn=4"], {"slots": 8, "resources": "span[ptile=4]"}),
    (["-l", "ncpus=3", "-l", "mem=1073741824"], {"slots": 3, "memory_mb": 1024}),
    (["-J", "1-10"], {"array": "1-10"}),
    (["-t", "1-5%2"], {"array": "1-5%2"}),
    (["-W", "depend=afterok:12.server:13"], {"dependency": "afterok:12:13"}),
    (["-h"], {"hold": True}),
    (["-o", "host:/tmp/out", "-e", "/tmp/err"], {"stdout": "/tmp/out", "stderr": "/tmp/err"}),
    (["-a", "202601020304"], {"begin": "2026-01-02T03:04:00"}),
]


@pytest.mark.parametrize(("args", "expected"), QSUB)
def test_qsub_options(
    args: list[str], expected: dict[str, Any], sent: Sent, tmp_path: Path, capsys: Any
) -> None:
    assert pbs.qsub([*args, str(_script(tmp_path))]) == 0
    assert capsys.readouterr().out == "42\n"
    for key, value in expected.items():
        got = sent.body.get(key)
        if key == "begin":
            import time

            got = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(got))
        assert got == value, (key, sent.body)


def test_qsub_reads_pbs_lines_and_the_command_line_wins(
    sent: Sent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    script = "#!/bin/sh\n#PBS -N inscript\n#PBS -l ncpus=4\n#PBS -q long\nhostname\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(script))
    assert pbs.qsub(["-q", "short"]) == 0
    assert (sent.body["name"], sent.body["slots"], sent.body["queue"]) == ("inscript", 4, "short")
    assert sent.body["script"] == script  # the script is sent whole, read once
    assert pbs.qsub(["-z", "--", "/bin/sleep", "5"]) == 0
    assert sent.body["command"] == "/bin/sleep 5"
    assert capsys.readouterr().out == "42\n"  # the first; -z prints nothing


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["-l", "gpus=2"], "resource gpus is not covered by XCE's qsub"),
        (["-l", "walltime=abc"], "-l walltime=abc"),
        (["-W", "group_list=x"], "-W group_list is not covered"),
        (["-I"], "option -I is not covered"),
        (["-j", "xy"], "-j xy"),
        (["-a", "12"], "-a 12"),
    ],
)
def test_qsub_refusals_name_the_option(
    args: list[str], words: str, sent: Sent, tmp_path: Path
) -> None:
    with pytest.raises(Usage) as exc:
        pbs.qsub([*args, str(_script(tmp_path))])
    assert words in str(exc.value)


def test_qsub_warns_for_join_and_mail(sent: Sent, tmp_path: Path, capsys: Any) -> None:
    assert pbs.qsub(["-j", "oe", "-m", "abe", str(_script(tmp_path))]) == 0
    err = capsys.readouterr().err
    assert "qsub: warning: -j oe" in err and "qsub: warning: -m" in err


def test_main_turns_every_error_into_one_line(capsys: Any) -> None:
    assert base.main("squeue", ["--bogus"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "squeue: error: option --bogus is not covered by XCE's squeue "
        "(see docs/migration.md#familiar-commands)\n"
    )
    assert base.main("nosuch", []) == 2
    assert base.main("scancel", []) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "scancel: error: No job identification provided"
    )
    assert base.main("squeue", ["--help"]) == 0
    assert "docs/migration.md#familiar-commands" in capsys.readouterr().out
