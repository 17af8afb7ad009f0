"""The CLI's settings from the user's client file and the site's: the user's values win key
by key, the site fills the rest, each path is relative to its own file, and the message of a
TLS failure names the CA file tried and the setting it came from."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from xce.cli.common import client_settings
from xce.client.errors import ca_note


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    for key in ("XCE_TOKEN", "XCE_CONTROLLERS", "XCE_CA_FILE", "XCE_INSECURE", "XCE_SOCKET"):
        monkeypatch.delenv(key, raising=False)
    user, site = tmp_path / "home" / "client.toml", tmp_path / "etc" / "client.toml"
    user.parent.mkdir()
    site.parent.mkdir()
    monkeypatch.setenv("XCE_CLIENT_CONFIG", str(user))
    monkeypatch.setenv("XCE_SITE_CONFIG", str(site))
    return user, site


def test_the_site_file_alone_gives_controllers_and_ca(files: tuple[Path, Path]) -> None:
    user, site = files
    site.write_text('controllers = ["https://ctl:6820"]\nca_file = "ca.pem"\n')
    settings = client_settings()
    assert settings.controllers == ["https://ctl:6820"]
    assert settings.ca_file == site.parent / "ca.pem"  # relative to the site file
    assert settings.ca_source.startswith(f"ca_file in {site}")
    assert not user.exists()


def test_the_users_values_win_key_by_key(files: tuple[Path, Path]) -> None:
    user, site = files
    site.write_text('controllers = ["https://site:6820"]\nca_file = "/etc/xce/ca.pem"\n')
    user.write_text('controllers = ["https://mine:6820"]\n')
    settings = client_settings()
    assert settings.controllers == ["https://mine:6820"]  # the user's
    assert settings.ca_file == Path("/etc/xce/ca.pem")  # the site's: the user set none
    user.write_text('ca_file = "my-ca.pem"\n')
    settings = client_settings()
    assert settings.controllers == ["https://site:6820"]
    assert settings.ca_file == user.parent / "my-ca.pem"
    assert str(user) in settings.ca_note() and "my-ca.pem" in settings.ca_note()


def test_environment_and_command_line_win_over_both(
    files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    user, site = files
    site.write_text('controllers = ["https://site:6820"]\nca_file = "/etc/xce/ca.pem"\n')
    monkeypatch.setenv("XCE_CONTROLLERS", "https://env:6820")
    monkeypatch.setenv("XCE_CA_FILE", str(user.parent / "env-ca.pem"))
    settings = client_settings()
    assert settings.controllers == ["https://env:6820"]
    assert settings.ca_file == user.parent / "env-ca.pem"
    assert "(XCE_CA_FILE)" in settings.ca_note()
    assert client_settings(["https://cli:6820"]).controllers == ["https://cli:6820"]


def test_no_site_file_an_empty_variable_or_an_unreadable_one(
    files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    user, site = files
    # No file at all: the built-in default, and the note says where a CA would go.
    settings = client_settings()
    assert settings.controllers == ["http://127.0.0.1:6820"] and settings.ca_file is None
    note = settings.ca_note()
    assert note.startswith("no CA file was configured") and str(user) in note and str(site) in note
    monkeypatch.setenv("XCE_SITE_CONFIG", "")
    assert "XCE_SITE_CONFIG is empty" in client_settings().ca_note()
    # A site file in a folder this account cannot enter is skipped, and the note says so
    # (the cluster directory is 0700; root enters it anyway, so a folder is faked).
    monkeypatch.setenv("XCE_SITE_CONFIG", str(site))
    site.write_text('controllers = ["https://site:6820"]\n')

    read_text = Path.read_text

    def denied(self: Path, *args: object, **kwargs: object) -> str:
        if self == site:
            raise PermissionError(13, "Permission denied", str(self))
        return read_text(self)

    monkeypatch.setattr(Path, "read_text", denied)
    skipped = client_settings()
    assert skipped.controllers == ["http://127.0.0.1:6820"]
    assert f"the site config {site} is not readable" in skipped.ca_note()


def test_a_broken_site_file_is_one_line_naming_it(files: tuple[Path, Path]) -> None:
    _, site = files
    site.write_text("controllers = [\n")
    with pytest.raises(typer.Exit):
        client_settings()


def test_the_tls_note_names_the_file_or_its_absence() -> None:
    assert ca_note(Path("/x/ca.pem"), "ca_file in /etc/xce/client.toml") == (
        "CA file tried: /x/ca.pem (ca_file in /etc/xce/client.toml)"
    )
    assert "no CA file was configured ([tls] ca_file in c.toml)" in ca_note(
        None, "[tls] ca_file in c.toml"
    )
