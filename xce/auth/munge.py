"""MUNGE credentials through libmunge (ctypes): made by the CLI, checked by the controller.

Why MUNGE: on a Slurm-style site every node runs munged with one shared key, and a process
can ask its local munged for a credential that says "uid U, gid G made this at time T"; any
munged with the same key can check it. So a user on a login or compute node is who the node
says they are, with no password and nothing stored in their home. XCE uses a credential only
to get a short-lived token (`POST /api/v1/auth/munge`), never for every request.

The credential's payload binds it to XCE and to one cluster and makes it unique
(`login_payload`): `{"aud": <the cluster's token issuer>, "nonce": <random>, "ts": <now>}`.
Without the binding, a credential a user made for some other MUNGE-authenticated service (any
user can run one: `unmunge` decodes anyone's credential) could be forwarded to the controller
within its lifetime.

`create_key` writes a new site key (`xce init --munge-key`). This module is shared by both
sides (`xce.cli` and `xce.auth.backends` import it), and it uses the standard library alone:
the CLI imports it only when MUNGE is in use (libmunge is loaded on the first call), and a
test can run it from the system Python as an unprivileged user.
"""

from __future__ import annotations

import ctypes
import json
import re
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

DEFAULT_SOCKET = "/run/munge/munge.socket.2"  # munged's default (`munged --help`)
# A credential is one line of base64 between "MUNGE:" and ":"; ours are ~300 characters. The
# bound is what a controller reads before asking munged anything.
MAX_CREDENTIAL = 4096
MAX_PAYLOAD = 1024
CREDENTIAL = re.compile(r"MUNGE:[A-Za-z0-9+/]+={0,2}:")

# munge.h: munge_opt_t
OPT_TTL = 4
OPT_ENCODE_TIME = 6
OPT_SOCKET = 8

# munge.h: munge_err_t
EMUNGE_SNAFU = 1
EMUNGE_BAD_ARG = 2
EMUNGE_BAD_LENGTH = 3
EMUNGE_OVERFLOW = 4
EMUNGE_NO_MEMORY = 5
EMUNGE_SOCKET = 6
EMUNGE_TIMEOUT = 7
EMUNGE_BAD_CRED = 8
EMUNGE_BAD_VERSION = 9
EMUNGE_BAD_CIPHER = 10
EMUNGE_BAD_MAC = 11
EMUNGE_BAD_ZIP = 12
EMUNGE_BAD_REALM = 13
EMUNGE_CRED_INVALID = 14
EMUNGE_CRED_EXPIRED = 15
EMUNGE_CRED_REWOUND = 16
EMUNGE_CRED_REPLAYED = 17
EMUNGE_CRED_UNAUTHORIZED = 18

# Errors of munged or of this host, not of the credential: the caller is not to blame.
DAEMON_ERRORS = frozenset(
    {EMUNGE_SNAFU, EMUNGE_BAD_ARG, EMUNGE_OVERFLOW, EMUNGE_NO_MEMORY, EMUNGE_SOCKET, EMUNGE_TIMEOUT}
)

# One line per refusal a user may meet, saying what to do where there is something to do.
MESSAGES = {
    EMUNGE_BAD_LENGTH: "the MUNGE credential is too long",
    EMUNGE_BAD_CRED: "not a MUNGE credential",
    EMUNGE_BAD_VERSION: "the MUNGE credential has a version this munged does not know",
    EMUNGE_BAD_CIPHER: "the MUNGE credential uses a cipher this munged does not know",
    EMUNGE_BAD_MAC: "the MUNGE credential uses a MAC this munged does not know",
    EMUNGE_BAD_ZIP: "the MUNGE credential uses a compression this munged does not know",
    EMUNGE_BAD_REALM: "the MUNGE credential is for another security realm",
    EMUNGE_CRED_INVALID: (
        "invalid MUNGE credential (altered, or made by a munged with another key)"
    ),
    EMUNGE_CRED_EXPIRED: (
        "expired MUNGE credential (older than its time-to-live; are the nodes' clocks in step?)"
    ),
    EMUNGE_CRED_REWOUND: (
        "MUNGE credential from the future (the nodes' clocks disagree; check NTP)"
    ),
    EMUNGE_CRED_REPLAYED: "replayed MUNGE credential (each one logs in once)",
    EMUNGE_CRED_UNAUTHORIZED: "the MUNGE credential is restricted to another uid or gid",
}


class MungeError(Exception):
    """A libmunge call failed: `code` is munge_err_t (0 when libmunge itself is missing)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def daemon_fault(self) -> bool:
        """munged (or libmunge) could not do its work; the credential may be fine."""
        return self.code == 0 or self.code in DAEMON_ERRORS


@dataclass(frozen=True)
class Decoded:
    """What munged vouches for: who made the credential, when, and what it carries."""

    uid: int
    gid: int
    payload: bytes
    encode_time: int
    ttl: int


_lib: Any = None
_libc: Any = None
_loading = threading.Lock()


def load() -> tuple[Any, Any]:
    """libmunge.so.2 and libc (for `free`), with their prototypes, loaded once."""
    global _lib, _libc
    with _loading:
        if _lib is None:
            try:
                lib = ctypes.CDLL("libmunge.so.2")
            except OSError as exc:
                raise MungeError(
                    0, f"libmunge.so.2 cannot be loaded ({exc}); install MUNGE (libmunge2)"
                ) from None
            vp, cp, i = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
            lib.munge_ctx_create.restype = vp
            lib.munge_ctx_create.argtypes = []
            lib.munge_ctx_destroy.restype = None
            lib.munge_ctx_destroy.argtypes = [vp]
            lib.munge_strerror.restype = cp
            lib.munge_strerror.argtypes = [i]
            lib.munge_ctx_strerror.restype = cp
            lib.munge_ctx_strerror.argtypes = [vp]
            lib.munge_encode.restype = i
            lib.munge_encode.argtypes = [ctypes.POINTER(vp), vp, cp, i]
            lib.munge_decode.restype = i
            lib.munge_decode.argtypes = [
                cp,
                vp,
                ctypes.POINTER(vp),
                ctypes.POINTER(i),
                ctypes.POINTER(ctypes.c_uint32),  # uid_t
                ctypes.POINTER(ctypes.c_uint32),  # gid_t
            ]
            # munge_ctx_set/get are variadic: no argtypes, every argument passed typed.
            lib.munge_ctx_set.restype = i
            lib.munge_ctx_get.restype = i
            libc = ctypes.CDLL(None)
            libc.free.restype = None
            libc.free.argtypes = [vp]
            _lib, _libc = lib, libc
    return _lib, _libc


def _error(lib: Any, ctx: Any, code: int) -> MungeError:
    """The context's message (it names the socket when munged is not reachable), else the
    code's."""
    text = lib.munge_ctx_strerror(ctx) if ctx else None
    if not text:
        text = lib.munge_strerror(code)
    return MungeError(code, (text or b"unknown MUNGE error").decode("utf-8", "replace"))


def _context(lib: Any, socket: str | None) -> Any:
    ctx = lib.munge_ctx_create()
    if not ctx:
        raise MungeError(EMUNGE_NO_MEMORY, "munge_ctx_create failed (out of memory)")
    ctx = ctypes.c_void_p(ctx)
    if socket:
        rc = lib.munge_ctx_set(ctx, ctypes.c_int(OPT_SOCKET), ctypes.c_char_p(socket.encode()))
        if rc:
            err = _error(lib, ctx, rc)
            lib.munge_ctx_destroy(ctx)
            raise err
    return ctx


def encode(payload: bytes, socket: str | None = None, ttl_s: int = 0) -> str:
    """A credential carrying `payload`, made by the munged at `socket` (libmunge's default
    when None). `ttl_s` 0 is munged's default time-to-live. Blocks while munged answers."""
    lib, libc = load()
    ctx = _context(lib, socket)
    try:
        if ttl_s:
            rc = lib.munge_ctx_set(ctx, ctypes.c_int(OPT_TTL), ctypes.c_int(ttl_s))
            if rc:
                raise _error(lib, ctx, rc)
        cred = ctypes.c_void_p()
        rc = lib.munge_encode(ctypes.byref(cred), ctx, payload, len(payload))
        try:
            if rc or not cred.value:
                raise _error(lib, ctx, rc or EMUNGE_SNAFU)
            return ctypes.string_at(cred.value).decode("ascii")
        finally:
            if cred.value:
                libc.free(cred)
    finally:
        lib.munge_ctx_destroy(ctx)


def decode(credential: str, socket: str | None = None) -> Decoded:
    """Ask the munged at `socket` to check `credential`: who made it, when, and its payload.
    Raises `MungeError` for every credential munged does not accept (expired, replayed,
    another key...) and when munged cannot be asked. Blocks: call it from a thread.

    The text is checked first (`CREDENTIAL`, `MAX_CREDENTIAL`): it is the caller's input,
    and libmunge need never see anything but one line of base64."""
    if len(credential) > MAX_CREDENTIAL:
        raise MungeError(EMUNGE_BAD_LENGTH, MESSAGES[EMUNGE_BAD_LENGTH])
    if not CREDENTIAL.fullmatch(credential):
        raise MungeError(EMUNGE_BAD_CRED, MESSAGES[EMUNGE_BAD_CRED])
    lib, libc = load()
    ctx = _context(lib, socket)
    buf, length = ctypes.c_void_p(), ctypes.c_int()
    uid, gid = ctypes.c_uint32(), ctypes.c_uint32()
    try:
        rc = lib.munge_decode(
            credential.encode("ascii"),
            ctx,
            ctypes.byref(buf),
            ctypes.byref(length),
            ctypes.byref(uid),
            ctypes.byref(gid),
        )
        if rc:
            raise _error(lib, ctx, rc)
        if length.value < 0 or length.value > MAX_PAYLOAD:
            raise MungeError(EMUNGE_BAD_LENGTH, "the MUNGE credential's payload is too long")
        payload = ctypes.string_at(buf.value, length.value) if buf.value else b""
        when, ttl = ctypes.c_long(), ctypes.c_int()  # time_t; int
        if lib.munge_ctx_get(ctx, ctypes.c_int(OPT_ENCODE_TIME), ctypes.byref(when)) or (
            lib.munge_ctx_get(ctx, ctypes.c_int(OPT_TTL), ctypes.byref(ttl))
        ):
            raise MungeError(EMUNGE_SNAFU, "munged did not say when the credential was made")
        return Decoded(uid.value, gid.value, payload, when.value, ttl.value)
    finally:
        if buf.value:  # allocated for some errors too (expired, rewound, replayed)
            libc.free(buf)
        lib.munge_ctx_destroy(ctx)


def login_payload(audience: str, now: float | None = None) -> bytes:
    """The payload of a login credential: for XCE's cluster `audience`, unique, and dated."""
    return json.dumps(
        {
            "aud": audience,
            "nonce": secrets.token_urlsafe(24),
            "ts": round(time.time() if now is None else now, 3),
        },
        separators=(",", ":"),
    ).encode()


def login_credential(audience: str, socket: str | None = None) -> str:
    """A credential to log in to the cluster `audience` with (`POST /api/v1/auth/munge`)."""
    return encode(login_payload(audience), socket)


DEFAULT_KEY = "/etc/munge/munge.key"
KEY_BYTES = 1024  # the classic `dd if=/dev/urandom bs=1 count=1024` key; mungekey makes 128


def create_key(path: str, size: int = KEY_BYTES) -> str:
    """Write a new MUNGE key of `size` random bytes at `path`, 0400, owned by the `munge`
    account when this host has one (munged runs as it and refuses a key that others may
    read); returns the owner's name. Never replaces a file: every node must hold the same
    key, so a second key would silently split the cluster (`FileExistsError`)."""
    import os
    import pwd

    try:
        owner: pwd.struct_passwd | None = pwd.getpwnam("munge")
    except KeyError:
        owner = None
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        os.makedirs(folder, mode=0o700)  # munged wants no group/other write on its key's folder
        if owner is not None and os.geteuid() == 0:
            os.chown(folder, owner.pw_uid, owner.pw_gid)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o400)
    try:
        data = memoryview(secrets.token_bytes(size))
        while data:
            data = data[os.write(fd, data) :]
        os.fsync(fd)
        if owner is not None and os.geteuid() == 0:
            os.fchown(fd, owner.pw_uid, owner.pw_gid)
    except BaseException:
        os.unlink(path)
        raise
    finally:
        os.close(fd)
    if owner is not None and os.geteuid() == 0:
        return owner.pw_name
    return pwd.getpwuid(os.geteuid()).pw_name
