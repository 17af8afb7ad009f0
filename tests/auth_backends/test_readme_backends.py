"""The README's "Login backends" example documents exactly the keys each backend accepts."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from xce.auth.backends import ldap, oauth2, pam

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_backends() -> dict[str, set[str]]:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Login backends") :]
    block = re.search(r"```toml\n(.*?)```", section, re.S)
    assert block, "the Login backends section has no toml example"
    tables = tomllib.loads(block.group(1))["auth"]["backend"]
    return {t["type"]: set(t) - {"type"} for t in tables}


@pytest.mark.parametrize("module", [ldap, pam, oauth2], ids=lambda m: m.__name__)
def test_readme_shows_every_key(module: object) -> None:
    kind = module.__name__.rsplit(".", 1)[1]  # type: ignore[attr-defined]
    assert readme_backends()[kind] == set(module.CONFIG_KEYS)  # type: ignore[attr-defined]
