"""packaging/pyinstaller/datafiles.py, for the tests that check what the binary ships: a build
script's module, not an installed one, so it is loaded from its file."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def datafiles() -> ModuleType:
    path = ROOT / "packaging" / "pyinstaller" / "datafiles.py"
    spec = importlib.util.spec_from_file_location("xce_build_datafiles", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
