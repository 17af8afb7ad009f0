"""Sizes, times and counts as Slurm and LSF write them in directives.

Why one module: the same size (`4G`, `4GB`, `512MB`, `1.5G`) turns up in `#SBATCH --mem`,
`#BSUB -M`, `rusage[mem=...]` and `select[mem>...]`, and every one must read it alike and
fail with a message that names the option, never a bare Python conversion error. Pure except
for `lsf_begin`, which reads today's date for the parts a `bsub -b` time leaves out.
"""

from __future__ import annotations

import re
import time

_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([KMGTkmgt]?)[Bb]?$")
_FACTOR = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def megabytes(text: str, default_unit: str = "M") -> int:
    """`4000`, `4G`, `4GB`, `512M`, `512MB`, `1.5G`, `100K` -> MB (at least 1 for a
    non-zero size). A bare number is in `default_unit`: MB, as Slurm's `--mem` and as LSF
    sites set `LSF_UNIT_FOR_LIMITS=MB` (LSF's own default for `-M` is KB, which almost no
    site keeps)."""
    m = _SIZE.match(text.strip())
    if not m:
        raise ValueError(f"memory size {text!r}: use a number with K, M, G or T (MB without)")
    value = float(m.group(1)) * _FACTOR[(m.group(2) or default_unit).upper()]
    return max(1, round(value)) if value else 0


# A size with a unit inside an LSF resource string (`mem=4GB`, `mem>512MB`), not part of a
# longer word (`X86_64`, `E5-2680v4` stay) and not inside quotes (the first alternative
# keeps a quoted string as it is).
_SIZE_IN_TEXT = re.compile(
    r"""("[^"]*"|'[^']*')|(?<![\w.])(\d+(?:\.\d+)?)([KMGTkmgt])[Bb]?(?![\w.])"""
)


def sizes_to_megabytes(text: str) -> str:
    """Every `4GB`/`512M`/`1.5T` of an LSF resource string as a number of MB, which is
    what XCE's resource strings count in (`rusage[mem=4GB]` -> `rusage[mem=4096]`)."""

    def one(m: re.Match[str]) -> str:
        if m.group(1):
            return m.group(1)
        return str(megabytes(m.group(2) + m.group(3)))

    return _SIZE_IN_TEXT.sub(one, text)


def whole(option: str, text: str, least: int = 1) -> int:
    """A count such as `--ntasks 4`: a whole number of at least `least`, else a message in
    words naming the option (never Python's "invalid literal for int()")."""
    value = text.strip()
    if not value.isdigit() or int(value) < least:
        raise ValueError(f"{option} {text!r}: use a whole number of at least {least}")
    return int(value)


_SLURM_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def slurm_seconds(text: str) -> int:
    """Slurm times: `M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S`."""
    m = _SLURM_TIME.match(text.strip())
    if not m or text.strip() in ("", "-"):
        raise ValueError(f"time {text!r}: use minutes, MM:SS, HH:MM:SS or D-HH[:MM[:SS]]")
    days, a, b, c = m.groups()
    if days is not None:
        h, mi, s = int(a), int(b or 0), int(c or 0)
        return int(days) * 86400 + h * 3600 + mi * 60 + s
    if c is not None:
        return int(a) * 3600 + int(b) * 60 + int(c)
    if b is not None:
        return int(a) * 60 + int(b)
    return int(a) * 60


_LSF_BEGIN = re.compile(r"^(?:(?:(?:(\d{4}):)?(\d{1,2}):)?(\d{1,2}):)?(\d{1,2}):(\d{2})$")


def lsf_begin(text: str) -> str:
    """bsub -b `[[[YYYY:]MM:]DD:]hh:mm` -> the `--begin` text (`YYYY-MM-DDThh:mm` local, or
    `hh:mm`: today, tomorrow once passed); missing year, month, day are the current ones."""
    m = _LSF_BEGIN.match(text.strip())
    if m is None:
        raise ValueError(f"begin time {text!r}: use [[[YYYY:]MM:]DD:]hh:mm")
    year, month, day, hour, minute = m.groups()
    if day is None:
        return f"{int(hour):02d}:{minute}"
    now = time.localtime()
    return (
        f"{int(year or now.tm_year):04d}-{int(month or now.tm_mon):02d}-{int(day):02d}"
        f"T{int(hour):02d}:{minute}"
    )
