"""A real OpenLDAP `slapd` for the tests: own config, own database, own loopback ports.

The directory (dc=xce,dc=test) holds people, a read-only service account, a groupOfNames and
a posixGroup. Anonymous clients may only bind: searching needs the service account, which is
what the backend's search-then-bind does. The server speaks plain LDAP (StartTLS offered)
and LDAPS with a certificate from the test's own CA.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SUFFIX = "dc=xce,dc=test"
SERVICE_DN = f"cn=reader,ou=services,{SUFFIX}"
SERVICE_PASSWORD = "reader-secret"
PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw", "mallory": "mallory-pw"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ssha(password: str) -> str:
    """An OpenLDAP {SSHA} hash, so the directory never holds a plain password."""
    salt = os.urandom(8)
    digest = hashlib.sha1(password.encode() + salt).digest()
    return "{SSHA}" + base64.b64encode(digest + salt).decode()


def directory_ldif() -> str:
    """People, the service account and groups of both membership styles."""
    entries = [
        f"dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\ndc: xce\no: XCE test",
        f"dn: ou=people,{SUFFIX}\nobjectClass: organizationalUnit\nou: people",
        f"dn: ou=groups,{SUFFIX}\nobjectClass: organizationalUnit\nou: groups",
        f"dn: ou=services,{SUFFIX}\nobjectClass: organizationalUnit\nou: services",
        f"dn: {SERVICE_DN}\nobjectClass: organizationalRole\nobjectClass: simpleSecurityObject\n"
        f"cn: reader\nuserPassword: {ssha(SERVICE_PASSWORD)}",
    ]
    for uid_number, (uid, password) in enumerate(sorted(PASSWORDS.items()), start=20001):
        entries.append(
            f"dn: uid={uid},ou=people,{SUFFIX}\nobjectClass: inetOrgPerson\n"
            f"objectClass: posixAccount\nuid: {uid}\ncn: {uid.title()}\nsn: {uid.title()}\n"
            f"uidNumber: {uid_number}\ngidNumber: 20000\nhomeDirectory: /home/{uid}\n"
            f"userPassword: {ssha(password)}"
        )
    # A user without any password: a bind with an empty password would be "anonymous".
    entries.append(
        f"dn: uid=nopass,ou=people,{SUFFIX}\nobjectClass: inetOrgPerson\nuid: nopass\n"
        "cn: Nopass\nsn: Nopass"
    )
    entries += [
        f"dn: cn=physics,ou=groups,{SUFFIX}\nobjectClass: groupOfNames\ncn: physics\n"
        f"member: uid=alice,ou=people,{SUFFIX}",
        f"dn: cn=admins,ou=groups,{SUFFIX}\nobjectClass: groupOfNames\ncn: admins\n"
        f"member: uid=bob,ou=people,{SUFFIX}",
        f"dn: cn=hpc,ou=groups,{SUFFIX}\nobjectClass: posixGroup\ncn: hpc\ngidNumber: 20000\n"
        "memberUid: alice\nmemberUid: bob",
    ]
    return "\n\n".join(entries) + "\n"


def slapd_conf(root: Path, cert_file: Path, key_file: Path, ca_file: Path) -> str:
    schema = Path("/etc/ldap/schema")
    includes = "".join(
        f"include {schema / n}.schema\n" for n in ("core", "cosine", "nis", "inetorgperson")
    )
    return f"""{includes}
modulepath /usr/lib/ldap
moduleload back_mdb
pidfile {root / "slapd.pid"}
argsfile {root / "slapd.args"}
TLSCACertificateFile {ca_file}
TLSCertificateFile {cert_file}
TLSCertificateKeyFile {key_file}

database mdb
maxsize 16777216
suffix "{SUFFIX}"
rootdn "cn=admin,{SUFFIX}"
rootpw {ssha("admin-secret")}
directory {root / "data"}
access to attrs=userPassword
    by anonymous auth
    by * none
access to *
    by users read
    by * none
"""


@dataclass
class Slapd:
    """A running slapd; `ldap_url` (StartTLS available) and `ldaps_url`."""

    process: subprocess.Popen[bytes]
    ldap_port: int
    ldaps_port: int
    log_file: Path

    @property
    def ldap_url(self) -> str:
        return f"ldap://127.0.0.1:{self.ldap_port}"

    @property
    def ldaps_url(self) -> str:
        return f"ldaps://127.0.0.1:{self.ldaps_port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_slapd(root: Path, cert_file: Path, key_file: Path, ca_file: Path) -> Slapd:
    """Load the test directory with slapadd, then start slapd in the foreground (-d 0)."""
    slapd = shutil.which("slapd") or "/usr/sbin/slapd"
    (root / "data").mkdir(parents=True)
    conf = root / "slapd.conf"
    conf.write_text(slapd_conf(root, cert_file, key_file, ca_file))
    ldif = root / "directory.ldif"
    ldif.write_text(directory_ldif())
    subprocess.run(
        [shutil.which("slapadd") or "/usr/sbin/slapadd", "-f", str(conf), "-l", str(ldif)],
        check=True,
        capture_output=True,
    )
    ldap_port, ldaps_port = free_port(), free_port()
    log_file = root / "slapd.log"
    with log_file.open("wb") as log:
        process = subprocess.Popen(
            [
                slapd,
                "-d",
                "0",
                "-f",
                str(conf),
                "-h",
                f"ldap://127.0.0.1:{ldap_port}/ ldaps://127.0.0.1:{ldaps_port}/",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = Slapd(process, ldap_port, ldaps_port, log_file)
    deadline = time.monotonic() + 15
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"slapd exited: {log_file.read_text()}")
        try:
            for port in (ldap_port, ldaps_port):
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server
        except OSError:
            if time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"slapd did not listen: {log_file.read_text()}") from None
            time.sleep(0.05)
