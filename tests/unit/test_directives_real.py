"""Directives as sites write them: tables of #SBATCH and #BSUB lines in the forms that
Slurm and LSF sites' published job script examples use (trailing comments, units, nodes and
tiles, constraints, host lists, GPUs, licenses, accounts, options XCE only warns about),
each with the exact options it must become, and the `xce job submit` rules for script files
(a file without `#!` that holds directives, a plain text file, the default job name)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from xce.cli import submitting
from xce.cli.directives import DirectiveError, Directives, parse, strip_comment

SPAN1 = "span[hosts=1]"


def _parse(*lines: str, lenient: bool = False, shebang: bool = True) -> Directives:
    head = "#!/bin/bash\n" if shebang else ""
    return parse(head + "\n".join(lines) + "\nsrun ./app\n", submitting._parse_xce_line, lenient)


# (directive line, the options it becomes, a warning it must give or None for none)
SLURM: list[tuple[str, dict[str, Any], str | None]] = [
    # trailing comments
    ("#SBATCH --time=01:00:00   # one hour", {"walltime": "3600s"}, None),
    ("#SBATCH --job-name=md_run #name", {"name": "md_run"}, None),
    ('#SBATCH --job-name="run # 1"  # quoted # kept', {"name": "run # 1"}, None),
    ("#SBATCH -o out#1.txt", {"stdout": "out#1.txt"}, None),
    # tasks, nodes, tiles
    ("#SBATCH --nodes=2 --ntasks-per-node=32", {"slots": 64, "resources": "span[ptile=32]"}, None),
    (
        "#SBATCH -N 4 --ntasks-per-node=16 --cpus-per-task=2",
        {"slots": 128, "resources": "span[ptile=32]"},
        None,
    ),
    ("#SBATCH --nodes=1", {"slots": 1, "resources": SPAN1}, None),
    ("#SBATCH --nodes=1 --ntasks=16", {"slots": 16, "resources": SPAN1}, None),
    ("#SBATCH -N1 -n 4 -c 4", {"slots": 16, "resources": SPAN1}, None),
    ("#SBATCH -N 2 -n 8", {"slots": 8, "resources": "span[ptile=4]"}, None),
    ("#SBATCH --nodes=3 --ntasks=7", {"slots": 7, "resources": "span[ptile=3]"}, None),
    (
        "#SBATCH --nodes=4 --ntasks=6",
        {"slots": 6, "resources": "span[ptile=2]"},
        "exactly 4 hosts; XCE puts at most 2 on each host (span[ptile=2]), so the job runs on 3",
    ),
    ("#SBATCH --nodes=2", {"slots": 2, "resources": "span[ptile=1]"}, None),
    (
        "#SBATCH -N 2 --ntasks-per-node=4 -c 8 --exclusive",
        {"slots": 64, "resources": "span[ptile=32]", "exclusive": True},
        None,
    ),
    ("#SBATCH --ntasks=1 --cpus-per-task=16", {"slots": 16}, None),
    ("#SBATCH --ntasks-per-node=8", {"slots": 8, "resources": "span[ptile=8]"}, None),
    (
        "#SBATCH --nodes=2-4 --ntasks-per-node=8",
        {"slots": 16, "resources": "span[ptile=8]"},
        "least node count of 2-4: 2",
    ),
    # memory with units
    ("#SBATCH --mem=4G", {"memory": 4096}, None),
    ("#SBATCH --mem 16GB", {"memory": 16384}, None),
    ("#SBATCH --mem=500M", {"memory": 500}, None),
    ("#SBATCH --mem=2T", {"memory": 2097152}, None),
    ("#SBATCH --mem-per-cpu=2G", {"mem_per_cpu": 2048}, None),
    ("#SBATCH --mem-per-cpu=3900", {"mem_per_cpu": 3900}, None),
    ("#SBATCH -c 4 --mem-per-cpu=1G", {"slots": 4, "mem_per_cpu": 1024}, None),
    ("#SBATCH --mem=0 --exclusive", {"exclusive": True}, "asks for no memory in XCE"),
    # constraints and host lists
    ("#SBATCH --constraint=haswell", {"resources": "select[haswell]"}, None),
    ('#SBATCH -C "intel&ib"', {"resources": "select[intel && ib]"}, None),
    (
        '#SBATCH --constraint="skylake|cascadelake"',
        {"resources": "select[skylake || cascadelake]"},
        None,
    ),
    ('#SBATCH -C "[rack1|rack2]"', {"resources": "select[rack1 || rack2]"}, None),
    (
        '#SBATCH -C "(knl&cache)|haswell"',
        {"resources": "select[(knl && cache) || haswell]"},
        None,
    ),
    (
        "#SBATCH --constraint=cpu-gen9",
        {"resources": "select[cpu_gen9]"},
        "feature cpu-gen9 is asked as the host attribute cpu_gen9",
    ),
    (
        "#SBATCH -C gpu --exclude=n[04-05]",
        {"resources": 'select[gpu && hname!="n04" && hname!="n05"]'},
        None,
    ),
    ('#SBATCH -C "a|b" -x c1', {"resources": 'select[(a || b) && hname!="c1"]'}, None),
    ("#SBATCH --nodelist=node01", {"resources": 'select[hname=="node01"]'}, None),
    (
        "#SBATCH -w n[01-03]",
        {"resources": 'select[(hname=="n01" || hname=="n02" || hname=="n03")]'},
        "among those listed",
    ),
    (
        "#SBATCH --exclude=gpu-node-7,gpu-node-9",
        {"resources": 'select[hname!="gpu-node-7" && hname!="gpu-node-9"]'},
        None,
    ),
    ("#SBATCH --tmp=10G", {"resources": "select[(!defined(tmp) || tmp>=10240)]"}, None),
    ("#SBATCH --mincpus=16", {"resources": "select[maxslots>=16]"}, None),
    # licenses, accounts, QOS, partitions
    ("#SBATCH --licenses=matlab:2,ansys", {"licenses": "matlab:2,ansys:1"}, None),
    ("#SBATCH -L comsol@licsrv:1", {"licenses": "comsol:1"}, "license server"),
    ("#SBATCH -L MATLAB:1", {"licenses": "matlab:1"}, "asked as matlab"),
    ("#SBATCH --account=proj123", {"account": "proj123"}, None),
    ("#SBATCH -A m1234", {"account": "m1234"}, None),
    ("#SBATCH --qos=debug", {"qos": "debug"}, None),
    ("#SBATCH -q regular", {"qos": "regular"}, None),
    ("#SBATCH --partition=gpu", {"queue": "gpu"}, None),
    ("#SBATCH -p standard,long", {"queue": "standard"}, "one queue: standard"),
    # GPUs
    ("#SBATCH --gres=gpu:4", {"gpus": 4}, None),
    ("#SBATCH --gres=gpu:v100:2", {"gpus": 2}, "GPU type v100 is not asked"),
    ("#SBATCH --gpus=a100:1", {"gpus": 1}, "GPU type a100"),
    ("#SBATCH --gpus-per-node=4", {"gpus": 4}, None),
    ("#SBATCH --gres=gpu:1,lscratch:10", {"gpus": 1}, "lscratch is ignored"),
    (
        "#SBATCH --ntasks=8 --gpus-per-task=1",
        {"slots": 8, "gpus": 8},
        "1 per task is asked as 8 per host (8 tasks, all on one host)",
    ),
    (
        "#SBATCH -N 2 --ntasks-per-node=4 --gpus=8",
        {"slots": 8, "resources": "span[ptile=4]", "gpus": 4},
        "8 for the job is asked as 4 on each of its 2 hosts",
    ),
    # times, arrays, dependencies, files
    ("#SBATCH --time=2-00:00:00", {"walltime": "172800s"}, None),
    ("#SBATCH -t 30", {"walltime": "1800s"}, None),
    ("#SBATCH --time=UNLIMITED", {}, "the queue's limit applies"),
    ("#SBATCH --array=0-99%10", {"array": "0-99%10"}, None),
    ("#SBATCH --dependency=afterok:1234", {"dependency": "afterok:1234"}, None),
    ("#SBATCH -d afterany:12_3:14", {"dependency": "afterany:12[3]:14"}, None),
    (
        "#SBATCH -J test -o %x-%j.out -e %x-%j.err",
        {"name": "test", "stdout": "%x-%j.out", "stderr": "%x-%j.err"},
        None,
    ),
    ("#SBATCH --output=logs/%A_%a.out", {"stdout": "logs/%A_%a.out"}, None),
    ("#SBATCH --chdir=/scratch/user/run", {"cwd": "/scratch/user/run"}, None),
    ("#SBATCH --exclusive=user", {"exclusive": True}, "taken as --exclusive"),
    # accepted with a warning
    ("#SBATCH --requeue", {}, "on_host_failure"),
    ("#SBATCH --no-requeue", {}, "on_host_failure"),
    ("#SBATCH --signal=B:USR1@300", {}, "no signal ahead of the time limit"),
    ("#SBATCH --open-mode=append", {}, "replacing what they held"),
    ("#SBATCH --open-mode=truncate", {}, None),
    ("#SBATCH --get-user-env", {"export": "ALL"}, "submitter's environment"),
    ("#SBATCH --get-user-env=L", {"export": "ALL"}, "submitter's environment"),
    ("#SBATCH --export=NONE --get-user-env", {"export": "NONE"}, "submitter's environment"),
    ("#SBATCH --export=ALL,OMP_NUM_THREADS=4", {"export": "ALL,OMP_NUM_THREADS=4"}, None),
    ("#SBATCH --hint=nomultithread", {}, "--hint is ignored"),
    ("#SBATCH --distribution=cyclic:cyclic", {}, "--distribution is ignored"),
    ("#SBATCH -m block", {}, "--distribution is ignored"),
    ("#SBATCH --cpu-bind=cores", {}, "--cpu-bind is ignored"),
    ("#SBATCH --mem-bind=local", {}, "--mem-bind is ignored"),
    ("#SBATCH --gres-flags=enforce-binding", {}, "--gres-flags is ignored"),
    ("#SBATCH --switches=1@12:00:00", {}, "network switch"),
    ("#SBATCH --profile=task", {}, "--profile is ignored"),
    ('#SBATCH --comment="nightly run"', {}, "--comment is ignored"),
    ("#SBATCH --wckey=climate", {}, "--wckey is ignored"),
    ("#SBATCH --propagate=STACK", {}, "resource limits"),
    ("#SBATCH --propagate", {}, "resource limits"),
    ("#SBATCH --threads-per-core=1", {}, "--threads-per-core is ignored"),
    ("#SBATCH --ntasks-per-core=1", {}, "--ntasks-per-core is ignored"),
    ("#SBATCH --sockets-per-node=2", {}, "--sockets-per-node is ignored"),
    ("#SBATCH --mail-type=BEGIN,END,FAIL", {}, "no mail"),
    ("#SBATCH --mail-user=someone@example.edu", {}, "no mail"),
    ("#SBATCH --nice=100", {}, "--priority"),
]

LSF: list[tuple[str, dict[str, Any], str | None]] = [
    ('#BSUB -n 4 -R "span[hosts=1]"  # one node', {"slots": 4, "resources": SPAN1}, None),
    ('#BSUB -n 64 -R "span[ptile=16]"', {"slots": 64, "resources": "span[ptile=16]"}, None),
    ('#BSUB -R "rusage[mem=512MB]"', {"resources": "rusage[mem=512]"}, None),
    ('#BSUB -R "rusage[mem=4GB]"', {"resources": "rusage[mem=4096]"}, None),
    ('#BSUB -R "rusage[mem=2G:duration=10]"', {"resources": "rusage[mem=2048:duration=10]"}, None),
    ("#BSUB -M 4GB", {"memory": 4096}, None),
    ("#BSUB -M 5G!", {"memory": 5120}, None),
    ("#BSUB -M 3000", {"memory": 3000}, None),
    ('#BSUB -R "select[mem>4GB]"', {"resources": "select[mem>4096]"}, None),
    (
        '#BSUB -R "select[model == XeonGold6126]"',
        {"resources": "select[model == XeonGold6126]"},
        None,
    ),
    ("#BSUB -R V100", {"resources": "select[V100]"}, None),
    ('#BSUB -R "V100"', {"resources": "select[V100]"}, None),
    (
        '#BSUB -R "select[gpu] rusage[mem=1G] span[hosts=1]"',
        {"resources": "select[gpu] rusage[mem=1024] span[hosts=1]"},
        None,
    ),
    (
        '#BSUB -R "select[type==X86_64] order[r15s:pg]"',
        {"resources": "select[type==X86_64] order[r15s:pg]"},
        None,
    ),
    (
        '#BSUB -R "select[avx2]" -R "rusage[mem=2GB]" -R "select[ib]"',
        {"resources": "select[avx2 && ib] rusage[mem=2048]"},
        None,
    ),
    (
        '#BSUB -n 4 -R "rusage[mem=4GB] span[hosts=1]"',
        {"slots": 4, "resources": "rusage[mem=4096] span[hosts=1]"},
        None,
    ),
    ('#BSUB -R "rusage[matlab=1]"', {"licenses": "matlab:1"}, None),
    (
        '#BSUB -R "rusage[mem=2000,matlab_lic=1]"',
        {"resources": "rusage[mem=2000]", "licenses": "matlab_lic:1"},
        None,
    ),
    ('#BSUB -R "rusage[ngpus_physical=2]"', {"gpus": 2}, None),
    ('#BSUB -R "affinity[core(1)]"', {}, "affinity[core(1)] is ignored"),
    ('#BSUB -gpu "num=2:mode=shared:j_exclusive=yes"', {"gpus": 2}, None),
    ("#BSUB -gpu -", {"gpus": 1}, None),
    ('#BSUB -gpu "num=1:mode=exclusive_process"', {"gpus": 1}, "compute modes"),
    ('#BSUB -gpu "num=4/host:gmodel=TeslaV100"', {"gpus": 4}, "-gpu gmodel ignored"),
    (
        '#BSUB -n 8 -R "span[ptile=4]" -gpu "num=1/task"',
        {"slots": 8, "resources": "span[ptile=4]", "gpus": 4},
        "1 per task is asked as 4 per host (4 tasks per host)",
    ),
    ("#BSUB -P ABC123", {"account": "ABC123"}, None),
    ("#BSUB -G research", {"account": "research"}, None),
    ("#BSUB -q normal", {"queue": "normal"}, None),
    ('#BSUB -q "short long"', {"queue": "short"}, "one queue: short"),
    (
        '#BSUB -m "hostA hostB"',
        {"resources": 'select[(hname=="hostA" || hname=="hostB")]'},
        None,
    ),
    ("#BSUB -m hostA", {"resources": 'select[hname=="hostA"]'}, None),
    (
        '#BSUB -m "hostA+2 hostB+1"',
        {"resources": 'select[(hname=="hostA" || hname=="hostB")]'},
        "host preferences (+N) are ignored",
    ),
    ('#BSUB -m "hostA others"', {}, "any host may run the job"),
    ("#BSUB -L /bin/bash", {}, "no login shell"),
    ("#BSUB -app fluent", {}, "application profiles"),
    ("#BSUB -u user@example.com", {}, "no mail"),
    ("#BSUB -B", {}, "no mail"),
    ("#BSUB -N", {}, "no mail"),
    ("#BSUB -cwd /scratch/run", {"cwd": "/scratch/run"}, None),
    ("#BSUB -outdir /scratch/out", {}, "no output directory"),
    ('#BSUB -env "all"', {"export": "all"}, None),
    ('#BSUB -env "none"', {"export": "none"}, None),
    ('#BSUB -env "all, ~SECRET, MODE=fast"', {"export": "all,MODE=fast"}, "~SECRET"),
    ('#BSUB -Jd "a long description"', {}, "no job description"),
    ("#BSUB -sla gold", {}, "service classes"),
    ("#BSUB -ti", {}, "-ti is ignored"),
    ('#BSUB -E "/bin/check_scratch"', {}, "pre-execution"),
    ('#BSUB -Ep "/bin/cleanup"', {}, "post-execution"),
    ("#BSUB -r", {}, "on_host_failure"),
    ("#BSUB -rn", {}, "on_host_failure"),
    ("#BSUB -K", {}, "xce job wait"),
    ("#BSUB -We 10", {}, "estimated run times"),
    ("#BSUB -sp 50", {}, "--priority"),
    ("#BSUB -W 24:00", {"walltime": "24:00"}, None),
    ("#BSUB -W 30/hostA", {"walltime": "30"}, "not normalised to host hostA"),
    ('#BSUB -J "myArray[1-10]"', {"name": "myArray", "array": "1-10"}, None),
    (
        "#BSUB -o Output_%J.out -e Error_%J.err",
        {"stdout": "Output_%J.out", "stderr": "Error_%J.err"},
        None,
    ),
    (
        "#BSUB -nnodes 2",
        {"slots": 2, "resources": "span[ptile=1]", "exclusive": True},
        "2 whole hosts",
    ),
    ('#BSUB -alloc_flags "gpumps smt4"', {}, "allocation flags"),
    ("#BSUB -x", {"exclusive": True}, None),
    ('#BSUB -w "done(123) && done(124)"', {"dependency": "afterok:123,afterok:124"}, None),
    ('#BSUB -w "ended(55[2])"', {"dependency": "afterany:55[2]"}, None),
    ("#BSUB -n 2,8", {"slots": 2}, None),
]


@pytest.mark.parametrize(("line", "expected", "warning"), SLURM + LSF)
def test_real_directive_lines(line: str, expected: dict[str, Any], warning: str | None) -> None:
    found = _parse(line)
    assert found.options == expected
    if warning is None:
        assert found.warnings == []
    else:
        assert found.warnings, line
        assert all(w.startswith("line 2: ") for w in found.warnings), found.warnings
        assert any(warning in w for w in found.warnings), found.warnings


def test_the_tables_are_large_enough() -> None:
    assert len(SLURM) >= 60 and len(LSF) >= 60


# Refused naming the line; a warning with --lenient.
REFUSED = [
    ("#SBATCH --bogus=1", "unknown or unsupported #SBATCH option --bogus"),
    ("#SBATCH --mem-per-gpu=8G", "memory per GPU"),
    ("#SBATCH -i input.txt", "stdin"),
    ("#SBATCH --dependency=singleton", "dependency 'singleton' is not supported"),
    ("#SBATCH -d afterok:1?afterok:2", "any one of"),
    ("#SBATCH -d after:12+5", "dependency 'after' is not supported"),
    ("#SBATCH --nodelist=./hosts.txt", "read from a file"),
    ("#SBATCH -w n[1-5000]", "5000 hosts"),
    ("#SBATCH --mem=4G --mem-per-cpu=1G", "keep one"),
    ("#SBATCH --wrap=hostname", "xce job submit -- CMD"),
    ("#BSUB -I", "interactive"),
    ("#BSUB -Is bash", "interactive"),
    ('#BSUB -R "span[hosts=2]"', "span[hosts=2] is not supported"),
    ('#BSUB -R "2*{select[a]} + 4*{select[b]}"', "compound"),
    ('#BSUB -R "cu[maxcus=2] frob[x]"', "unknown section frob[]"),
    ('#BSUB -R "rusage[mem=1000||mem=500]"', "alternatives"),
    ('#BSUB -w "started(1)"', "dependency started() is not supported"),
    ('#BSUB -w "done(myjob)"', "name the job by its id"),
    ('#BSUB -w "done(1) || done(2)"', "all terms must hold"),
    ('#BSUB -f "in.dat > in.dat"', "--stage-in"),
    ("#BSUB --nope", "unknown or unsupported #BSUB option --nope"),
]


@pytest.mark.parametrize(("line", "message"), REFUSED)
def test_refusals_name_the_line_or_warn_when_lenient(line: str, message: str) -> None:
    with pytest.raises(DirectiveError) as caught:
        _parse("#SBATCH -J ok", line)
    assert str(caught.value).startswith("line 3: ") and message in str(caught.value)
    found = _parse("#SBATCH -J ok", line, lenient=True)
    assert found.options.get("name") == "ok"
    assert any(w.startswith("line 3: ") and message in w for w in found.warnings)


def test_a_span_from_nodes_and_another_from_r_are_refused_naming_both() -> None:
    with pytest.raises(DirectiveError) as caught:
        _parse("#SBATCH --nodes=2 --ntasks-per-node=4", '#BSUB -R "span[hosts=1]"')
    text = str(caught.value)
    assert text.startswith("line 2: ") and "line 3" in text and "keep one" in text


# Bad values: always an error naming the line and the option in words.
BAD = [
    ("#SBATCH -n four", "--ntasks 'four': use a whole number"),
    ("#SBATCH -N x", "--nodes 'x'"),
    ("#SBATCH -c 0", "--cpus-per-task '0'"),
    ("#SBATCH --ntasks-per-node=", "--ntasks-per-node ''"),
    ("#SBATCH --mem=lots", "memory size 'lots'"),
    ("#SBATCH --time=soon", "time 'soon'"),
    ("#SBATCH --open-mode=sometimes", "use append or truncate"),
    ('#SBATCH -C "a&&"', "--constraint 'a&&'"),
    ('#SBATCH -C "a$b"', "unexpected '$'"),
    ("#SBATCH -C 10gbe", "start with a letter"),
    ("#SBATCH -L matlab:x", "--licenses matlab 'x'"),
    ('#BSUB -gpu "num=two"', "-gpu num=two: use N, N/task or N/host"),
    ('#BSUB -gpu "num=1/socket"', "-gpu num=1/socket"),
    ('#BSUB -gpu "bogus"', "is not KEY=VALUE"),
    ('#BSUB -gpu "mode=weird"', "use shared or exclusive_process"),
    ("#BSUB -n lots", "-n 'lots': use a whole number"),
    ("#BSUB -M 4X", "memory size '4X'"),
    ("#BSUB -W 1h", "-W '1h'"),
    ('#BSUB -R "rusage[mem=lots]"', "memory size 'lots'"),
    ('#BSUB -R "rusage[matlab=1.5]"', "rusage[matlab] '1.5'"),
    ('#BSUB -R "select[mem>>4]"', "expected an operand"),
    ('#BSUB -R "select[a"', "not closed"),
    ("#BSUB -n", "-n needs a value"),
]


@pytest.mark.parametrize(("line", "message"), BAD)
def test_bad_values_are_errors_in_words(line: str, message: str) -> None:
    with pytest.raises(DirectiveError) as caught:
        _parse(line, lenient=True)
    text = str(caught.value)
    assert text.startswith("line 2: ") and message in text, text
    assert "invalid literal" not in text


def test_comment_stripping_keeps_quotes_and_words() -> None:
    assert strip_comment("--time=01:00:00   # one hour") == "--time=01:00:00"
    assert strip_comment("-J 'a # b' # c") == "-J 'a # b'"
    assert strip_comment('-J "x \\" # y" # z') == '-J "x \\" # y"'
    assert strip_comment("-o out#1.txt") == "-o out#1.txt"
    assert strip_comment("# all comment") == ""


def test_a_script_whose_first_line_is_a_directive() -> None:
    found = _parse("#BSUB -n 4", "#BSUB -q night", shebang=False)
    assert found.options == {"slots": 4, "queue": "night"}
    found = parse("#SBATCH -n 2\nhostname\n", submitting._parse_xce_line)
    assert found.options == {"slots": 2}


# Whole scripts in the shape sites publish them.
SCRIPTS = [
    (
        [
            "#SBATCH --job-name=mpi_job      # Job name",
            "#SBATCH --nodes=2                # Number of nodes",
            "#SBATCH --ntasks-per-node=28     # MPI tasks per node",
            "#SBATCH --cpus-per-task=1",
            "#SBATCH --mem-per-cpu=2G",
            "#SBATCH --time=04:00:00",
            "#SBATCH --partition=compute",
            "#SBATCH --account=def-someprof",
            "#SBATCH --output=%x_%j.log",
            "#SBATCH --mail-type=ALL",
            "#SBATCH --mail-user=me@example.edu",
        ],
        {
            "name": "mpi_job",
            "slots": 56,
            "resources": "span[ptile=28]",
            "mem_per_cpu": 2048,
            "walltime": "14400s",
            "queue": "compute",
            "account": "def-someprof",
            "stdout": "%x_%j.log",
        },
        2,
    ),
    (
        [
            "#SBATCH -J train",
            "#SBATCH -p gpu",
            "#SBATCH -N 1",
            "#SBATCH --ntasks-per-node=1",
            "#SBATCH --cpus-per-task=8",
            "#SBATCH --gres=gpu:2",
            "#SBATCH -C a100",
            "#SBATCH --mem=64G",
            "#SBATCH -t 1-00:00",
            "#SBATCH --qos=normal",
            "#SBATCH --exclude=gpu[03,07]",
            "#SBATCH --hint=nomultithread",
        ],
        {
            "name": "train",
            "queue": "gpu",
            "slots": 8,
            "resources": 'select[a100 && hname!="gpu03" && hname!="gpu07"] span[hosts=1]',
            "gpus": 2,
            "memory": 65536,
            "walltime": "86400s",
            "qos": "normal",
        },
        1,
    ),
    (
        [
            "#BSUB -J My_Application",
            "#BSUB -q hpc",
            "#BSUB -n 4",
            '#BSUB -R "span[hosts=1]"',
            '#BSUB -R "rusage[mem=4GB]"',
            "#BSUB -M 5GB",
            "#BSUB -W 24:00",
            "#BSUB -u your_email_address",
            "#BSUB -B",
            "#BSUB -N",
            "#BSUB -o Output_%J.out",
            "#BSUB -e Error_%J.err",
        ],
        {
            "name": "My_Application",
            "queue": "hpc",
            "slots": 4,
            "resources": "rusage[mem=4096] span[hosts=1]",
            "memory": 5120,
            "walltime": "24:00",
            "stdout": "Output_%J.out",
            "stderr": "Error_%J.err",
        },
        3,
    ),
    (
        [
            "#BSUB -P ABC123",
            "#BSUB -W 2:00",
            "#BSUB -nnodes 4",
            '#BSUB -alloc_flags "smt4"',
            "#BSUB -J summit_run",
            "#BSUB -o summit.%J",
        ],
        {
            "account": "ABC123",
            "walltime": "2:00",
            "slots": 4,
            "resources": "span[ptile=1]",
            "exclusive": True,
            "name": "summit_run",
            "stdout": "summit.%J",
        },
        2,
    ),
    (
        [
            "#BSUB -q gpuv100",
            '#BSUB -gpu "num=1:mode=exclusive_process"',
            "#BSUB -n 4",
            '#BSUB -R "select[gpu32gb]"',
            '#BSUB -R "span[hosts=1] rusage[mem=8GB]"',
            "#BSUB -W 12:00",
            '#BSUB -m "n-62-20-1 n-62-20-2"',
        ],
        {
            "queue": "gpuv100",
            "gpus": 1,
            "slots": 4,
            "resources": 'select[gpu32gb && (hname=="n-62-20-1" || hname=="n-62-20-2")] '
            "rusage[mem=8192] span[hosts=1]",
            "walltime": "12:00",
        },
        1,
    ),
]


@pytest.mark.parametrize(("lines", "expected", "warnings"), SCRIPTS)
def test_whole_site_scripts(lines: list[str], expected: dict[str, Any], warnings: int) -> None:
    found = _parse(*lines)
    assert found.options == expected
    assert len(found.warnings) == warnings, found.warnings


def test_xce_lines_join_the_requirement_and_licenses() -> None:
    found = _parse(
        "#SBATCH -C ib -L matlab:1",
        "#XCE -R 'select[mem>1000] order[-mem]' --license ansys:2",
    )
    assert found.options == {
        "resources": "select[ib && mem>1000] order[-mem]",
        "licenses": "matlab:1,ansys:2",
    }


# --- xce job submit: script files, default names, merging ------------------------------------


def _build(
    command: list[str] | None = None,
    script: Path | None = None,
    after_dashes: bool = False,
    explicit: set[str] | None = None,
    **given: Any,
) -> dict[str, Any]:
    options = {**submitting.DEFAULTS, **given}
    body, _ = submitting.build(
        command, script, [], options, False, explicit or set(given), after_dashes
    )
    return body


def test_a_file_with_directives_and_no_shebang_is_a_script(tmp_path: Path) -> None:
    job = tmp_path / "job.lsf"
    job.write_text('#BSUB -n 4\n#BSUB -R "rusage[mem=1G]"\n./run\n')
    body = _build([str(job)])
    assert body["script"] == job.read_text()
    assert body["slots"] == 4 and body["resources"] == "rusage[mem=1024]"
    assert body["name"] == "job.lsf"


def test_the_default_name_is_the_file_name(tmp_path: Path) -> None:
    job = tmp_path / "job.sh"
    job.write_text("#!/bin/sh\n#SBATCH -n 2\ntrue\n")
    assert _build([str(job)])["name"] == "job.sh"
    assert _build(None, job)["name"] == "job.sh"  # --script
    assert _build([str(job)], name="cli")["name"] == "cli"
    named = tmp_path / "named.sh"
    named.write_text("#!/bin/sh\n#SBATCH -J fromscript\ntrue\n")
    assert _build([str(named)])["name"] == "fromscript"


def test_a_script_on_stdin_keeps_an_empty_name(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    class Stdin(io.StringIO):
        def isatty(self) -> bool:
            return False

    monkeypatch.setattr(sys, "stdin", Stdin("#!/bin/sh\n#BSUB -n 3\ntrue\n"))
    body = _build(None)
    assert body["name"] == "" and body["slots"] == 3


def test_a_text_file_without_shebang_or_directives_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import typer

    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.txt").write_text("echo hello\n")
    with pytest.raises(typer.Exit) as caught:
        _build(["job.txt"])
    assert caught.value.exit_code == 1
    assert capsys.readouterr().err == (
        "xce: error: job.txt has no #! line and no #SBATCH/#BSUB/#XCE directives: give a "
        "command (xce job submit -- ./job.txt) or add a #! line\n"
    )
    # after `--` it is the command asked for
    assert _build(["./job.txt"], after_dashes=True)["command"] == "./job.txt"


def test_commands_stay_commands(tmp_path: Path) -> None:
    assert _build(["hostname"])["command"] == "hostname"
    run = tmp_path / "run.sh"
    run.write_text("#!/bin/sh\n#SBATCH -n 8\necho $1\n")
    body = _build([str(run), "arg1"])
    assert body["command"] == f"{run} arg1" and body["slots"] == 1
    program = tmp_path / "a.out"
    program.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00")
    assert _build([str(program)])["command"] == str(program)
    # `--` before a script changes nothing: it is still read as the script
    assert "script" in _build([str(run)], after_dashes=True)


def test_dashes_are_read_from_the_command_line() -> None:
    assert submitting.dashes_given(["job", "submit", "-n", "2", "--", "./job.txt"])
    assert not submitting.dashes_given(["job", "submit", "./job.txt"])
    assert not submitting.dashes_given(["job", "list", "--"])


def test_licenses_from_directives_and_the_command_line(tmp_path: Path) -> None:
    job = tmp_path / "lic.sh"
    job.write_text("#!/bin/sh\n#SBATCH -L matlab:2,ansys\ntrue\n")
    assert _build([str(job)])["licenses"] == {"matlab": 2, "ansys": 1}
    assert _build([str(job)], licenses="comsol:1")["licenses"] == {"comsol": 1}


def test_memory_per_host_on_the_command_line_overrides_memory_per_cpu(tmp_path: Path) -> None:
    job = tmp_path / "mem.sh"
    job.write_text("#!/bin/sh\n#SBATCH -n 4 --mem-per-cpu=1G\ntrue\n")
    body = _build([str(job)])
    assert body["mem_per_slot_mb"] == 1024 and body["memory_mb"] == 0
    body = _build([str(job)], memory="8G")
    assert "mem_per_slot_mb" not in body and body["memory_mb"] == 8192


class _Client:
    """What `xce job submit` talks to, recording the body it sends."""

    sent: list[dict[str, Any]] = []

    def submit(self, body: dict[str, Any]) -> dict[str, Any]:
        self.sent.append(body)
        return {"job_id": "7", "queue": "normal"}


def _xce_submit(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    """Run `xce job submit ARGS` as the command line does, against `_Client`."""
    from xce.cli import jobs, main

    _Client.sent = []
    monkeypatch.setattr(jobs, "call_light", lambda run, controller: run(_Client()))
    monkeypatch.setattr(sys, "argv", ["xce", "job", "submit", *args])
    with pytest.raises(SystemExit) as caught:
        main.run(["job", "submit", *args])
    return int(caught.value.code or 0)


def test_the_command_line_sends_what_the_script_asks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.sh").write_text(
        "#SBATCH --nodes=2 --ntasks-per-node=4   # eight tasks\n"
        "#SBATCH --licenses=matlab:1 --account=proj --qos=debug\n"
        "srun ./app\n"
    )
    assert _xce_submit(monkeypatch, "job.sh") == 0
    (sent,) = _Client.sent
    assert sent["name"] == "job.sh" and sent["slots"] == 8
    assert sent["resources"] == "span[ptile=4]" and sent["licenses"] == {"matlab": 1}
    assert sent["account"] == "proj" and sent["qos"] == "debug"
    assert "Job <7> is submitted" in capsys.readouterr().out


def test_the_command_line_refuses_a_plain_text_file_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.txt").write_text("echo hello\n")
    assert _xce_submit(monkeypatch, "job.txt") == 1
    assert _Client.sent == []
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "job.txt has no #! line" in err
    assert _xce_submit(monkeypatch, "--", "./job.txt") == 0
    assert _Client.sent[0]["command"] == "./job.txt"
