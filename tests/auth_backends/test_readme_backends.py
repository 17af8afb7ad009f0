"""The "Login backends" example in docs/identity.md documents exactly the keys each backend
accepts."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from xce.auth.backends import ldap, munge, oauth2, pam
from xce.config.check import Table

DOC = Path(__file__).resolve().parents[2] / "docs" / "identity.md"


def documented_backends() -> dict[str, set[str]]:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Login backends") :]
    block = re.search(r"```toml\n(.*?)```", section, re.S)
    assert block, "the Login backends section has no toml example"
    tables = tomllib.loads(block.group(1))["auth"]["backend"]
    return {t["type"]: set(t) - {"type"} for t in tables}


@pytest.mark.parametrize(
    ("kind", "table"),
    [
        ("ldap", ldap.LdapOptions),
        ("pam", pam.PamOptions),
        ("oauth2", oauth2.OAuth2Options),
        ("munge", munge.MungeOptions),
    ],
)
def test_docs_show_every_key(kind: str, table: type[Table]) -> None:
    """Every key of the backend's table but `name` (which every backend has)."""
    assert documented_backends()[kind] == set(table.__struct_fields__) - {"name"}
