"""Figure 7: the packaged artefacts' size and start-up time (`xce --version`).

Measures what packaging/build-binary and packaging/build-appimage left in dist/ (it builds
nothing: a missing artefact is reported as such). Each command runs in a bare environment
from a temp dir; the median of `plan.repeats` runs is reported. The onefile unpacks itself at
every start, the onedir (inside the AppImage) does not; `--appimage-extract-and-run` also
re-extracts the whole squashfs image each time.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from bench.common import Plan, Row, median

DIST = Path(__file__).resolve().parent.parent / "dist"
TARGET_S = 2.0  # what an admin typing `xce job list` on a node should not wait longer than


def _start_s(cmd: list[str], plan: Plan) -> float:
    runs = []
    for _ in range(max(plan.repeats, 3)):
        started = time.perf_counter()
        subprocess.run(
            cmd,
            capture_output=True,
            check=True,
            timeout=120,
            cwd=plan.root,
            env={"PATH": "/usr/bin:/bin", "HOME": str(plan.root)},
        )
        runs.append(time.perf_counter() - started)
    return median(runs)


def run(plan: Plan) -> list[Row]:
    artefacts = [
        ("onefile dist/xce", DIST / "xce", []),
        ("onedir dist/xce-onedir/xce", DIST / "xce-onedir" / "xce", []),
        (
            "AppImage, --appimage-extract-and-run",
            DIST / "xce-x86_64.AppImage",
            ["--appimage-extract-and-run"],
        ),
    ]
    rows = []
    for name, path, extra in artefacts:
        if not path.exists():
            rows.append(Row(f"7 {name}", "not built (packaging/build-binary, build-appimage)"))
            continue
        files = [f for f in path.parent.rglob("*") if f.is_file()] if "onedir" in name else [path]
        size = sum(f.stat().st_size for f in files) / 2**20
        seconds = _start_s([str(path), *extra, "--version"], plan)
        verdict = "pass" if seconds < TARGET_S else "missed"
        rows.append(
            Row(
                f"7 {name}: size, `xce --version`",
                f"{size:.1f} MiB, {seconds:.2f} s",
                f"< {TARGET_S:.0f} s",
                verdict,
                {"size_mib": size, "start_s": seconds},
            )
        )
    return rows
