"""Slurm's compressed host lists: `n[01-03],gpu7` for n01, n02, n03, gpu7.

Why: scripts read `$SLURM_JOB_NODELIST` and pass it to `scontrol show hostnames`, MPI
launchers and their own parsers, which expect this form, not a plain comma list. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_TRAILING_NUMBER = re.compile(r"^(.*?)(\d+)$")


def compress(hosts: Iterable[str]) -> str:
    """The Slurm form of `hosts`, in the given order of first appearance per prefix: runs
    of consecutive numbers with the same prefix and width are folded into one bracket."""
    groups: dict[tuple[str, str], list[str]] = {}  # (prefix, suffix kind) -> numbers
    order: list[tuple[str, str]] = []
    plain: dict[str, None] = {}
    for host in dict.fromkeys(hosts):
        m = _TRAILING_NUMBER.match(host)
        if not m or "[" in host or "," in host:
            key = (host, "")
            plain[host] = None
        else:
            key = (m.group(1), "#")
            groups.setdefault(key, []).append(m.group(2))
        if key not in order:
            order.append(key)
    parts = []
    for prefix, kind in order:
        if not kind:
            parts.append(prefix)
            continue
        numbers = groups[(prefix, kind)]
        if len(numbers) == 1:
            parts.append(prefix + numbers[0])
        else:
            parts.append(f"{prefix}[{','.join(_ranges(numbers))}]")
    return ",".join(parts)


def _ranges(numbers: list[str]) -> list[str]:
    """["01", "02", "03", "07"] -> ["01-03", "07"]: a run needs consecutive values and,
    where a number is zero-padded, the same width (Slurm keeps the padding)."""
    ordered = sorted(set(numbers), key=lambda n: (int(n), len(n)))
    out: list[str] = []
    start = prev = ordered[0]
    for number in ordered[1:]:
        padded = number.startswith("0") or prev.startswith("0")
        if int(number) == int(prev) + 1 and (len(number) == len(prev) or not padded):
            prev = number
            continue
        out.append(start if start == prev else f"{start}-{prev}")
        start = prev = number
    out.append(start if start == prev else f"{start}-{prev}")
    return out


def expand(text: str) -> list[str]:
    """The host names of a compressed list (`scontrol show hostnames`)."""
    out: list[str] = []
    for part in _split_top(text):
        m = re.fullmatch(r"(.*?)\[([^\]]+)\](.*)", part)
        if not m:
            if part:
                out.append(part)
            continue
        prefix, body, suffix = m.groups()
        for item in body.split(","):
            low, sep, high = item.partition("-")
            if not sep:
                out.append(f"{prefix}{low}{suffix}")
                continue
            width = len(low) if low.startswith("0") else 1
            for n in range(int(low), int(high) + 1):
                out.append(f"{prefix}{n:0{width}d}{suffix}")
    return out


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets."""
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def tasks_per_node(counts: list[int]) -> str:
    """SLURM_TASKS_PER_NODE: [2, 2, 2, 1] -> "2(x3),1"."""
    out: list[str] = []
    i = 0
    while i < len(counts):
        j = i
        while j + 1 < len(counts) and counts[j + 1] == counts[i]:
            j += 1
        run = j - i + 1
        out.append(str(counts[i]) if run == 1 else f"{counts[i]}(x{run})")
        i = j + 1
    return ",".join(out)
