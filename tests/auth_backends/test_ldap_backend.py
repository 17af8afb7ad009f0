"""The LDAP backend against a real OpenLDAP slapd started by the test (see slapd.py)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.auth_backends.certs import issue_server_cert, make_ca
from tests.auth_backends.slapd import (
    PASSWORDS,
    SERVICE_DN,
    SERVICE_PASSWORD,
    SUFFIX,
    Slapd,
    free_port,
    start_slapd,
)
from xce.auth.backends import BackendUnavailable, PasswordBackend, build_backend
from xce.auth.backends.ldap import LdapBackend
from xce.core.errors import ConfigError

pytestmark = pytest.mark.skipif(
    shutil.which("slapd") is None and not Path("/usr/sbin/slapd").exists(),
    reason="OpenLDAP slapd is not installed (apt-get install slapd)",
)


@dataclass(frozen=True)
class Directory:
    server: Slapd
    root: Path
    ca_file: Path
    other_ca_file: Path
    password_file: Path


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Directory]:
    root = tmp_path_factory.mktemp("slapd")
    ca = make_ca(root / "pki", "LDAP test CA")
    other = make_ca(root / "other", "Untrusted CA")
    cert, key = issue_server_cert(ca, root / "pki", "slapd")
    server = start_slapd(root / "server", cert, key, ca.cert_file)
    password_file = root / "bind.password"
    password_file.write_text(SERVICE_PASSWORD + "\n")
    password_file.chmod(0o600)  # a secret: the controller refuses one others may read
    try:
        yield Directory(server, root, ca.cert_file, other.cert_file, password_file)
    finally:
        server.stop()


def config(d: Directory, **overrides: Any) -> dict[str, Any]:
    section: dict[str, Any] = {
        "type": "ldap",
        "url": d.server.ldaps_url,
        "ca_file": str(d.ca_file),
        "bind_dn": SERVICE_DN,
        "bind_password_file": str(d.password_file),
        "user_base": f"ou=people,{SUFFIX}",
        "group_base": f"ou=groups,{SUFFIX}",
        "timeout_s": 3,
    }
    section.update(overrides)
    return {k: v for k, v in section.items() if v is not None}


def backend(d: Directory, **overrides: Any) -> LdapBackend:
    return build_backend(config(d, **overrides), d.root, "auth.backend[1]")


async def test_ldaps_login_maps_both_group_styles(directory: Directory) -> None:
    assert isinstance(backend(directory), PasswordBackend)
    principal = await backend(directory).authenticate("alice", PASSWORDS["alice"])
    assert principal is not None
    assert principal.user == "alice" and principal.backend == "ldap"
    # physics is a groupOfNames (member: DN), hpc a posixGroup (memberUid: name)
    assert principal.groups == ("hpc", "physics")
    bob = await backend(directory).authenticate("bob", PASSWORDS["bob"])
    assert bob is not None and bob.groups == ("admins", "hpc")


async def test_starttls_login(directory: Directory) -> None:
    b = backend(directory, url=directory.server.ldap_url, start_tls=True)
    principal = await b.authenticate("alice", PASSWORDS["alice"])
    assert principal is not None and principal.user == "alice"


async def test_user_name_is_returned_as_the_directory_spells_it(directory: Directory) -> None:
    principal = await backend(directory).authenticate("ALICE", PASSWORDS["alice"])
    assert principal is not None and principal.user == "alice"


async def test_without_group_base_there_are_no_groups(directory: Directory) -> None:
    principal = await backend(directory, group_base=None).authenticate("alice", PASSWORDS["alice"])
    assert principal is not None and principal.groups == ()


@pytest.mark.parametrize(
    ("user", "password"),
    [
        ("alice", "wrong"),  # wrong password
        ("alice", PASSWORDS["bob"]),  # another user's password
        ("nosuchuser", "alice-pw"),  # unknown user
        ("nopass", "anything"),  # entry without a password
    ],
)
async def test_bad_credentials_are_refused(directory: Directory, user: str, password: str) -> None:
    assert await backend(directory).authenticate(user, password) is None


@pytest.mark.parametrize(
    "user", ["*", "*)(uid=*", "alice)(|(uid=*", "al*", "*)(objectClass=*", "alice\\2a", "\\*"]
)
async def test_filter_injection_does_not_log_in(directory: Directory, user: str) -> None:
    b = backend(directory)
    for password in {*PASSWORDS.values(), "x"}:
        assert await b.authenticate(user, password) is None


async def test_injection_would_have_matched_without_escaping(directory: Directory) -> None:
    """The injection tests above can fail: unescaped, `*` finds every person."""
    import ssl

    from ldap3 import Connection, Server, Tls

    tls = Tls(validate=ssl.CERT_REQUIRED, ca_certs_file=str(directory.ca_file))
    conn = Connection(
        Server(directory.server.ldaps_url, use_ssl=True, tls=tls),
        SERVICE_DN,
        SERVICE_PASSWORD,
        auto_bind=True,
    )
    conn.search(f"ou=people,{SUFFIX}", "(&(objectClass=posixAccount)(uid=*))")
    assert len(conn.entries) == len(PASSWORDS)
    conn.unbind()


@pytest.mark.parametrize("user", ["alice", "nopass"])
async def test_empty_password_is_refused(directory: Directory, user: str) -> None:
    assert await backend(directory).authenticate(user, "") is None


async def test_untrusted_server_certificate_is_refused(directory: Directory) -> None:
    for overrides in (
        {"ca_file": str(directory.other_ca_file)},
        {
            "ca_file": str(directory.other_ca_file),
            "url": directory.server.ldap_url,
            "start_tls": True,
        },
        {"ca_file": None},
    ):  # system CAs do not know the test CA either
        with pytest.raises(BackendUnavailable, match="certificate verify failed"):
            await backend(directory, **overrides).authenticate("alice", PASSWORDS["alice"])


async def test_certificate_for_another_host_name_is_refused(directory: Directory) -> None:
    pki = directory.root / "wrongname"
    pki.mkdir()
    ca = make_ca(pki, "Wrong-name CA")
    cert, key = issue_server_cert(ca, pki, "slapd", hosts=("ldap.example.org",))
    server = start_slapd(pki / "server", cert, key, ca.cert_file)
    try:
        b = backend(directory, url=server.ldaps_url, ca_file=str(ca.cert_file))
        with pytest.raises(BackendUnavailable, match=r"doesn.t match any name"):
            await b.authenticate("alice", PASSWORDS["alice"])
    finally:
        server.stop()


async def test_server_down_is_backend_unavailable(directory: Directory) -> None:
    started = time.monotonic()
    for url in (f"ldaps://127.0.0.1:{free_port()}", f"ldap://127.0.0.1:{free_port()}"):
        with pytest.raises(BackendUnavailable, match="unavailable"):
            await backend(directory, url=url).authenticate("alice", PASSWORDS["alice"])
    assert time.monotonic() - started < 5


async def test_wrong_service_password_is_backend_unavailable(directory: Directory) -> None:
    wrong = directory.root / "wrong.password"
    wrong.write_text("not-the-password\n")
    with pytest.raises(BackendUnavailable, match="service bind"):
        await backend(directory, bind_password_file=str(wrong)).authenticate(
            "alice", PASSWORDS["alice"]
        )


async def test_anonymous_search_is_denied_by_this_directory(directory: Directory) -> None:
    """Without the service account the ACLs hide the people: no login, no false success."""
    b = backend(directory, bind_dn=None, bind_password_file=None)
    with pytest.raises(BackendUnavailable, match="search"):
        await b.authenticate("alice", PASSWORDS["alice"])


def test_a_ca_file_that_is_not_a_certificate_is_a_config_error(directory: Directory) -> None:
    bogus = directory.root / "not-a-ca.pem"
    bogus.write_text("hello\n")
    with pytest.raises(ConfigError, match=r"auth\.backend\[1\]\.ca_file .*no usable PEM"):
        backend(directory, ca_file=str(bogus))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"url": "http://127.0.0.1"}, r"auth\.backend\[1\]\.url must be ldap://"),
        ({"url": "ldap://ldap.example.org"}, r"auth\.backend\[1\]\.url sends passwords in clear"),
        ({"url": "ldaps://h:99999"}, r"auth\.backend\[1\]\.url has a bad port"),
        ({"start_tls": True}, r"auth\.backend\[1\]\.start_tls cannot be used with ldaps"),
        ({"start_tls": "yes"}, r"auth\.backend\[1\]\.start_tls must be a bool"),
        ({"user_filter": "(uid=alice)"}, r"auth\.backend\[1\]\.user_filter must be an LDAP filter"),
        ({"bind_password_file": None}, r"auth\.backend\[1\]\.bind_password_file is required"),
        ({"bind_password_file": "missing"}, r"auth\.backend\[1\]\.bind_password_file .*missing"),
        ({"ca_file": "nope.pem"}, r"auth\.backend\[1\]\.ca_file .*nope\.pem"),
        ({"user_base": None}, r"auth\.backend\[1\]\.user_base is required"),
        ({"timeout_s": 0}, r"auth\.backend\[1\]\.timeout_s must be positive"),
        ({"group_bse": "x"}, r"unknown key auth\.backend\[1\]\.group_bse"),
    ],
)
def test_config_errors_name_the_key(
    directory: Directory, overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        backend(directory, **overrides)
