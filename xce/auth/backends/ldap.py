"""Login against an LDAP directory (OpenLDAP, 389-ds, Active Directory) with ldap3.

Search-then-bind: a service account (`bind_dn`, password from `bind_password_file`) finds the
user's entry with `user_filter` (the typed name is escaped with `escape_filter_chars`, so
`*)(uid=*` is a literal, not a wildcard), then a second connection binds as that entry with the
typed password: the directory itself checks the password. Exactly one entry must match.
An empty password is refused before the directory is asked: LDAP treats a simple bind with
an empty password as an *anonymous* bind that succeeds (RFC 4513 §5.1.2).

Groups come from `group_base` searched with `group_filter`, where `{dn}` is the user's entry
and `{username}` the user's name (both escaped), so groupOfNames (`member`) and posixGroup
(`memberUid`) both work.

Transport: `ldaps://` or `ldap://` with `start_tls = true`; the server's certificate is always
validated (ssl.CERT_REQUIRED and the host name) against `ca_file` or the system's CAs: ldap3's
default `Tls()` validates nothing. Plain `ldap://` without StartTLS is allowed only for a
loopback server. Every blocking ldap3 call runs in the backend's own threads with connect and
receive timeouts; a directory that cannot be reached raises `BackendUnavailable`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import math
import socket
import ssl
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ldap3 import NONE, SIMPLE, SUBTREE, Connection, Server, Tls
from ldap3.core.exceptions import LDAPException
from ldap3.utils.conv import escape_filter_chars

from xce.auth.backends.base import BackendUnavailable, Principal, blocking_pool
from xce.auth.backends.options import Text, ca_file, secret
from xce.config.check import PosFloat, Table, convert
from xce.core.validation import Invalid

log = logging.getLogger(__name__)

DEFAULT_USER_FILTER = "(&(objectClass=posixAccount)(uid={username}))"
DEFAULT_GROUP_FILTER = (
    "(|(&(objectClass=groupOfNames)(member={dn}))(&(objectClass=posixGroup)(memberUid={username})))"
)
_OK, _SIZE_LIMIT_EXCEEDED, _INVALID_CREDENTIALS = 0, 4, 49


@dataclass(frozen=True)
class LdapBackend:
    """One directory server; see the module docstring for what each setting promises."""

    host: str
    port: int
    use_ssl: bool
    start_tls: bool
    ca_file: Path | None
    bind_dn: str
    bind_password: str = field(repr=False)
    user_base: str
    user_filter: str = DEFAULT_USER_FILTER
    user_attribute: str = "uid"
    group_base: str = ""
    group_filter: str = DEFAULT_GROUP_FILTER
    group_attribute: str = "cn"
    timeout_s: float = 5.0
    name: str = "ldap"
    threads: ThreadPoolExecutor = field(
        default_factory=lambda: blocking_pool("ldap"), repr=False, compare=False
    )

    async def authenticate(self, username: str, password: str) -> Principal | None:
        """The principal when the directory accepts the password, else None; raises
        `BackendUnavailable` when the directory cannot be reached or the service bind fails."""
        if not username or not password or "\x00" in username:
            return None
        return await asyncio.get_running_loop().run_in_executor(
            self.threads, self._authenticate, username, password
        )

    # --- blocking part, in a worker thread -------------------------------------------------

    def _server(self) -> Server:
        tls = None
        if self.use_ssl or self.start_tls:
            tls = Tls(
                validate=ssl.CERT_REQUIRED,
                ca_certs_file=str(self.ca_file) if self.ca_file else None,
                sni=self.host,
            )
        return Server(
            self.host,
            port=self.port,
            use_ssl=self.use_ssl,
            tls=tls,
            get_info=NONE,
            connect_timeout=self.timeout_s,
        )

    def _open(self, server: Server, dn: str | None, password: str | None) -> Connection:
        """An open (TLS-protected where configured) connection, not yet bound."""
        conn = Connection(
            server,
            user=dn,
            password=password,
            authentication=SIMPLE if dn else None,
            read_only=True,
            receive_timeout=max(1, math.ceil(self.timeout_s)),
            raise_exceptions=False,
        )
        conn.open()
        # ldap3 writes each request in several small pieces: without TCP_NODELAY, Nagle's
        # algorithm and delayed ACKs add ~40 ms per request on TLS (measured: a login over
        # LDAPS took ~120 ms, with TCP_NODELAY ~20 ms).
        conn.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.start_tls and not conn.start_tls():
            conn.unbind()
            raise BackendUnavailable(
                f"LDAP {self.host}:{self.port}: StartTLS refused: {conn.result}"
            )
        return conn

    def _authenticate(self, username: str, password: str) -> Principal | None:
        try:
            server = self._server()
            service = self._open(server, self.bind_dn or None, self.bind_password or None)
            try:
                if self.bind_dn and not service.bind():
                    raise BackendUnavailable(
                        f"LDAP service bind as {self.bind_dn} failed: "
                        f"{service.result.get('description')}"
                    )
                found = self._find_user(service, username)
                if found is None:
                    return None
                dn, canonical = found
                if not self._password_ok(server, dn, password):
                    return None
                groups = self._groups(service, dn, canonical)
            finally:
                service.unbind()
        except LDAPException as exc:
            raise BackendUnavailable(f"LDAP {self.host}:{self.port} unavailable: {exc}") from exc
        return Principal(user=canonical, groups=groups, backend=self.name)

    def _search(
        self, conn: Connection, base: str, query: str, attribute: str, limit: int
    ) -> list[dict[str, Any]]:
        conn.search(
            base,
            query,
            search_scope=SUBTREE,
            attributes=[attribute],
            size_limit=limit,
            time_limit=max(1, int(self.timeout_s)),
        )
        code = conn.result.get("result")
        if code not in (_OK, _SIZE_LIMIT_EXCEEDED):
            raise BackendUnavailable(
                f"LDAP search under {base} failed: "
                f"{conn.result.get('description')} "
                f"{conn.result.get('message', '')}".rstrip()
            )
        return [e for e in conn.response or () if e.get("type") == "searchResEntry"]

    def _find_user(self, conn: Connection, username: str) -> tuple[str, str] | None:
        """The DN and directory spelling of the one entry matching `username`, or None."""
        query = self.user_filter.replace("{username}", escape_filter_chars(username))
        entries = self._search(conn, self.user_base, query, self.user_attribute, limit=2)
        if len(entries) != 1:
            if entries:
                log.warning(
                    "ldap: %d entries match %r; refusing an ambiguous login", len(entries), username
                )
            return None
        entry = entries[0]
        value = entry.get("attributes", {}).get(self.user_attribute)
        canonical = value[0] if isinstance(value, list) and value else value
        return entry["dn"], str(canonical or username)

    def _password_ok(self, server: Server, dn: str, password: str) -> bool:
        user = self._open(server, dn, password)
        try:
            if user.bind():
                return True
            if user.result.get("result") != _INVALID_CREDENTIALS:
                log.warning("ldap: bind as %s refused: %s", dn, user.result.get("description"))
            return False
        finally:
            user.unbind()

    def _groups(self, conn: Connection, dn: str, username: str) -> tuple[str, ...]:
        if not self.group_base:
            return ()
        query = self.group_filter.replace("{dn}", escape_filter_chars(dn)).replace(
            "{username}", escape_filter_chars(username)
        )
        names: set[str] = set()
        for entry in self._search(conn, self.group_base, query, self.group_attribute, 0):
            value = entry.get("attributes", {}).get(self.group_attribute)
            names.update(str(v) for v in (value if isinstance(value, list) else [value]) if v)
        return tuple(sorted(names))


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class LdapOptions(Table, frozen=True):
    """The keys of a `type = "ldap"` `[[auth.backend]]` table (README documents each)."""

    url: Text
    user_base: Text
    start_tls: bool = False
    ca_file: str | None = None
    bind_dn: str = ""
    bind_password_file: str | None = None
    user_filter: str = DEFAULT_USER_FILTER
    user_attribute: str = "uid"
    group_base: str = ""
    group_filter: str = DEFAULT_GROUP_FILTER
    group_attribute: str = "cn"
    timeout_s: PosFloat = 5.0
    name: str = "ldap"

    def __post_init__(self) -> None:
        url = urllib.parse.urlsplit(self.url)
        if url.scheme not in ("ldap", "ldaps") or not url.hostname or url.path not in ("", "/"):
            raise Invalid(
                f"url must be ldap://HOST[:PORT] or ldaps://HOST[:PORT], got {self.url!r}"
            )
        try:
            url.port  # noqa: B018 (raises on a bad port)
        except ValueError:
            raise Invalid(f"url has a bad port: {self.url!r}") from None
        if url.scheme == "ldaps" and self.start_tls:
            raise Invalid("start_tls cannot be used with ldaps:// (already TLS)")
        if url.scheme == "ldap" and not self.start_tls and not _is_loopback(url.hostname):
            raise Invalid(
                "url sends passwords in clear text: use ldaps:// or "
                "start_tls = true (plain ldap:// only for a loopback server)"
            )
        if bool(self.bind_dn) != (self.bind_password_file is not None):
            missing = "bind_password_file" if self.bind_dn else "bind_dn"
            raise Invalid(f"{missing} is required: bind_dn and bind_password_file go together")
        if "{username}" not in self.user_filter or not self.user_filter.startswith("("):
            raise Invalid(
                f"user_filter must be an LDAP filter holding {{username}}, got {self.user_filter!r}"
            )


def from_config(section: dict[str, Any], base: Path, where: str) -> LdapBackend:
    """Validate an `[[auth.backend]]` table of `type = "ldap"` and build its backend."""
    o = convert(section, LdapOptions, where)
    url = urllib.parse.urlsplit(o.url)
    assert url.hostname is not None  # checked by LdapOptions
    use_ssl = url.scheme == "ldaps"
    return LdapBackend(
        host=url.hostname,
        port=url.port or (636 if use_ssl else 389),
        use_ssl=use_ssl,
        start_tls=o.start_tls,
        ca_file=ca_file(where, base, o.ca_file),
        bind_dn=o.bind_dn,
        bind_password=secret(where, "bind_password_file", base, o.bind_password_file),
        user_base=o.user_base,
        user_filter=o.user_filter,
        user_attribute=o.user_attribute or "uid",
        group_base=o.group_base,
        group_filter=o.group_filter,
        group_attribute=o.group_attribute or "cn",
        timeout_s=o.timeout_s,
        name=o.name,
    )
